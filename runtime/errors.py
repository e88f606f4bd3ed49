"""Error classes tied to TensorFlow's canonical codes (as ``tf.errors`` has them).

Every failure a user can cause is one of these, with the node or tensor it concerns in the message.
"""

from __future__ import annotations

import enum


class Code(enum.IntEnum):
    """Canonical error codes (``tensorflow/core/protobuf/error_codes.proto``)."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


class OpError(Exception):
    """A runtime failure with a canonical code; ``node_name`` names the node it happened in, if any."""

    code: Code = Code.UNKNOWN

    def __init__(self, message: str, node_name: str | None = None, code: Code | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.node_name = node_name
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, node_name={self.node_name!r})"

    def __reduce__(self) -> tuple[type[OpError], tuple[str, str | None]]:
        return (type(self), (self.message, self.node_name))


class CancelledError(OpError):
    code = Code.CANCELLED


class UnknownError(OpError):
    code = Code.UNKNOWN


class InvalidArgumentError(OpError):
    code = Code.INVALID_ARGUMENT


class DeadlineExceededError(OpError):
    code = Code.DEADLINE_EXCEEDED


class NotFoundError(OpError):
    code = Code.NOT_FOUND


class AlreadyExistsError(OpError):
    code = Code.ALREADY_EXISTS


class PermissionDeniedError(OpError):
    code = Code.PERMISSION_DENIED


class ResourceExhaustedError(OpError):
    code = Code.RESOURCE_EXHAUSTED


class FailedPreconditionError(OpError):
    code = Code.FAILED_PRECONDITION


class AbortedError(OpError):
    code = Code.ABORTED


class OutOfRangeError(OpError):
    code = Code.OUT_OF_RANGE


class UnimplementedError(OpError):
    code = Code.UNIMPLEMENTED


class InternalError(OpError):
    code = Code.INTERNAL


class UnavailableError(OpError):
    code = Code.UNAVAILABLE


class DataLossError(OpError):
    code = Code.DATA_LOSS


class UnauthenticatedError(OpError):
    code = Code.UNAUTHENTICATED


# The arguments of ``Session.run`` that TensorFlow's Python client refuses before anything runs, it refuses
# with ValueError (a fetch it cannot interpret, a feed of the wrong shape) or TypeError (a feed_dict key it
# cannot interpret, a value it cannot convert to the tensor's dtype). These keep their canonical code (a
# server answers them as it answers any other) and are also that Python error, so ``except ValueError``
# catches them as it catches TensorFlow's.


class InvalidArgumentValueError(InvalidArgumentError, ValueError):
    """INVALID_ARGUMENT where TensorFlow raises ValueError: a feed of the wrong shape, a malformed fetch."""


class InvalidArgumentTypeError(InvalidArgumentError, TypeError):
    """INVALID_ARGUMENT where TensorFlow raises TypeError: a fed value that does not convert to the tensor's
    dtype, a malformed feed_dict key."""


class NotFoundValueError(NotFoundError, ValueError):
    """NOT_FOUND where TensorFlow raises ValueError: a fetch naming no tensor or operation of the graph."""


class NotFoundTypeError(NotFoundError, TypeError):
    """NOT_FOUND where TensorFlow raises TypeError: a feed_dict key naming no tensor of the graph."""


_BY_CODE: dict[Code, type[OpError]] = {
    cls.code: cls
    for cls in (
        CancelledError,
        UnknownError,
        InvalidArgumentError,
        DeadlineExceededError,
        NotFoundError,
        AlreadyExistsError,
        PermissionDeniedError,
        ResourceExhaustedError,
        FailedPreconditionError,
        AbortedError,
        OutOfRangeError,
        UnimplementedError,
        InternalError,
        UnavailableError,
        DataLossError,
        UnauthenticatedError,
    )
}


_BY_PYTHON_ERROR: dict[tuple[Code, str], type[OpError]] = {
    (Code.INVALID_ARGUMENT, "ValueError"): InvalidArgumentValueError,
    (Code.INVALID_ARGUMENT, "TypeError"): InvalidArgumentTypeError,
    (Code.NOT_FOUND, "ValueError"): NotFoundValueError,
    (Code.NOT_FOUND, "TypeError"): NotFoundTypeError,
}


def python_error(error: OpError) -> str | None:
    """ "ValueError" or "TypeError" when the error is also that Python error (above), else None: what a
    server's answer says beside the code, so that a remote session raises the same class."""
    return (
        "ValueError"
        if isinstance(error, ValueError)
        else "TypeError"
        if isinstance(error, TypeError)
        else None
    )


def error_class(code: Code | int, python: str | None = None) -> type[OpError]:
    """The exception class for a canonical code (``UnknownError`` for codes without one); ``python``, what
    ``python_error`` gave, picks the class that is also that Python error."""
    if python is not None and (cls := _BY_PYTHON_ERROR.get((Code(code), python))) is not None:
        return cls
    return _BY_CODE.get(Code(code), UnknownError)
