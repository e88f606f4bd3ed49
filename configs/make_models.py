"""Builds the example models of the default configuration.

Run ``python -m poolserve.configs.make_models [OUT_DIR]``.

The graphs are written with ``runtime.builder`` (no TensorFlow), named the way a frozen Keras model's
nodes are ("dense/MatMul", "conv2d/BiasAdd", ...), with weights drawn from a fixed seed: running it again
writes the same bytes, which ``tests/test_configs.py`` checks against the committed files.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from poolserve.proto import graph_pb2
from poolserve.runtime.builder import GraphBuilder, shape

MODELS_DIR = Path(__file__).resolve().parent / "models"
SEED = 20240605


def _glorot(rng: np.random.Generator, shape: tuple[int, ...], fan_in: int, fan_out: int) -> np.ndarray:
    """Keras' default kernel initializer (Glorot uniform), as float32."""
    limit = math.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, size=shape).astype(np.float32)


def _bias(rng: np.random.Generator, n: int) -> np.ndarray:
    # Keras starts biases at zero; small trained-looking values make the example less trivial.
    return rng.normal(0.0, 0.05, size=n).astype(np.float32)


def _dense(
    b: GraphBuilder, x: str, kernel: np.ndarray, bias: np.ndarray | None, activation: str | None
) -> str:
    """A Keras Dense layer on a rank-2 input, in the current scope."""
    y = b.matmul(x, b.constant(kernel, name="MatMul/ReadVariableOp"))
    if bias is not None:
        y = b.bias_add(y, b.constant(bias, name="BiasAdd/ReadVariableOp"))
    if activation == "relu":
        y = b.relu(y)
    elif activation == "softmax":
        y = b.softmax(y)
    return y


def _output(b: GraphBuilder, x: str, name: str, dims: tuple[int | None, ...]) -> str:
    """The model's output: a named Identity carrying its shape, as graphs exported with shapes have it
    (servers read ``_output_shapes`` for their metadata)."""
    attrs = {"T": np.float32, "_output_shapes": [shape(dims)]}
    return str(b.op("Identity", [x], attrs, name=name))


def mlp(rng: np.random.Generator) -> graph_pb2.GraphDef:
    """input [None, 64] -> Dense 128 relu -> Dense 10 softmax -> "probabilities"."""
    b = GraphBuilder()
    x = b.placeholder("input", np.float32, (None, 64))
    with b.scope("dense"):
        h = _dense(b, x, _glorot(rng, (64, 128), 64, 128), _bias(rng, 128), "relu")
    with b.scope("dense_1"):
        y = _dense(b, h, _glorot(rng, (128, 10), 128, 10), _bias(rng, 10), "softmax")
    _output(b, y, "probabilities", (None, 10))
    return b.graph_def


def cnn(rng: np.random.Generator) -> graph_pb2.GraphDef:
    """input [None, 28, 28, 1] -> conv 3x3x16 + bias + relu -> maxpool 2x2 -> conv 3x3x32 + relu
    -> mean over H, W -> matmul 10 -> softmax -> "probabilities"."""
    b = GraphBuilder()
    x = b.placeholder("input", np.float32, (None, 28, 28, 1))
    with b.scope("conv2d"):
        w = b.constant(_glorot(rng, (3, 3, 1, 16), 9 * 1, 9 * 16), name="Conv2D/ReadVariableOp")
        h = b.conv2d(x, w, padding="SAME")
        h = b.bias_add(h, b.constant(_bias(rng, 16), name="BiasAdd/ReadVariableOp"))
        h = b.relu(h)
    with b.scope("max_pooling2d"):
        h = b.op(
            "MaxPool",
            [h],
            {
                "T": np.float32,
                "ksize": [1, 2, 2, 1],
                "strides": [1, 2, 2, 1],
                "padding": "VALID",
                "data_format": "NHWC",
            },
            name="MaxPool",
        )
    with b.scope("conv2d_1"):
        w = b.constant(_glorot(rng, (3, 3, 16, 32), 9 * 16, 9 * 32), name="Conv2D/ReadVariableOp")
        h = b.relu(b.conv2d(h, w, padding="SAME"))
    with b.scope("global_average_pooling2d"):
        axes = b.constant(np.asarray([1, 2], dtype=np.int32), name="Mean/reduction_indices")
        h = b.op("Mean", [h, axes], {"T": np.float32, "Tidx": np.int32, "keep_dims": False}, name="Mean")
    with b.scope("dense"):
        y = _dense(b, h, _glorot(rng, (32, 10), 32, 10), None, "softmax")
    _output(b, y, "probabilities", (None, 10))
    return b.graph_def


