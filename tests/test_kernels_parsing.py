"""ParseExampleV2 (dense features) in a graph TensorFlow wrote, against TensorFlow's answers, and its errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from poolserve.proto import example_pb2
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
