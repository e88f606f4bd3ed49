"""Generates the functional control-flow fixtures under ``tests/fixtures/control_flow`` (dev only).

Run with the TensorFlow environment, not the project's::

    /opt/tfenv/bin/python tools/make_control_flow_fixtures.py

Writes TF2 graphs whose control flow stays functional (as ``tf.function`` traces it):

- ``cond.pb``: ``tf.cond`` on a reduction -> ``StatelessIf`` with two branch functions;
- ``while.pb``: ``tf.while_loop`` for ``n`` iterations -> ``StatelessWhile`` (loop counter, cond, body);
- ``nested.pb``: a while loop whose body runs an inner while loop and a ``tf.cond``, and calls another
  ``tf.function`` (a ``PartitionedCall`` inside the body, which inlining cannot reach);
- ``loop_model/1``: a SavedModel whose loop and branch read a variable (``While`` and ``If``, the stateful
  forms, with the variable's handle passed into the bodies).

Each ``<name>.npz`` holds cases ``<case>/in/<tensor>`` and ``<case>/out/<tensor>`` (tensor names for the
graphs, signature keys for the SavedModel) with what TensorFlow computed: both branches, zero and many
iterations.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

OUT_DIR = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "control_flow"
SEED = 1819


def save_graph(name: str, fn: Any, cases: dict[str, list[np.ndarray]]) -> None:
    """Writes the traced graph of ``fn`` (no variables: nothing to freeze) and the outputs TF computes."""
    concrete = fn.get_concrete_function()
    graph_def = concrete.graph.as_graph_def()
    (OUT_DIR / f"{name}.pb").write_bytes(graph_def.SerializeToString())
    inputs = [t.name for t in concrete.inputs]
    outputs = [t.name for t in concrete.outputs]
    arrays: dict[str, np.ndarray] = {}
    for case, values in cases.items():
        result = concrete(*[tf.constant(v) for v in values])
        result = result if isinstance(result, (list, tuple)) else [result]
        for tensor, v in zip(inputs, values, strict=True):
            arrays[f"{case}/in/{tensor}"] = np.asarray(v)
        for tensor, r in zip(outputs, result, strict=True):
            arrays[f"{case}/out/{tensor}"] = r.numpy()
    np.savez(OUT_DIR / f"{name}.npz", **arrays)


def make_cond(rng: np.random.Generator) -> None:
    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([], tf.float32)])
    def cond(x: Any, t: Any) -> Any:
        return tf.cond(
            tf.reduce_sum(x) > t,
            lambda: tf.nn.relu(x) * 2.0,
            lambda: tf.tanh(x) - 1.0,
        )

    x = rng.normal(size=(3, 4)).astype(np.float32)
    save_graph(
        "cond",
        cond,
        {"then": [x, np.float32(-100.0)], "else": [x, np.float32(100.0)]},
    )


def make_while(rng: np.random.Generator) -> None:
    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([], tf.int32)])
    def loop(x: Any, n: Any) -> Any:
        i, y = tf.while_loop(
            lambda i, y: i < n,
            lambda i, y: (i + 1, y * 0.9 + tf.sin(y)),
            (tf.constant(0), x),
        )
        return i, y

    x = rng.normal(size=(2, 4)).astype(np.float32)
    save_graph(
        "while",
        loop,
        {
            "zero": [x, np.int32(0)],
            "one": [x, np.int32(1)],
            "many": [x, np.int32(300)],
        },
    )


def make_nested(rng: np.random.Generator) -> None:
    @tf.function
    def scale(v: Any) -> Any:  # called from the loop body: a PartitionedCall there
        return v * 0.5 + 0.25

    @tf.function(input_signature=[tf.TensorSpec([3], tf.float32), tf.TensorSpec([], tf.int32)])
    def nested(x: Any, n: Any) -> Any:
        def body(i: Any, acc: Any) -> Any:
            _, inner = tf.while_loop(lambda j, a: j < i, lambda j, a: (j + 1, a + tf.cos(a)), (0, acc))
            picked = tf.cond(i % 2 == 0, lambda: scale(inner), lambda: inner - 1.0)
            return i + 1, picked

        _, out = tf.while_loop(lambda i, acc: i < n, body, (tf.constant(0), x))
        return out

    x = rng.normal(size=(3,)).astype(np.float32)
    save_graph("nested", nested, {"zero": [x, np.int32(0)], "five": [x, np.int32(5)]})


class LoopModel(tf.Module):
    def __init__(self, rng: np.random.Generator) -> None:
        super().__init__()
        self.w = tf.Variable(rng.normal(size=(4, 4)).astype(np.float32) * 0.5, name="w")
        self.b = tf.Variable(rng.normal(size=(4,)).astype(np.float32), name="b")

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([], tf.int32)])
    def serve(self, x: Any, n: Any) -> Any:
        _, y = tf.while_loop(
            lambda i, y: i < n, lambda i, y: (i + 1, tf.tanh(tf.matmul(y, self.w))), (tf.constant(0), x)
        )
        z = tf.cond(tf.reduce_mean(y) > 0.0, lambda: y + self.b, lambda: y - self.b)
        return {"y": y, "z": z}


def make_loop_model(rng: np.random.Generator) -> None:
    model = LoopModel(rng)
    path = OUT_DIR / "loop_model" / "1"
    tf.saved_model.save(model, str(path), signatures={"serving_default": model.serve})
    fn = tf.saved_model.load(str(path)).signatures["serving_default"]
    arrays: dict[str, np.ndarray] = {}
    cases = {
        "zero": (rng.normal(size=(2, 4)).astype(np.float32), np.int32(0)),
        "pos": (np.abs(rng.normal(size=(2, 4))).astype(np.float32) + 1.0, np.int32(3)),
        "neg": (-np.abs(rng.normal(size=(2, 4))).astype(np.float32) - 1.0, np.int32(7)),
    }
    for case, (x, n) in cases.items():
        out = fn(x=tf.constant(x), n=tf.constant(n))
        arrays[f"{case}/in/x"] = x
        arrays[f"{case}/in/n"] = np.asarray(n)
        for key, value in out.items():
            arrays[f"{case}/out/{key}"] = value.numpy()
    np.savez(OUT_DIR / "loop_model.npz", **arrays)


def main() -> None:
    if OUT_DIR.exists():
        shutil.rmtree(OUT_DIR)
    OUT_DIR.mkdir(parents=True)
    rng = np.random.default_rng(SEED)
    make_cond(rng)
    make_while(rng)
    make_nested(rng)
    make_loop_model(rng)
    total = sum(p.stat().st_size for p in OUT_DIR.rglob("*") if p.is_file())
    print(f"wrote {OUT_DIR} ({total} bytes)")


if __name__ == "__main__":
    main()
