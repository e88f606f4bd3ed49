"""The one mapping from runtime errors to HTTP answers (and gRPC statuses), and the app's exception handlers.

Error bodies are ``{"error": message, "code": "INVALID_ARGUMENT"}`` (TF Serving and KServe clients read
``error``). Status codes follow TF Serving's mapping of canonical codes. Anything unexpected is logged with
its traceback and the request id, and answered 500 without details.
"""

from __future__ import annotations

import logging
from typing import Any

import grpc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from poolserve.runtime.errors import Code, OpError, python_error
from poolserve.server.routes import allowed_methods

log = logging.getLogger("poolserve")

REQUEST_ID_HEADER = "X-Request-Id"

_STATUS: dict[Code, int] = {
    Code.OK: 200,
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
}

_CODE_FOR_STATUS: dict[int, Code] = {
    400: Code.INVALID_ARGUMENT,
    401: Code.UNAUTHENTICATED,
    403: Code.PERMISSION_DENIED,
    404: Code.NOT_FOUND,
    405: Code.UNIMPLEMENTED,
    408: Code.DEADLINE_EXCEEDED,
    409: Code.ABORTED,
    413: Code.RESOURCE_EXHAUSTED,
    415: Code.INVALID_ARGUMENT,
    429: Code.RESOURCE_EXHAUSTED,
    431: Code.RESOURCE_EXHAUSTED,
    501: Code.UNIMPLEMENTED,
    503: Code.UNAVAILABLE,
    504: Code.DEADLINE_EXCEEDED,
}


def http_status(code: Code | int) -> int:
    """The HTTP status for a canonical error code (500 for INTERNAL, UNKNOWN, DATA_LOSS, ...)."""
    try:
        return _STATUS.get(Code(code), 500)
    except ValueError:
        return 500


_GRPC_STATUS: dict[int, grpc.StatusCode] = {s.value[0]: s for s in grpc.StatusCode}


def grpc_status(code: Code | int) -> grpc.StatusCode:
    """The gRPC status for a canonical error code: the same number (TF Serving answers its errors so);
    UNKNOWN for a number gRPC does not have."""
    return _GRPC_STATUS.get(int(code), grpc.StatusCode.UNKNOWN)


def error_body(message: str, code: Code | int, **extra: Any) -> dict[str, Any]:
    try:
        name = Code(code).name
    except ValueError:
        name = Code.UNKNOWN.name
    if not message.isascii():  # O(1); most messages are
        # a lone surrogate a client sent (JSON's "\ud800"), named back, has no UTF-8: escaped instead
        message = message.encode("utf-8", "backslashreplace").decode("utf-8")
    return {"error": message, "code": name, **extra}


def raw_headers(headers: dict[str, str] | None) -> list[tuple[bytes, bytes]]:
    """Headers as an ASGI message carries them: lower-case names, latin-1 bytes."""
    if not headers:
        return []
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]


def error_response(exc: OpError, headers: dict[str, str] | None = None) -> JSONResponse:
    """The answer for a runtime error; ``python_error`` says when it is also ValueError or TypeError (where
    TensorFlow's Python client raises those), so a remote session raises the same class."""
    python = python_error(exc)
    body = (
        error_body(exc.message, exc.code)
        if python is None
        else error_body(exc.message, exc.code, python_error=python)
    )
    return JSONResponse(body, status_code=http_status(exc.code), headers=headers)


def status_body(status: int, message: str) -> dict[str, Any]:
    """The error body for a bare HTTP status (413, 503, ...)."""
    return error_body(message, _CODE_FOR_STATUS.get(status, Code.UNKNOWN))


def status_response(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """An error answer for a bare HTTP status (413, 503, ...)."""
    return JSONResponse(status_body(status, message), status_code=status, headers=headers)


def validation_message(exc: RequestValidationError) -> str:
    """FastAPI's validation errors as one line naming each field."""
    parts = []
    for e in exc.errors():
        loc = [str(p) for p in e.get("loc", ()) if p not in ("body", "query", "path", "header")]
        where = ".".join(loc) or "request"
        if e.get("type") == "json_invalid":
            ctx = e.get("ctx") or {}
            parts.append(f"malformed JSON: {ctx.get('error', e.get('msg', ''))}")
        else:
            parts.append(f"{where}: {e.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


async def _op_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, OpError)
    # an error may carry headers for its answer (a shed request's Retry-After)
    return error_response(exc, headers=getattr(exc, "headers", None))


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return status_response(400, validation_message(exc))


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    headers = dict(exc.headers or {})
    if exc.status_code == 405:  # every method the path serves, not only its first route's
        allowed = allowed_methods(request.app.router.routes, request.scope)
        headers["Allow"] = ", ".join(allowed)
        detail = f"Method {request.method} is not allowed on {request.url.path}; it serves {headers['Allow']}"
    return status_response(exc.status_code, detail, headers=headers)


def internal_error_body(request_id: str) -> dict[str, Any]:
    return {"error": "internal error", "code": Code.INTERNAL.name, "request_id": request_id}


def install(app: FastAPI) -> None:
    """Registers the handlers. Unexpected exceptions are caught by the app's middleware (server/app.py),
    which knows the request id and logs them."""
    app.add_exception_handler(OpError, _op_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
