"""ParseExampleV2 (dense features) in a graph TensorFlow wrote, against TensorFlow's answers, and its errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import run_op

from poolserve.proto import example_pb2
from poolserve.runtime.builder import shape
from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.saved_model import SavedModel, load_saved_model

FIXTURES = Path(__file__).parent / "fixtures" / "saved_models"
EXPECTED = np.load(FIXTURES / "tf1_classify.npz")


def example(**features: Any) -> bytes:
    ex = example_pb2.Example()
    for key, values in features.items():
        feature = ex.features.feature[key]
        if all(isinstance(v, bytes) for v in values):
            feature.bytes_list.value.extend(values)
        elif all(isinstance(v, int) for v in values):
            feature.int64_list.value.extend(values)
        else:
            feature.float_list.value.extend(values)
    return ex.SerializeToString()


def strings(*blobs: bytes) -> np.ndarray:
    out = np.empty(len(blobs), dtype=object)
    out[:] = list(blobs)
    return out


@pytest.fixture(scope="module")
def model() -> Any:
    saved = load_saved_model(FIXTURES / "tf1_classify")
    yield saved
    saved.close()


def run(model: SavedModel, signature: str, serialized: np.ndarray) -> list[np.ndarray]:
    sig = model.signatures[signature]
    return list(model.session.run([o.tensor for o in sig.outputs], {sig.inputs[0].tensor: serialized}))


def test_dense_features_and_defaults_match_tensorflow(model: SavedModel) -> None:
    classes, scores = run(
        model, "serving_default", strings(example(x=[1.0, 2.0]), example(x=[0.5, -1.0], k=[2]))
    )
    np.testing.assert_allclose(scores, EXPECTED["plain_scores"], rtol=1e-6)
    assert classes.tolist() == [[b"a", b"b", b"c"]] * 2
    (value,) = run(model, "regress", strings(example(x=[1.0, 2.0]), example(x=[0.5, -1.0], k=[2])))
    np.testing.assert_allclose(value, EXPECTED["plain_value"], rtol=1e-6)
    # serialized context + example: protobuf merges them, as TF Serving feeds ExampleListWithContext
    (value,) = run(model, "regress", strings(example(k=[4]) + example(x=[1.0, 1.0])))
    np.testing.assert_allclose(value, EXPECTED["context_value"], rtol=1e-6)


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        (example(k=[1]), "Feature: x (data type: float) is required but could not be found (example 0)"),
        (
            example(x=[1, 2]),
            "Key: x, Index: 0.  Data types don't match. Data type: int64 but expected type: float",
        ),
        (
            example(x=[1.0]),
            "Key: x, Index: 0.  Number of float values != expected.  values size: 1 but output shape: [2]",
        ),
        (b"\xff\xff", "Could not parse example input 0"),
    ],
)
def test_bad_examples_name_the_feature(model: SavedModel, blob: bytes, message: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        run(model, "regress", strings(blob))
    assert message in info.value.message


# --- sparse and ragged features: tools/make_sparse_fixture.py's SavedModel and TensorFlow's answers --------

SPARSE = json.loads((FIXTURES / "tf1_parse_sparse.json").read_text())


def sparse_example(features: dict[str, list[Any]]) -> bytes:
    """An Example from the fixture's JSON (feature -> [kind, values])."""
    ex = example_pb2.Example()
    for key, (kind, values) in features.items():
        field = getattr(ex.features.feature[key], kind)
        field.SetInParent()  # an empty list is still the feature's kind
        field.value.extend([v.encode() for v in values] if kind == "bytes_list" else values)
    return ex.SerializeToString()


@pytest.fixture(scope="module")
def sparse_model() -> Any:
    saved = load_saved_model(FIXTURES / "tf1_parse_sparse")
    yield saved
    saved.close()


def assert_matches(got: dict[str, np.ndarray], expected: dict[str, Any]) -> None:
    assert sorted(got) == sorted(expected)
    for name, want in expected.items():
        value = got[name]
        assert (str(value.dtype), list(value.shape)) == (want["dtype"], want["shape"]), name
        if value.dtype == object:
            assert [v.decode() for v in value.ravel().tolist()] == want["data"], name
        else:
            np.testing.assert_array_equal(value, np.asarray(want["data"], value.dtype).reshape(value.shape))


