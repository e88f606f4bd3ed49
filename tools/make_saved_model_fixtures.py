"""Generates the SavedModel fixtures under ``tests/fixtures/saved_models`` (dev only).

Run with the TensorFlow environment, not the project's::

    /opt/tfenv/bin/python tools/make_saved_model_fixtures.py

Writes, each a SavedModel as TF Serving reads it (``saved_model.pb`` + ``variables/``):

- ``tf2_mlp/1``: a Keras MLP exported by ``keras.export.ExportArchive`` with two signatures,
  ``serving_default`` (probabilities) and ``hidden`` (the first layer's activations and the logits):
  StatefulPartitionedCall into the function library, resource variables.
- ``tf2_cnn/1``: a small Keras CNN (Conv2D, BatchNormalization, DepthwiseConv2D, pooling, Dropout, Dense)
  saved by ``model.export`` at its default settings (signatures ``serve`` and ``serving_default``).
- ``tf1_linear/1`` and ``tf1_linear/2``: a ``tf.compat.v1`` graph with VariableV2 variables saved by a
  Saver through ``SavedModelBuilder``; version 2 has other weights, so a test sees which one is served.

``<model>.npz`` beside each holds, per signature, the inputs fed (``<signature>/in:<key>``) and what
TensorFlow computed (``<signature>/out:<key>``), by loading the written SavedModel back
(``tf.saved_model.load`` for TF2, a v1 Session and loader for TF1).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

# Before TensorFlow is imported: oneDNN's reordered sums make the saved outputs machine dependent.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras
import numpy as np
import tensorflow as tf
from keras import layers

OUT_DIR = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "saved_models"
SEED = 1818
BATCH = 3


def save_io(name: str, io: dict[str, dict[str, np.ndarray]]) -> None:
    arrays = {
        f"{sig}/{kind}:{key}": value
        for sig, tensors in io.items()
        for kind_key, value in tensors.items()
        for kind, key in [kind_key.split(":", 1)]
    }
    np.savez(OUT_DIR / f"{name}.npz", **arrays)


def make_tf2_mlp() -> None:
    keras.utils.set_random_seed(SEED)
    inputs = keras.Input((6,), name="x")
    hidden = layers.Dense(8, activation="relu", name="dense")(inputs)
    logits = layers.Dense(3, name="logits")(hidden)
    model = keras.Model(inputs, logits)

    # Keras' own exporter (what `model.export` uses): its variables restore through the saver, so
    # TensorFlow's C++ loader (TF Serving) loads it. A plain tf.Module around a Keras 3 model does not.
    archive = keras.export.ExportArchive()
    archive.track(model)
    spec = tf.TensorSpec([None, 6], tf.float32, name="x")

    def serve(x: Any) -> dict[str, Any]:
        return {"probabilities": tf.nn.softmax(model(x))}

    def hidden_fn(x: Any) -> dict[str, Any]:
        h = model.get_layer("dense")(x)
        return {"hidden": h, "logits": model.get_layer("logits")(h)}

    archive.add_endpoint("serving_default", serve, input_signature=[spec])
    archive.add_endpoint("hidden", hidden_fn, input_signature=[spec])
    path = OUT_DIR / "tf2_mlp" / "1"
    archive.write_out(str(path), verbose=False)

    loaded = tf.saved_model.load(str(path))
    x = np.random.default_rng(SEED).normal(size=(BATCH, 6)).astype(np.float32)
    io: dict[str, dict[str, np.ndarray]] = {}
    for sig in ("serving_default", "hidden"):
        out = loaded.signatures[sig](x=tf.constant(x))
        io[sig] = {"in:x": x, **{f"out:{k}": v.numpy() for k, v in out.items()}}
    save_io("tf2_mlp", io)


def make_tf2_cnn() -> None:
    keras.utils.set_random_seed(SEED + 10)
    inputs = keras.Input((12, 12, 3), name="image")
    h = layers.Conv2D(8, 3, padding="same")(inputs)
    h = layers.BatchNormalization()(h)
    h = layers.ReLU()(h)
    h = layers.DepthwiseConv2D(3, padding="same")(h)
    h = layers.MaxPooling2D()(h)
    h = layers.GlobalAveragePooling2D()(h)
    h = layers.Dropout(0.2)(h)
    model = keras.Model(inputs, layers.Dense(4, activation="softmax")(h))
    rng = np.random.default_rng(SEED + 10)
    for layer in model.layers:  # non-trivial moving statistics, so inference-mode batch norm shows
        if isinstance(layer, layers.BatchNormalization):
            n = layer.get_weights()[0].shape
            layer.set_weights([rng.uniform(0.5, 1.5, n).astype(np.float32) for _ in range(4)])
    path = OUT_DIR / "tf2_cnn" / "1"
    model.export(str(path), verbose=False)
    loaded = tf.saved_model.load(str(path))
    x = rng.normal(size=(2, 12, 12, 3)).astype(np.float32)
    io: dict[str, dict[str, np.ndarray]] = {}
    for sig in ("serve", "serving_default"):
        fn = loaded.signatures[sig]
        (key,) = fn.structured_input_signature[1]
        out = fn(**{key: tf.constant(x)})
        io[sig] = {f"in:{key}": x, **{f"out:{k}": v.numpy() for k, v in out.items()}}
    save_io("tf2_cnn", io)


def make_tf1_linear(version: int) -> None:
    v1 = tf.compat.v1
    graph = tf.Graph()
    rng = np.random.default_rng(SEED + version)
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, 4], name="x")
        w = v1.Variable(rng.normal(size=(4, 2)).astype(np.float32), name="w", use_resource=False)
        b = v1.Variable(rng.normal(size=(2,)).astype(np.float32), name="b", use_resource=False)
        y = tf.nn.tanh(tf.matmul(x, w) + b, name="y")
        scaled = tf.multiply(y, 2.0, name="scaled")
        saver = v1.train.Saver()
        with v1.Session(graph=graph) as sess:
            sess.run(v1.global_variables_initializer())
            sig = v1.saved_model.predict_signature_def(inputs={"x": x}, outputs={"y": y, "scaled": scaled})
            path = OUT_DIR / "tf1_linear" / str(version)
            builder = v1.saved_model.Builder(str(path))
            builder.add_meta_graph_and_variables(
                sess,
                [v1.saved_model.tag_constants.SERVING],
                signature_def_map={"serving_default": sig},
                saver=saver,
                strip_default_attrs=True,
            )
            builder.save()

    feed = rng.normal(size=(BATCH, 4)).astype(np.float32)
    with v1.Session(graph=tf.Graph()) as sess:
        meta = v1.saved_model.loader.load(sess, ["serve"], str(path))
        sig = meta.signature_def["serving_default"]
        keys = sorted(sig.outputs)
        values = sess.run([sig.outputs[k].name for k in keys], {sig.inputs["x"].name: feed})
    outputs = {f"out:{k}": v for k, v in zip(keys, values, strict=True)}
    save_io(f"tf1_linear_v{version}", {"serving_default": {"in:x": feed, **outputs}})


def main() -> None:
    if OUT_DIR.exists():
        shutil.rmtree(OUT_DIR)
    OUT_DIR.mkdir(parents=True)
    make_tf2_mlp()
    make_tf2_cnn()
    make_tf1_linear(1)
    make_tf1_linear(2)
    total = sum(p.stat().st_size for p in OUT_DIR.rglob("*") if p.is_file())
    print(f"wrote {OUT_DIR} ({total} bytes)")


if __name__ == "__main__":
    main()
