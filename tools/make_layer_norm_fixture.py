"""Records TensorFlow's layer normalization, as Keras and ``tf.nn`` write it, for tests/test_layer_norm.py
(dev only).

    /opt/tfenv/bin/python tools/make_layer_norm_fixture.py

Writes ``tests/fixtures/kernels/layer_norm.pb`` (a frozen graph: Keras 3 ``LayerNormalization`` over the last
axis with scale and offset, without offset, without scale, and over the last two axes; and
``tf.nn.moments`` + ``tf.nn.batch_normalization``, the older spelling) and ``layer_norm.npz`` (its feeds,
``in:<tensor>``, and TensorFlow's outputs, ``out:<tensor>``, computed with Grappler off). Re-running
rewrites the same files.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras
import numpy as np
import tensorflow as tf
from make_case_fixtures import run_graph
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "kernels"


def layer(rng: np.random.Generator, shape: tuple[int, ...], **kwargs: object) -> keras.layers.Layer:
    ln = keras.layers.LayerNormalization(**kwargs)
    ln.build((None, *shape))
    for w in ln.weights:  # random scale and offset: the defaults (1 and 0) would hide mistakes
        w.assign(rng.uniform(0.5, 1.5, w.shape) if "gamma" in w.path else rng.standard_normal(w.shape))
    return ln


def main() -> None:
    rng = np.random.default_rng(12)
    ln_full = layer(rng, (6, 16), epsilon=1e-3)
    ln_no_offset = layer(rng, (24,), center=False)
    ln_no_scale = layer(rng, (4, 5, 8), scale=False, epsilon=1e-5)
    ln_two_axes = layer(rng, (3, 4, 8), axis=[-2, -1])
    gamma = tf.constant(rng.uniform(0.5, 1.5, 32).astype(np.float32))
    beta = tf.constant(rng.standard_normal(32).astype(np.float32))

    specs = [
        tf.TensorSpec([None, 6, 16], tf.float32, name="a"),
        tf.TensorSpec([None, 24], tf.float32, name="b"),
        tf.TensorSpec([None, 4, 5, 8], tf.float32, name="c"),
        tf.TensorSpec([None, 3, 4, 8], tf.float32, name="d"),
        tf.TensorSpec([None, 32], tf.float32, name="e"),
    ]

    @tf.function(input_signature=specs)
    def serve(a: tf.Tensor, b: tf.Tensor, c: tf.Tensor, d: tf.Tensor, e: tf.Tensor) -> list[tf.Tensor]:
        mean, variance = tf.nn.moments(e, axes=[-1], keepdims=True)
        return [
            tf.identity(ln_full(a), name="full"),
            tf.identity(ln_no_offset(b), name="no_offset"),
            tf.identity(ln_no_scale(c), name="no_scale"),
            tf.identity(ln_two_axes(d), name="two_axes"),
            tf.identity(tf.nn.batch_normalization(e, mean, variance, beta, gamma, 1e-3), name="tf_nn"),
        ]

    frozen = convert_variables_to_constants_v2(serve.get_concrete_function())
    graph_def = frozen.graph.as_graph_def()
    inputs = [t.name for t in frozen.inputs]
    outputs = [t.name for t in frozen.outputs]
    # large offsets and spreads: a layer norm that subtracts the mean late loses digits
    values = [
        (rng.standard_normal((3, *s.shape[1:])) * rng.uniform(0.1, 20) + rng.uniform(-50, 50)).astype(
            np.float32
        )
        for s in specs
    ]
    feeds = dict(zip(inputs, values, strict=True))
    results = run_graph(graph_def, feeds, outputs)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "layer_norm.pb").write_bytes(graph_def.SerializeToString(deterministic=True))
    arrays = {f"in:{k}": v for k, v in feeds.items()}
    arrays.update({f"out:{k}": v for k, v in zip(outputs, results, strict=True)})
    np.savez(OUT / "layer_norm.npz", **arrays)
    print(f"wrote {OUT / 'layer_norm.pb'} and layer_norm.npz: inputs {inputs}, outputs {outputs}")


if __name__ == "__main__":
    main()
