"""server/errors.py: the one mapping from canonical error codes to HTTP statuses, and the error body."""

from __future__ import annotations

from poolserve.runtime.errors import Code, DeadlineExceededError
from poolserve.server import errors


def test_error_status_mapping() -> None:
    expected = {
        Code.CANCELLED: 499,
        Code.INVALID_ARGUMENT: 400,
        Code.FAILED_PRECONDITION: 400,
        Code.OUT_OF_RANGE: 400,
        Code.DEADLINE_EXCEEDED: 504,
        Code.NOT_FOUND: 404,
        Code.ALREADY_EXISTS: 409,
        Code.ABORTED: 409,
        Code.PERMISSION_DENIED: 403,
        Code.RESOURCE_EXHAUSTED: 429,
        Code.UNIMPLEMENTED: 501,
        Code.UNAVAILABLE: 503,
        Code.UNAUTHENTICATED: 401,
        Code.INTERNAL: 500,
        Code.UNKNOWN: 500,
        Code.DATA_LOSS: 500,
    }
    assert {code: errors.http_status(code) for code in expected} == expected
    assert errors.http_status(999) == 500
    response = errors.error_response(DeadlineExceededError("too late"))
    assert response.status_code == 504
    assert response.body == b'{"error":"too late","code":"DEADLINE_EXCEEDED"}'