@pytest.mark.parametrize(
    ("signature", "case", "count"),
    [
        ("serving_default", "serving_default", None),
        ("single", "single", None),
        ("serving_default", "empty_batch", 0),
    ],
)
def test_sparse_and_ragged_features_match_tensorflow(
    sparse_model: SavedModel, signature: str, case: str, count: int | None
) -> None:
    blobs = [sparse_example(e) for e in SPARSE["examples"]]
    if signature == "single":
        serialized: np.ndarray = np.asarray(blobs[0], dtype=object)
    else:
        serialized = strings(*blobs[:count])
    sig = sparse_model.signatures[signature]
    values = sparse_model.session.run([o.tensor for o in sig.outputs], {sig.inputs[0].tensor: serialized})
    assert_matches(dict(zip([o.name for o in sig.outputs], values, strict=True)), SPARSE[case])


@pytest.mark.parametrize(
    ("features", "message"),
    [
        (
            {"ids": ["float_list", [1.5]]},
            "Key: ids, Index: 0.  Data types don't match. Expected type: int64, Actual type: float",
        ),
        (
            {"tags": ["bytes_list", ["q"]]},
            "Key: tags, Index: 0.  Data types don't match. Expected type: int64, Actual type: string",
        ),
    ],
)
def test_a_sparse_or_ragged_feature_of_the_wrong_kind_names_it(
    sparse_model: SavedModel, features: dict[str, list[Any]], message: str
) -> None:
    sig = sparse_model.signatures["serving_default"]
    with pytest.raises(InvalidArgumentError) as info:
        sparse_model.session.run(
            [o.tensor for o in sig.outputs], {sig.inputs[0].tensor: strings(sparse_example(features))}
        )
    assert message in info.value.message


# --- TF1's ParseExample and ParseSingleExample (keys as inputs or attrs; tools/op_fuzz_parsing.py compares
# them with TensorFlow) -------------------------------------------------------------------------------------


def _v1_examples() -> np.ndarray:
    first = example_pb2.Example()
    first.features.feature["age"].int64_list.value.append(30)
    first.features.feature["tags"].bytes_list.value.extend([b"a", b"bc"])
    second = example_pb2.Example()
    second.features.feature["tags"].bytes_list.value.append(b"d")
    return strings(first.SerializeToString(), second.SerializeToString())


def test_v1_parse_example_takes_keys_as_scalar_inputs() -> None:
    key = lambda k: np.array(k.encode(), dtype=object)  # noqa: E731
    out = run_op(
        "ParseExample",
        [_v1_examples(), np.zeros(0, dtype=object), key("tags"), key("age"), np.array([-1], np.int64)],
        {
            "Nsparse": 1,
            "Ndense": 1,
            "sparse_types": [np.dtype(object)],
            "Tdense": [np.int64],
            "dense_shapes": [shape([1])],
        },
        num_outputs=4,
    )
    indices, values, dense_shape, age = out
    np.testing.assert_array_equal(indices, [[0, 0], [0, 1], [1, 0]])
    assert values.tolist() == [b"a", b"bc", b"d"]
    np.testing.assert_array_equal(dense_shape, [2, 2])
    np.testing.assert_array_equal(age, [[30], [-1]])  # the second example takes the default


def test_v1_parse_single_example_takes_keys_as_attrs() -> None:
    one = np.array(_v1_examples()[0], dtype=object)
    indices, values, dense_shape, age = run_op(
        "ParseSingleExample",
        [one, np.zeros(0, np.int64)],
        {
            "num_sparse": 1,
            "sparse_keys": ["tags"],
            "dense_keys": ["age"],
            "sparse_types": [np.dtype(object)],
            "Tdense": [np.int64],
            "dense_shapes": [shape([1])],
        },
        num_outputs=4,
    )
    np.testing.assert_array_equal(indices, [[0], [1]])
    assert values.tolist() == [b"a", b"bc"] and dense_shape.tolist() == [2] and age.tolist() == [30]
    with pytest.raises(InvalidArgumentError, match="Expected serialized to be a scalar"):
        run_op(
            "ParseSingleExample",
            [_v1_examples(), np.zeros(0, np.int64)],
            {"num_sparse": 0, "dense_keys": ["age"], "Tdense": [np.int64], "dense_shapes": [shape([1])]},
            num_outputs=1,
        )
