import pickle

import pytest

from poolserve.runtime import errors


def test_codes_match_tensorflow():
    expected = {
        "CancelledError": 1,
        "UnknownError": 2,
        "InvalidArgumentError": 3,
        "DeadlineExceededError": 4,
        "NotFoundError": 5,
        "AlreadyExistsError": 6,
        "PermissionDeniedError": 7,
        "ResourceExhaustedError": 8,
        "FailedPreconditionError": 9,
        "AbortedError": 10,
        "OutOfRangeError": 11,
        "UnimplementedError": 12,
        "InternalError": 13,
        "UnavailableError": 14,
    }
    for name, code in expected.items():
        cls = getattr(errors, name)
        assert issubclass(cls, errors.OpError)
        assert cls.code == code
        assert errors.error_class(code) is cls
        # tf.errors.OpError.error_code: the number, on every instance
        assert cls("m").error_code == code and type(cls("m").error_code) is int


def test_op_error_carries_node_and_pickles():
    e = errors.InvalidArgumentError("bad thing", "layer/x")
    assert str(e) == "bad thing" and e.node_name == "layer/x"
    e2 = pickle.loads(pickle.dumps(e))
    assert type(e2) is errors.InvalidArgumentError and e2.node_name == "layer/x"
    with pytest.raises(errors.OpError):
        raise e
    assert errors.OpError("x", code=errors.Code.ABORTED).code == errors.Code.ABORTED


@pytest.mark.parametrize(
    ("cls", "base", "python"),
    [
        (errors.InvalidArgumentValueError, errors.InvalidArgumentError, ValueError),
        (errors.InvalidArgumentTypeError, errors.InvalidArgumentError, TypeError),
        (errors.NotFoundValueError, errors.NotFoundError, ValueError),
        (errors.NotFoundTypeError, errors.NotFoundError, TypeError),
    ],
)
def test_argument_errors_keep_their_code_and_are_pythons_too(cls, base, python):
    e = cls("Cannot feed value of shape (2,) for Tensor 'x:0', which has shape (3,)")
    assert isinstance(e, base) and isinstance(e, python)
    assert e.code == base.code and errors.error_class(e.code) is base
    assert str(e).startswith("Cannot feed") and e.args == (e.message,)
    e2 = pickle.loads(pickle.dumps(e))
    assert type(e2) is cls and e2.message == e.message
