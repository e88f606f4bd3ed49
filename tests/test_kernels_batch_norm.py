"""``FusedBatchNorm``, ``V2`` and ``V3`` in training mode (``is_training=true``, runtime/kernels/nn_ops.py), and
the Keras 2 layer norm written with it, against TensorFlow's outputs (``tools/make_batch_norm_training_fixture.py``).
Inference mode is tested with the other nn kernels (test_kernels_nn.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import run_op

from poolserve import Session, load_graph_def, load_saved_model
from poolserve.runtime.errors import InvalidArgumentError

FIXTURES = Path(__file__).parent / "fixtures" / "kernels"
F32 = np.float32
RNG = np.random.default_rng(77)


def load(name: str) -> dict[str, dict[str, Any]]:
    """The fixture's arrays by prefix (``in``, ``out``, ...) and tensor name."""
    out: dict[str, dict[str, Any]] = {}
    with np.load(FIXTURES / f"{name}.npz") as data:
        for key in data.files:
            prefix, _, tensor = key.partition(":")
            out.setdefault(prefix, {})[tensor] = data[key]
    return out


def assert_tf_close(got: Any, want: Any, name: str) -> None:
    """TensorFlow's dtype and shape; values within 1e-5 of the largest (NaN where TensorFlow has NaN)."""
    assert got.dtype == want.dtype and got.shape == want.shape, (name, got.dtype, got.shape, want.shape)
    if want.size:
        scale = float(np.nanmax(np.abs(want.astype(np.float64)))) or 1.0
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * scale, err_msg=name)


@pytest.fixture(scope="module")
def training_graph() -> tuple[dict[str, dict[str, Any]], list[Any]]:
    data = load("batch_norm_training")
    with Session(load_graph_def(FIXTURES / "batch_norm_training.pb")) as sess:
        got = sess.run(list(data["out"]), data["in"])
    return data, got


def test_training_batch_norm_matches_tensorflow(training_graph: Any) -> None:
    # every output of V1, V2 and V3 nodes: NHWC, NCHW, 5-D, half input, with and without running statistics,
    # one value per channel, Keras 2's layer-norm shape; TensorFlow's Eigen kernels (5-D included)
    data, got = training_graph
    for (name, want), value in zip(data["out"].items(), got, strict=True):
        if name.endswith(":5") and want.ndim == 0 and value.shape == (0,):
            continue  # reserve_space_3 of 4-D input: TensorFlow's default (oneDNN) kernels' shape, below
        assert_tf_close(value, want, name)


def test_training_batch_norm_matches_tensorflows_default_onednn_kernels(training_graph: Any) -> None:
    data, got = training_graph
    for name, value in zip(data["out"], got, strict=True):
        assert_tf_close(value, data["onednn"][name], name)
    # reserve_space_3: [0] for 4-D input as oneDNN gives it, a scalar for 5-D (TensorFlow's Eigen kernel)
    assert data["onednn"]["nhwc/bn:5"].shape == (0,) and data["onednn"]["ndhwc/bn:5"].shape == ()


def test_fixture_covers_the_statistics_rules(training_graph: Any) -> None:
    # what the kernel must reproduce, read from TensorFlow's outputs: the batch variance output is
    # Bessel-corrected, reserve_space_2 is not, and running statistics mix in with exponential_avg_factor
    data, _ = training_graph
    ins, outs = data["in"], data["out"]
    x = ins["nhwc/x:0"].astype(np.float64)
    n = x.size // x.shape[-1]
    biased = x.var(axis=(0, 1, 2))
    np.testing.assert_allclose(outs["nhwc/bn:4"], biased, rtol=1e-5)
    np.testing.assert_allclose(outs["nhwc/bn:2"], biased * n / (n - 1), rtol=1e-5)
    x = ins["nhwc_avg/x:0"].astype(np.float64)
    n = x.size // x.shape[-1]
    f = 0.25
    np.testing.assert_allclose(
        outs["nhwc_avg/bn:1"], (1 - f) * ins["nhwc_avg/mean:0"] + f * x.mean(axis=(0, 1, 2)), rtol=1e-5
    )
    np.testing.assert_allclose(
        outs["nhwc_avg/bn:2"],
        (1 - f) * ins["nhwc_avg/variance:0"] + f * x.var(axis=(0, 1, 2)) * n / (n - 1),
        rtol=1e-5,
    )
    np.testing.assert_allclose(outs["nhwc_avg/bn:3"], x.mean(axis=(0, 1, 2)), rtol=1e-5)
    # one value per channel: variance 0 (not n / 0), so y is the offset
    assert (outs["one_value/bn:2"] == 0).all() and (outs["one_value/bn:4"] == 0).all()
    np.testing.assert_allclose(outs["one_value/bn:0"].ravel(), ins["one_value/offset:0"], rtol=1e-6)


