"""Records TensorFlow running a Keras model under the ``mixed_bfloat16`` policy, for
tests/test_bfloat16.py (dev only).

    /opt/tfenv/bin/python tools/make_bfloat16_fixture.py          # writes the fixture
    /opt/tfenv/bin/python tools/make_bfloat16_fixture.py --check  # prints how TF rounds per op

Writes ``tests/fixtures/models/bfloat16.pb`` (a frozen graph: Conv2D + ReLU and Dense + ReLU computed in
bfloat16, LayerNormalization, which Keras computes in float32, a last Dense + softmax in float32, as Keras
recommends; and a bfloat16 placeholder ``y`` through a bfloat16 constant, a MatMul, casts, Sigmoid and
SquaredDifference) and ``bfloat16.npz`` (feeds ``in:<tensor>`` and TensorFlow's outputs ``out:<tensor>``;
bfloat16 arrays are stored as their uint16 patterns and listed in ``bfloat16``); and the same Keras model
as ``model.export`` writes it, ``tests/fixtures/saved_models/keras3_bfloat16`` (+ ``.npz``). Computed with
Grappler and oneDNN off: TensorFlow's portable CPU kernels. Re-running rewrites the same frozen graph and
numbers; the SavedModel's bytes change (not its numbers).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras
import ml_dtypes
import numpy as np
import tensorflow as tf
from make_case_fixtures import run_graph
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "models"
SAVED = OUT.parent / "saved_models" / "keras3_bfloat16"
BF16 = ml_dtypes.bfloat16


def model(rng: np.random.Generator) -> keras.Model:
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    inp = keras.Input((6, 6, 3), name="x")
    h = keras.layers.Conv2D(4, 3, activation="relu")(inp)
    h = keras.layers.Flatten()(h)
    h = keras.layers.Dense(16, activation="relu", name="hidden")(h)
    h = keras.layers.LayerNormalization()(h)
    out = keras.layers.Dense(5, activation="softmax", dtype="float32")(h)
    m = keras.Model(inp, [out, h])
    keras.mixed_precision.set_global_policy("float32")
    for w in m.weights:  # random weights and biases, scale and offset: defaults would hide mistakes
        w.assign(rng.standard_normal(w.shape).astype(np.float32) * 0.5 + (1.0 if "gamma" in w.path else 0.0))
    return m


def main() -> None:
    rng = np.random.default_rng(16)
    m = model(rng)
    w_y = tf.constant(rng.standard_normal((4, 3)).astype(BF16))
    scale = tf.constant(1.5, tf.bfloat16)  # a scalar: TensorFlow writes it in half_val

    @tf.function(
        input_signature=[tf.TensorSpec([None, 6, 6, 3], tf.float32), tf.TensorSpec([None, 4], tf.bfloat16)]
    )
    def serve(x: tf.Tensor, y: tf.Tensor) -> list[tf.Tensor]:
        probs, normed = m(x)
        z = tf.matmul(tf.nn.relu(y * scale), w_y)
        return [
            tf.identity(probs, name="probs"),
            tf.identity(normed, name="normed"),
            tf.identity(z, name="z"),
            tf.cast(z, tf.float32, name="z32"),
            tf.cast(tf.reduce_sum(tf.cast(x, tf.bfloat16), axis=[1, 2]), tf.int32, name="sum_int"),
            # kernels that round between their steps; exp overflows past 88 in the second half
            tf.nn.sigmoid(tf.concat([y, y * tf.constant(60.0, tf.bfloat16)], 1)),
            tf.math.squared_difference(y, tf.reduce_mean(y, axis=1, keepdims=True)),
        ]

    frozen = convert_variables_to_constants_v2(serve.get_concrete_function())
    graph_def = frozen.graph.as_graph_def()
    inputs = [t.name for t in frozen.inputs]
    outputs = [t.name for t in frozen.outputs]
    x = rng.standard_normal((4, 6, 6, 3)).astype(np.float32)
    y = (rng.standard_normal((4, 4)) * 2).astype(BF16)
    feeds = dict(zip(inputs, [x, y], strict=True))
    results = run_graph(graph_def, feeds, outputs)
    arrays: dict[str, np.ndarray] = {f"in:{k}": v for k, v in feeds.items()}
    arrays.update({f"out:{k}": v for k, v in zip(outputs, results, strict=True)})
    bf16 = sorted(k for k, v in arrays.items() if v.dtype == BF16)
    arrays = {k: v.view(np.uint16) if k in bf16 else v for k, v in arrays.items()}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "bfloat16.pb").write_bytes(graph_def.SerializeToString(deterministic=True))
    np.savez(OUT / "bfloat16.npz", bfloat16=np.array(bf16), **arrays)
    ops = sorted({n.op for n in graph_def.node if any(a.type == tf.bfloat16 for a in n.attr.values())})
    print(f"wrote {OUT / 'bfloat16.pb'} and bfloat16.npz: inputs {inputs}, outputs {outputs}")
    print(f"bfloat16 ops: {' '.join(ops)}")
    export(m, x)
    control_flow(rng)


def control_flow(rng: np.random.Generator) -> None:
    """A bfloat16 loop variable through ``tf.while_loop``, ``tf.cond`` and a TensorArray, frozen both ways:
    v1 frames (Enter, Merge, Switch...) and functional StatelessWhile/StatelessIf:
    ``bfloat16_loop_v1.pb`` and ``bfloat16_loop.pb``, with ``.npz`` as above."""

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.bfloat16), tf.TensorSpec([], tf.int32)])
    def loop(x: tf.Tensor, n: tf.Tensor) -> list[tf.Tensor]:
        def body(i: tf.Tensor, v: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            return i + 1, tf.nn.relu(v * tf.constant(1.1, tf.bfloat16) - tf.constant(0.05, tf.bfloat16))

        _, v = tf.while_loop(lambda i, v: i < n, body, [tf.constant(0), x])
        w = tf.cond(n > 2, lambda: v * 2, lambda: -v)
        stacked = tf.TensorArray(tf.bfloat16, size=2).write(0, w).write(1, v).stack()
        return [tf.identity(w, name="w"), tf.identity(stacked, name="stacked")]

    x = rng.standard_normal((4, 3)).astype(BF16)
    for name, lower in (("bfloat16_loop_v1", True), ("bfloat16_loop", False)):
        frozen = convert_variables_to_constants_v2(loop.get_concrete_function(), lower_control_flow=lower)
        graph_def = frozen.graph.as_graph_def()
        inputs = [t.name for t in frozen.inputs]
        outputs = [t.name for t in frozen.outputs]
        feeds = dict(zip(inputs, [x, np.int32(5)], strict=True))
        config = tf.compat.v1.ConfigProto()
        config.graph_options.rewrite_options.disable_meta_optimizer = True
        g = tf.Graph()
        with g.as_default():
            tf.compat.v1.import_graph_def(graph_def, name="")
        with tf.compat.v1.Session(graph=g, config=config) as sess:
            results = sess.run(outputs, feeds)
        arrays = {f"in:{k}": v for k, v in feeds.items()}
        arrays.update({f"out:{k}": v for k, v in zip(outputs, results, strict=True)})
        bf16 = sorted(k for k, v in arrays.items() if np.asarray(v).dtype == BF16)
        arrays = {k: np.asarray(v).view(np.uint16) if k in bf16 else v for k, v in arrays.items()}
        (OUT / f"{name}.pb").write_bytes(graph_def.SerializeToString(deterministic=True))
        np.savez(OUT / f"{name}.npz", bfloat16=np.array(bf16), **arrays)
        print(f"wrote {OUT / name}.pb: {' '.join(sorted({n.op for n in graph_def.node}))}")


def export(m: keras.Model, x: np.ndarray) -> None:
    """The same model as Keras exports it (``model.export``: StatefulPartitionedCall into the function
    library, float32 resource variables cast to bfloat16 inside it), and TensorFlow's answer from the
    SavedModel loaded back, Grappler off."""
    import shutil

    shutil.rmtree(SAVED, ignore_errors=True)
    m.export(str(SAVED / "1"), verbose=False)
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    served = tf.saved_model.load(str(SAVED / "1")).signatures["serving_default"]
    results = {k: v.numpy() for k, v in served(x=tf.constant(x)).items()}
    arrays = {"in:x": x} | {
        f"out:{k}": v.view(np.uint16) if v.dtype == BF16 else v for k, v in results.items()
    }
    bf16 = sorted(f"out:{k}" for k, v in results.items() if v.dtype == BF16)
    np.savez(SAVED.with_suffix(".npz"), bfloat16=np.array(bf16), **arrays)
    size = sum(f.stat().st_size for f in SAVED.rglob("*") if f.is_file())
    print(f"wrote {SAVED} ({size} bytes): outputs {sorted(results)}")


def check() -> None:
    """How TensorFlow's CPU kernels round bfloat16 results: the count of elements that differ from the
    float32 kernel's result rounded to nearest even, and truncated (runtime/bfloat16.py)."""
    rng = np.random.default_rng(0)

    def trunc(f: np.ndarray) -> np.ndarray:
        a = np.ascontiguousarray(f, np.float32)
        return (a.view(np.uint32) >> 16).astype(np.uint16).view(BF16)

    x = rng.standard_normal((2, 8, 8, 6)).astype(BF16)
    cases = {
        "MatMul": (
            lambda a, b: tf.matmul(a, b),
            (rng.standard_normal((8, 300)), rng.standard_normal((300, 5))),
        ),
        "BatchMatMulV2": (tf.matmul, (rng.standard_normal((2, 3, 7)), rng.standard_normal((2, 7, 4)))),
        "Conv2D": (lambda a, k: tf.nn.conv2d(a, k, 1, "VALID"), (x, rng.standard_normal((3, 3, 6, 4)))),
        "AddV2": (tf.add, (x, x[:1] * 0.3)),
        "Sum": (lambda a: tf.reduce_sum(a, axis=[1, 2]), (x,)),
        "Rsqrt": (tf.math.rsqrt, (np.abs(x),)),
        "Softmax": (tf.nn.softmax, (x,)),
        "AvgPool": (lambda a: tf.nn.avg_pool2d(a, 2, 2, "VALID"), (x,)),
        "Sigmoid": (tf.nn.sigmoid, (x,)),
    }
    for name, (fn, args) in cases.items():
        bf_args = [np.asarray(a).astype(BF16) for a in args]
        got = fn(*bf_args).numpy().view(np.uint16)
        f = fn(*[a.astype(np.float32) for a in bf_args]).numpy()
        rne = int(np.sum(got != f.astype(BF16).view(np.uint16)))
        tr = int(np.sum(got != trunc(f).view(np.uint16)))
        print(f"{name:14} {got.size:5} elements: differ from rounded {rne:5}, from truncated {tr:5}")


if __name__ == "__main__":
    check() if "--check" in sys.argv else main()
