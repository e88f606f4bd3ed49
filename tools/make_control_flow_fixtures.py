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

and, with ``tf.compat.v1.disable_control_flow_v2()``, TF1-style graphs whose control flow is the v1 dataflow
ops (Switch, Merge, Enter, Exit, NextIteration, LoopCond), built in a ``tf.compat.v1`` graph and run by a
``tf.compat.v1.Session`` (``--v1-only`` writes just these):

- ``v1_cond.pb``: ``tf.compat.v1.cond`` -> Switch/Merge;
- ``v1_while.pb``: ``tf.compat.v1.while_loop`` with a counter: one frame (Enter, Merge, Switch, Exit,
  NextIteration);
- ``v1_nested.pb``: a loop whose body runs an inner loop (a child frame per outer iteration) and a cond;
- ``v1_cond_in_while.pb``: integer steps of the Collatz map (a cond in a loop; exact integers);
- ``v1_loop_in_cond.pb``: a loop inside one branch of a cond: the untaken branch's frame is dead throughout.

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


def save_v1_graph(name: str, build: Any, cases: dict[str, dict[str, np.ndarray]]) -> None:
    """Builds a TF1 graph with v1 control flow, writes it and what a ``tf.compat.v1.Session`` computes.
    ``build()`` makes the graph's placeholders and returns its output tensors."""
    tf.compat.v1.disable_control_flow_v2()
    graph = tf.Graph()
    with graph.as_default():
        outputs = build()
    graph_def = graph.as_graph_def()
    ops = {nd.op for nd in graph_def.node}
    assert not ops & {"If", "StatelessIf", "While", "StatelessWhile"}, ops
    (OUT_DIR / f"{name}.pb").write_bytes(graph_def.SerializeToString())
    arrays: dict[str, np.ndarray] = {}
    with tf.compat.v1.Session(graph=graph) as sess:
        for case, feeds in cases.items():
            values = sess.run(outputs, {graph.get_tensor_by_name(k): v for k, v in feeds.items()})
            for tensor, v in feeds.items():
                arrays[f"{case}/in/{tensor}"] = np.asarray(v)
            for t, r in zip(outputs, values, strict=True):
                arrays[f"{case}/out/{t.name}"] = np.asarray(r)
    np.savez(OUT_DIR / f"{name}.npz", **arrays)


def make_v1(rng: np.random.Generator) -> None:
    v1 = tf.compat.v1

    def cond() -> Any:
        x = v1.placeholder(tf.float32, [None, 4], name="x")
        t = v1.placeholder(tf.float32, [], name="t")
        out = v1.cond(tf.reduce_sum(x) > t, lambda: tf.nn.relu(x) * 2.0, lambda: tf.tanh(x) - 1.0)
        return [tf.identity(out, name="out")]

    x = rng.normal(size=(3, 4)).astype(np.float32)
    save_v1_graph(
        "v1_cond",
        cond,
        {"then": {"x:0": x, "t:0": np.float32(-100.0)}, "else": {"x:0": x, "t:0": np.float32(100.0)}},
    )

    def loop() -> Any:
        x = v1.placeholder(tf.float32, [None, 4], name="x")
        n = v1.placeholder(tf.int32, [], name="n")
        i, y = v1.while_loop(
            lambda i, y: i < n, lambda i, y: (i + 1, y * 0.9 + tf.sin(y)), (tf.constant(0), x)
        )
        return [tf.identity(i, name="i"), tf.identity(y, name="y")]

    x = rng.normal(size=(2, 4)).astype(np.float32)
    save_v1_graph(
        "v1_while",
        loop,
        {c: {"x:0": x, "n:0": np.int32(k)} for c, k in (("zero", 0), ("one", 1), ("many", 300))},
    )

    def nested() -> Any:
        x = v1.placeholder(tf.float32, [3], name="x")
        n = v1.placeholder(tf.int32, [], name="n")

        def body(i: Any, acc: Any) -> Any:
            _, inner = v1.while_loop(lambda j, a: j < i, lambda j, a: (j + 1, a + tf.cos(a)), (0, acc))
            picked = v1.cond(tf.equal(i % 2, 0), lambda: inner * 0.5 + 0.25, lambda: inner - 1.0)
            return i + 1, picked

        _, out = v1.while_loop(lambda i, acc: i < n, body, (tf.constant(0), x))
        return [tf.identity(out, name="out")]

    x = rng.normal(size=(3,)).astype(np.float32)
    save_v1_graph(
        "v1_nested", nested, {c: {"x:0": x, "n:0": np.int32(k)} for c, k in (("zero", 0), ("five", 5))}
    )

    def collatz() -> Any:
        start = v1.placeholder(tf.int64, [], name="start")
        _, steps = v1.while_loop(
            lambda v, s: tf.not_equal(v, 1),
            lambda v, s: (v1.cond(tf.equal(v % 2, 0), lambda: v // 2, lambda: 3 * v + 1), s + 1),
            (start, tf.constant(0, tf.int64)),
        )
        return [tf.identity(steps, name="steps")]

    save_v1_graph(
        "v1_cond_in_while",
        collatz,
        {f"from{k}": {"start:0": np.int64(k)} for k in (1, 6, 27)},
    )

    def loop_in_cond() -> Any:
        x = v1.placeholder(tf.float32, [2], name="x")
        n = v1.placeholder(tf.int32, [], name="n")

        def looped() -> Any:
            _, y = v1.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y * 2.0), (0, x))
            return y

        out = v1.cond(n > 0, looped, lambda: x - 1.0)
        return [tf.identity(out, name="out")]

    x = rng.normal(size=(2,)).astype(np.float32)
    save_v1_graph(
        "v1_loop_in_cond",
        loop_in_cond,
        {"loop": {"x:0": x, "n:0": np.int32(4)}, "skip": {"x:0": x, "n:0": np.int32(0)}},
    )


def main() -> None:
    import sys

    if "--v1-only" in sys.argv[1:]:
        make_v1(np.random.default_rng(SEED + 1))
        return
    if OUT_DIR.exists():
        shutil.rmtree(OUT_DIR)
    OUT_DIR.mkdir(parents=True)
    rng = np.random.default_rng(SEED)
    make_cond(rng)
    make_while(rng)
    make_nested(rng)
    make_loop_model(rng)
    make_v1(np.random.default_rng(SEED + 1))
    total = sum(p.stat().st_size for p in OUT_DIR.rglob("*") if p.is_file())
    print(f"wrote {OUT_DIR} ({total} bytes)")


if __name__ == "__main__":
    main()