def keras2_outputs() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    data = load("k2_layer_norm")
    return data["in"], data["out"], data["saved"]


def test_keras2_layer_norm_frozen_graph_matches_tensorflow() -> None:
    # tf_keras' LayerNormalization after a Dense, over two axes, and in a transformer encoder block
    graph_def = load_graph_def(FIXTURES / "k2_layer_norm.pb")
    norms = [n for n in graph_def.node if n.op == "FusedBatchNormV3"]
    assert len(norms) == 3 and all(n.attr["is_training"].b for n in norms)
    ins, outs, _ = keras2_outputs()
    with Session(graph_def) as sess:
        got = sess.run(list(outs), ins)
    for (name, want), value in zip(outs.items(), got, strict=True):
        assert_tf_close(value, want, name)


def test_keras2_layer_norm_saved_model_matches_tensorflow() -> None:
    model = load_saved_model(FIXTURES / "k2_layer_norm_saved")
    ops = [n.op for n in model.session.graph.nodes.values()]
    assert ops.count("FusedBatchNormV3") == 3
    ins, _, saved = keras2_outputs()
    got = model.run({"x": next(iter(ins.values()))})
    assert sorted(got) == sorted(saved) == ["block", "ln", "ln_axes"]
    for key, want in saved.items():
        assert_tf_close(got[key], want, key)
    model.close()


def bn_params(c: int) -> list[Any]:
    return [RNG.uniform(0.5, 1.5, c).astype(F32), RNG.standard_normal(c).astype(F32)]


EMPTY = np.zeros(0, F32)


def test_training_batch_norm_of_an_empty_batch() -> None:
    # TensorFlow: NaN batch statistics, reserve spaces as oneDNN leaves them (0), y empty
    x = np.zeros((0, 3, 3, 4), F32)
    got = run_op("FusedBatchNormV3", [x, *bn_params(4), EMPTY, EMPTY], {"U": F32}, num_outputs=6)
    assert got[0].shape == (0, 3, 3, 4) and got[0].dtype == F32
    assert np.isnan(got[1]).all() and np.isnan(got[2]).all() and got[1].shape == (4,)
    assert (got[3] == 0).all() and (got[4] == 0).all() and got[5].shape == (0,)


def test_training_batch_norm_keeps_its_inputs_and_reads_strided_ones() -> None:
    x = (RNG.standard_normal((2, 5, 4, 3)) * 4 + 9).astype(F32)
    params = bn_params(3)
    attrs = {"U": F32, "epsilon": 0.01}
    got = run_op("FusedBatchNormV3", [x, *params, EMPTY, EMPTY], attrs, num_outputs=6, feed=True)
    mean, var = x.mean(axis=(0, 1, 2)), x.var(axis=(0, 1, 2))
    want = (x - mean) / np.sqrt(var + F32(0.01)) * params[0] + params[1]
    np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-5)
    # the same values in NCHW from a transposed (non-contiguous) view: the kernel copies, it does not assume
    xt = x.transpose(0, 3, 1, 2)
    nchw = {**attrs, "data_format": "NCHW"}
    got_t = run_op("FusedBatchNormV3", [xt, *params, EMPTY, EMPTY], nchw, num_outputs=6, feed=True)
    np.testing.assert_allclose(got_t[0], want.transpose(0, 3, 1, 2), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_t[1], got[1], rtol=1e-6)


def test_training_batch_norm_errors() -> None:
    x = RNG.standard_normal((2, 3, 3, 5)).astype(F32)
    scale, offset = bn_params(5)
    with pytest.raises(
        InvalidArgumentError,
        match="When exponential_avg_factor != 1, mean must have the same number of elements as the channels "
        "of x, got 0 and 5",
    ):
        run_op(
            "FusedBatchNormV3",
            [x, scale, offset, EMPTY, EMPTY],
            {"exponential_avg_factor": 0.5},
            num_outputs=6,
        )
    with pytest.raises(InvalidArgumentError, match="offset must have the same number of elements"):
        run_op("FusedBatchNormV3", [x, scale, offset[:3], EMPTY, EMPTY], {}, num_outputs=6)
    with pytest.raises(InvalidArgumentError, match=r"input must be 4 or 5-dimensional\[3,3,5\]"):
        run_op("FusedBatchNormV3", [x[0], scale, offset, EMPTY, EMPTY], {}, num_outputs=6)
    # exponential_avg_factor 1 ignores the given statistics, of any length
    got = run_op("FusedBatchNorm", [x, scale, offset, EMPTY[:0], np.ones(2, F32)], {}, num_outputs=5)
    np.testing.assert_allclose(got[1], x.mean(axis=(0, 1, 2)), rtol=1e-5, atol=1e-6)