def attention(rng: np.random.Generator) -> graph_pb2.GraphDef:
    """input [None, 16, 32] -> single-head self-attention softmax(Q K^T / sqrt(d)) V + input -> "output"."""
    seq, d = 16, 32
    b = GraphBuilder()
    x = b.placeholder("input", np.float32, (None, seq, d))

    def project(scope: str) -> str:
        with b.scope(scope):
            w = b.constant(_glorot(rng, (d, d), d, d), name="MatMul/ReadVariableOp")
            # x [N, 16, 32] @ w [32, 32]: BatchMatMulV2 broadcasts the kernel over the batch
            return str(b.op("BatchMatMulV2", [x, w], {"T": np.float32}, name="MatMul"))

    with b.scope("attention"):
        q, k, v = project("query"), project("key"), project("value")
        scores = b.op("BatchMatMulV2", [q, k], {"T": np.float32, "adj_y": True}, name="MatMul")
        scale = b.constant(np.float32(1.0 / math.sqrt(d)), name="Mul/y")
        scores = b.mul(scores, scale, name="Mul")
        weights = b.softmax(scores)
        context = b.op("BatchMatMulV2", [weights, v], {"T": np.float32}, name="MatMul_1")
    out = b.add(x, context, name="add")
    _output(b, out, "output", (None, seq, d))
    return b.graph_def


def branches(rng: np.random.Generator) -> graph_pb2.GraphDef:
    """input [None, 256] -> 4 parallel (MatMul 256x256 + Relu) -> AddN -> "output".

    The kernels are stored as float16 and cast to float32 in the graph (as a mixed-precision Keras model
    keeps them) so the file stays under 1 MB; the Casts are constant-folded once per session.
    """
    n = 256
    b = GraphBuilder()
    x = b.placeholder("input", np.float32, (None, n))
    outs = []
    for i in range(4):
        with b.scope("dense" if i == 0 else f"dense_{i}"):
            kernel = b.constant(_glorot(rng, (n, n), n, n).astype(np.float16), name="MatMul/ReadVariableOp")
            kernel = b.op("Cast", [kernel], {"SrcT": np.float16, "DstT": np.float32}, name="Cast")
            outs.append(b.relu(b.matmul(x, kernel)))
    total = b.op("AddN", outs, {"T": np.float32, "N": len(outs)}, name="add_n/AddN")
    _output(b, total, "output", (None, n))
    return b.graph_def


BUILDERS: dict[str, Callable[[np.random.Generator], graph_pb2.GraphDef]] = {
    "mlp": mlp,
    "cnn": cnn,
    "attention": attention,
    "branches": branches,
}


def build_all() -> dict[str, bytes]:
    """Model name -> serialized GraphDef. Each model draws from its own seeded generator."""
    out = {}
    for i, (name, build) in enumerate(BUILDERS.items()):
        rng = np.random.default_rng([SEED, i])
        # deterministic=True orders map fields (node attrs), so the bytes never vary between runs
        out[name] = build(rng).SerializeToString(deterministic=True)
    return out


def write_models(out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, data in build_all().items():
        path = out_dir / f"{name}.pb"
        path.write_bytes(data)
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m poolserve.configs.make_models", description=__doc__)
    parser.add_argument(
        "out_dir", nargs="?", type=Path, default=MODELS_DIR, help=f"where to write (default {MODELS_DIR})"
    )
    args = parser.parse_args(argv)
    for path in write_models(args.out_dir):
        print(f"{path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
