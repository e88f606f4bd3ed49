"""Generates the v1-loop benchmark graphs under ``benchmarks/fixtures/loops`` (dev only).

Run with the TensorFlow environment, not the project's::

    /opt/tfenv/bin/python tools/make_loop_bench_fixtures.py

``python -m benchmarks.bench_loops`` times them here and in TensorFlow:

- ``lstm``: Keras LSTM(32) over a time axis of unknown length (16 features), frozen with
  ``convert_variables_to_constants_v2`` (the loop lowered to v1 frames: Enter/Merge/Switch/NextIteration/
  Exit). One node ready at a time, nothing to run in parallel: the per-iteration cost of frames. The case
  is 100 steps of a batch of 4.
- ``two_matmuls``: a ``tf.compat.v1.while_loop`` of 20 iterations whose body has two independent MatMuls
  (fed 512x512 matrices, the loop invariants), joined by a cheap ``tanh(a) + tanh(b)``: what running a
  frame's ready nodes in parallel gains. Its feeds are random, made by the benchmark (too large to commit).

``lstm.npz`` holds ``in:<tensor>`` and ``out:<tensor>`` with what TensorFlow computed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras
import numpy as np
import tensorflow as tf
from keras import layers
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

OUT_DIR = Path(__file__).resolve().parent.parent / "benchmarks" / "fixtures" / "loops"
SEED = 1818
STEPS = 100
SIZE = 512
ITERATIONS = 20


def save(name: str, graph_def: Any, feeds: dict[str, np.ndarray], fetches: dict[str, np.ndarray]) -> None:
    (OUT_DIR / f"{name}.pb").write_bytes(graph_def.SerializeToString())
    arrays = {f"in:{k}": v for k, v in feeds.items()} | {f"out:{k}": v for k, v in fetches.items()}
    np.savez(OUT_DIR / f"{name}.npz", **arrays)


def make_lstm(rng: np.random.Generator) -> None:
    keras.utils.set_random_seed(SEED)
    model = keras.Sequential([keras.Input((None, 16)), layers.LSTM(32)])
    model.set_weights([rng.normal(scale=0.3, size=w.shape).astype(np.float32) for w in model.get_weights()])

    @tf.function(input_signature=[tf.TensorSpec([None, None, 16], tf.float32, name="x")])
    def serve(x: Any) -> Any:
        return model(x, training=False)

    frozen = convert_variables_to_constants_v2(serve.get_concrete_function(), lower_control_flow=True)
    x = rng.normal(size=(4, STEPS, 16)).astype(np.float32)
    y = frozen(tf.constant(x))
    y = y[0] if isinstance(y, (list, tuple)) else y
    save(
        "lstm",
        frozen.graph.as_graph_def(),
        {frozen.inputs[0].name: x},
        {frozen.outputs[0].name: y.numpy()},
    )


def make_two_matmuls() -> None:
    tf.compat.v1.disable_control_flow_v2()
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (SIZE, SIZE), name="x")
        w1 = tf.compat.v1.placeholder(tf.float32, (SIZE, SIZE), name="w1")
        w2 = tf.compat.v1.placeholder(tf.float32, (SIZE, SIZE), name="w2")

        def body(i: Any, h: Any) -> Any:
            a = tf.matmul(h, w1, name="left")
            b = tf.matmul(h, w2, name="right")
            return i + 1, tf.tanh(a) + tf.tanh(b)

        _, y = tf.compat.v1.while_loop(lambda i, h: i < ITERATIONS, body, (tf.constant(0), x))
        y = tf.identity(y, name="y")
    (OUT_DIR / "two_matmuls.pb").write_bytes(graph.as_graph_def().SerializeToString())


def main() -> int:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    make_lstm(rng)
    make_two_matmuls()
    for path in sorted(OUT_DIR.iterdir()):
        print(f"{path.name}: {path.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
