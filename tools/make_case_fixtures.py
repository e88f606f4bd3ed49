"""Generates the ``tf.switch_case`` fixtures under ``tests/fixtures/control_flow`` (dev only), for
tests/test_control_flow_case.py.

    /opt/tfenv/bin/python tools/make_case_fixtures.py

Writes:

- ``case.pb``: a traced ``tf.function`` whose ``tf.switch_case`` stays functional: ``StatelessCase`` over
  three branch functions, each returning a float32 and an int32 tensor;
- ``case_lowered.pb``: the same function frozen by ``convert_variables_to_constants_v2``, which lowers it to
  v1 control flow: ``_SwitchN`` (one per input, and one for the index) into each branch, a ``Merge`` out;
- ``case_in_loop.pb``: a ``tf.while_loop`` whose body picks one of three updates with ``tf.switch_case`` on
  the loop counter, frozen and lowered: ``_SwitchN`` inside a loop frame (Enter, NextIteration, Exit);
- ``case_model/``: a SavedModel whose branches read variables: ``Case`` (the stateful form), the variables'
  handles passed into the branch functions.

Each ``<name>.npz`` holds cases ``<case>/in/<tensor>`` and ``<case>/out/<tensor>`` (tensor names for the
graphs, signature keys for the SavedModel) with what TensorFlow computed: every branch, and indices out of
range (negative and past the end), which run the last branch, the default.
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
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

OUT_DIR = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "control_flow"
SEED = 2718
INDICES = {"b0": 0, "b1": 1, "b2": 2, "negative": -1, "past_end": 3, "far": 1000}


def ops_of(graph_def: Any) -> set[str]:
    return {n.op for n in graph_def.node} | {n.op for f in graph_def.library.function for n in f.node_def}


def save_cases(name: str, cases: dict[str, tuple[dict[str, Any], dict[str, Any]]]) -> None:
    arrays: dict[str, np.ndarray] = {}
    for case, (ins, outs) in cases.items():
        arrays.update({f"{case}/in/{k}": np.asarray(v) for k, v in ins.items()})
        arrays.update({f"{case}/out/{k}": np.asarray(v) for k, v in outs.items()})
    np.savez(OUT_DIR / f"{name}.npz", **arrays)


def run_graph(graph_def: Any, feeds: dict[str, Any], fetches: list[str]) -> list[np.ndarray]:
    """TensorFlow's outputs for a GraphDef, in a v1 Session (Grappler off: the graph runs as written)."""
    config = tf.compat.v1.ConfigProto()
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    with tf.compat.v1.Session(graph=g, config=config) as sess:
        return list(sess.run(fetches, feeds))


def write_graph(name: str, concrete: Any, frozen: bool, values: dict[str, list[np.ndarray]]) -> None:
    if frozen:
        concrete = convert_variables_to_constants_v2(concrete)
    graph_def = concrete.graph.as_graph_def()
    (OUT_DIR / f"{name}.pb").write_bytes(graph_def.SerializeToString(deterministic=True))
    inputs = [t.name for t in concrete.inputs]
    outputs = [t.name for t in concrete.outputs]
    cases = {}
    for case, vals in values.items():
        feeds = dict(zip(inputs, vals, strict=True))
        cases[case] = (feeds, dict(zip(outputs, run_graph(graph_def, feeds, outputs), strict=True)))
    save_cases(name, cases)
    print(f"{name}: {sorted(ops_of(graph_def) & {'Case', 'StatelessCase', '_SwitchN', 'Merge', 'Enter'})}")


def make_case(rng: np.random.Generator) -> None:
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32), tf.TensorSpec([], tf.int32)])
    def case(x: Any, branch: Any) -> Any:
        return tf.switch_case(
            branch,
            [
                lambda: (x + 10.0, tf.size(x)),
                lambda: (x * x, tf.constant(-1)),
                lambda: (tf.sin(x), tf.reduce_sum(tf.cast(x > 0, tf.int32))),
            ],
        )

    concrete = case.get_concrete_function()
    assert "StatelessCase" in ops_of(concrete.graph.as_graph_def())
    x = rng.standard_normal(5).astype(np.float32)
    values = {c: [x, np.int32(i)] for c, i in INDICES.items()}
    write_graph("case", concrete, False, values)
    write_graph("case_lowered", concrete, True, values)
    lowered = ops_of(convert_variables_to_constants_v2(concrete).graph.as_graph_def())
    assert "_SwitchN" in lowered and "StatelessCase" not in lowered, sorted(lowered)


def make_case_in_loop(rng: np.random.Generator) -> None:
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32), tf.TensorSpec([], tf.int32)])
    def loop(x: Any, n: Any) -> Any:
        def body(i: Any, acc: Any) -> Any:
            acc = tf.switch_case(
                i % 3, [lambda: acc * 0.5 + 1.0, lambda: acc - tf.reduce_mean(acc), lambda: -acc]
            )
            return i + 1, acc

        return tf.while_loop(lambda i, acc: i < n, body, (tf.constant(0), x))[1]

    concrete = loop.get_concrete_function()
    lowered = ops_of(convert_variables_to_constants_v2(concrete).graph.as_graph_def())
    assert {"_SwitchN", "Enter", "NextIteration"} <= lowered, sorted(lowered)
    x = rng.standard_normal(4).astype(np.float32)
    values = {"zero": [x, np.int32(0)], "one": [x, np.int32(1)], "seven": [x, np.int32(7)]}
    write_graph("case_in_loop", concrete, True, values)


def make_case_model(rng: np.random.Generator) -> None:
    class Model(tf.Module):
        def __init__(self) -> None:
            self.w = tf.Variable(rng.standard_normal((3, 2)).astype(np.float32))
            self.b = tf.Variable(rng.standard_normal(2).astype(np.float32))

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32), tf.TensorSpec([], tf.int32)])
        def __call__(self, x: Any, branch: Any) -> Any:
            y = tf.switch_case(
                branch,
                [
                    lambda: tf.matmul(x, self.w),
                    lambda: tf.matmul(x, self.w) + self.b,
                    lambda: x[:, :2] * self.b,
                ],
            )
            return {"y": y}

    model = Model()
    concrete = model.__call__.get_concrete_function()
    assert "Case" in ops_of(concrete.graph.as_graph_def())
    path = OUT_DIR / "case_model"
    shutil.rmtree(path, ignore_errors=True)
    tf.saved_model.save(model, str(path), signatures=concrete)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    serve = tf.saved_model.load(str(path)).signatures["serving_default"]
    cases = {}
    for case, i in INDICES.items():
        ins = {"x": x, "branch": np.int32(i)}
        cases[case] = (
            ins,
            {k: v.numpy() for k, v in serve(**{k: tf.constant(v) for k, v in ins.items()}).items()},
        )
    save_cases("case_model", cases)


def main() -> None:
    rng = np.random.default_rng(SEED)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    make_case(rng)
    make_case_in_loop(rng)
    make_case_model(rng)


if __name__ == "__main__":
    main()
