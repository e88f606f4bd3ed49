"""Generates realistic-size Keras exports under ``tests/fixtures/models/realistic`` (dev only).

Run with the TensorFlow environment, not the project's::

    /opt/tfenv/bin/python tools/make_realistic_fixtures.py

The RunHandlerPool benchmark matrix (``benchmarks/bench_pool_matrix.py``) serves these: graphs of the sizes
users deploy (MobileNetV2, a residual CNN, a BERT-tiny-like encoder, an MLP, parallel Dense branches,
wide-and-deep), with random weights from fixed seeds, so the pool is measured on work it was not tuned for.
Each model is frozen, checked and recorded exactly as ``tools/make_model_fixtures.py`` does (its helpers:
variables folded to Const, oneDNN off, TensorFlow's reference outputs computed on the frozen GraphDef with
grappler off): ``<name>.pb`` and ``<name>.npz`` (``in:<tensor>`` fed, ``out:<tensor>`` computed), and
``models.json`` with each model's batch, inputs, outputs, op types and size. Re-running rewrites identical
files.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Before TensorFlow is imported, as tools/make_model_fixtures.py sets them: oneDNN off for stable outputs.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras
import numpy as np
import tensorflow as tf
from keras import layers
from make_model_fixtures import (
    FORBIDDEN_OPS,
    SEED,
    PaddingMask,
    freeze,
    randomize_batchnorm,
    run_in_tf,
)

OUT_DIR = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "models" / "realistic"
MAX_PB_BYTES = 3 << 20
MAX_DIR_BYTES = 10 << 20


def seed(offset: int) -> None:
    keras.utils.set_random_seed(SEED + 1000 + offset)


# --- models: (builder, batch) -------------------------------------------------------------------------


def mobilenet_v2() -> keras.Model:
    """keras.applications' MobileNetV2, width 0.35 at 96x96, a 10-class head (weights=None: random)."""
    seed(1)
    model = keras.applications.MobileNetV2(
        input_tensor=keras.Input((96, 96, 3), name="image"),
        alpha=0.35,
        weights=None,
        classes=10,
    )
    randomize_batchnorm(model, np.random.default_rng(SEED + 1001))
    return model


def residual_cnn() -> keras.Model:
    """A small ResNet for 32x32 images: a stem and three residual blocks (32, 64, 128 channels)."""
    seed(2)

    def block(x: Any, filters: int, stride: int, name: str) -> Any:
        y = layers.Conv2D(filters, 3, strides=stride, padding="same", use_bias=False, name=f"{name}_conv1")(x)
        y = layers.BatchNormalization(name=f"{name}_bn1")(y)
        y = layers.ReLU(name=f"{name}_relu1")(y)
        y = layers.Conv2D(filters, 3, padding="same", use_bias=False, name=f"{name}_conv2")(y)
        y = layers.BatchNormalization(name=f"{name}_bn2")(y)
        if stride != 1 or x.shape[-1] != filters:
            x = layers.Conv2D(filters, 1, strides=stride, use_bias=False, name=f"{name}_proj")(x)
            x = layers.BatchNormalization(name=f"{name}_proj_bn")(x)
        return layers.ReLU(name=f"{name}_out")(layers.Add(name=f"{name}_add")([x, y]))

    inp = keras.Input((32, 32, 3), name="image")
    x = layers.Conv2D(32, 3, padding="same", use_bias=False, name="stem_conv")(inp)
    x = layers.ReLU(name="stem_relu")(layers.BatchNormalization(name="stem_bn")(x))
    x = block(x, 32, 1, "block1")  # 32x32x32
    x = block(x, 64, 2, "block2")  # 16x16x64
    x = block(x, 128, 2, "block3")  # 8x8x128
    x = layers.GlobalAveragePooling2D(name="gap")(x)
    out = layers.Dense(10, activation="softmax", name="classifier")(x)
    model = keras.Model(inp, out, name="residual_cnn")
    randomize_batchnorm(model, np.random.default_rng(SEED + 1002))
    return model


BERT_SEQ, BERT_HIDDEN, BERT_HEADS, BERT_LAYERS, BERT_FFN, BERT_VOCAB = 128, 128, 2, 2, 512, 1000


class PositionEmbedding(layers.Layer):
    def build(self, input_shape: Any) -> None:
        self.table = self.add_weight(shape=(BERT_SEQ, BERT_HIDDEN), initializer="random_normal", name="table")

    def call(self, x: Any) -> Any:
        return x + tf.gather(self.table, tf.range(tf.shape(x)[1]))[None]


def bert_tiny() -> keras.Model:
    """BERT-tiny's shape (2 layers, hidden 128, 2 heads, FFN 512, GELU) over 128 tokens; a 1000-token
    vocabulary instead of 30522 keeps the .pb small. Outputs: the pooled [CLS] logits and the sequence."""
    seed(3)
    tokens = keras.Input((BERT_SEQ,), dtype="int32", name="input_ids")
    mask = PaddingMask(name="padding_mask")(tokens)
    x = layers.Embedding(BERT_VOCAB, BERT_HIDDEN, name="word_embeddings")(tokens)
    x = PositionEmbedding(name="position_embeddings")(x)
    x = layers.LayerNormalization(epsilon=1e-12, name="embeddings_ln")(x)
    for i in range(BERT_LAYERS):
        name = f"layer{i}"
        attn = layers.MultiHeadAttention(BERT_HEADS, BERT_HIDDEN // BERT_HEADS, name=f"{name}_attention")(
            x, x, attention_mask=mask
        )
        x = layers.LayerNormalization(epsilon=1e-12, name=f"{name}_attention_ln")(
            layers.Add(name=f"{name}_attention_res")([x, attn])
        )
        ffn = layers.Dense(BERT_FFN, activation="gelu", name=f"{name}_intermediate")(x)
        ffn = layers.Dense(BERT_HIDDEN, name=f"{name}_output")(ffn)
        x = layers.LayerNormalization(epsilon=1e-12, name=f"{name}_output_ln")(
            layers.Add(name=f"{name}_output_res")([x, ffn])
        )
    cls = layers.Lambda(lambda t: t[:, 0], name="cls")(x)
    pooled = layers.Dense(BERT_HIDDEN, activation="tanh", name="pooler")(cls)
    logits = layers.Dense(2, name="classifier")(pooled)
    return keras.Model(tokens, [logits, x], name="bert_tiny")


def mlp_gelu() -> keras.Model:
    """784-256-10 (MNIST-sized) with a GELU hidden layer and softmax."""
    seed(4)
    return keras.Sequential(
        [
            keras.Input((784,), name="pixels"),
            layers.Dense(256, activation="gelu", name="hidden"),
            layers.Dense(10, activation="softmax", name="logits"),
        ],
        name="mlp_gelu",
    )


def parallel_branches() -> keras.Model:
    """Four independent Dense 512 branches over one input, concatenated: work a pool can run side by side."""
    seed(5)
    inp = keras.Input((128,), name="features")
    outs = []
    for i in range(4):
        h = layers.Dense(512, activation="relu", name=f"branch{i}_hidden")(inp)
        outs.append(layers.Dense(64, activation="relu", name=f"branch{i}_out")(h))
    x = layers.Concatenate(name="concat")(outs)
    out = layers.Dense(10, name="head")(x)
    return keras.Model(inp, out, name="parallel_branches")


WD_COLUMNS, WD_BUCKETS, WD_EMBED, WD_NUMERIC, WD_WIDE = 8, 1000, 16, 13, 512


def wide_and_deep() -> keras.Model:
    """Wide & Deep (Cheng et al. 2016): a linear model over multi-hot crossed features plus an MLP over
    per-column embeddings of categorical ids and numeric features; a click probability."""
    seed(6)
    wide = keras.Input((WD_WIDE,), name="wide_features")
    ids = keras.Input((WD_COLUMNS,), dtype="int32", name="categorical_ids")
    numeric = keras.Input((WD_NUMERIC,), name="numeric_features")
    embedded = [
        layers.Embedding(WD_BUCKETS, WD_EMBED, name=f"embed{c}")(
            layers.Lambda(lambda t, c=c: t[:, c], name=f"column{c}")(ids)
        )
        for c in range(WD_COLUMNS)
    ]
    x = layers.Concatenate(name="deep_concat")([*embedded, numeric])
    for i, units in enumerate((256, 128, 64)):
        x = layers.Dense(units, activation="relu", name=f"deep{i}")(x)
    deep = layers.Dense(1, name="deep_logit")(x)
    linear = layers.Dense(1, name="wide_logit")(wide)
    logit = layers.Add(name="wide_plus_deep")([linear, deep])
    out = layers.Activation("sigmoid", name="probability")(logit)
    return keras.Model([wide, ids, numeric], out, name="wide_and_deep")


MODELS: dict[str, tuple[Callable[[], keras.Model], int]] = {
    "mobilenet_v2": (mobilenet_v2, 1),
    "residual_cnn": (residual_cnn, 8),
    "bert_tiny": (bert_tiny, 1),
    "mlp_gelu": (mlp_gelu, 4),
    "parallel_branches": (parallel_branches, 32),
    "wide_and_deep": (wide_and_deep, 16),
}


def inputs_first(graph_def: tf.compat.v1.GraphDef, inputs: list[str]) -> tf.compat.v1.GraphDef:
    """The same graph with its Placeholders first, in the model's input order. TensorFlow orders them by
    string hashes otherwise, so the .pb would change from one run to the next (PYTHONHASHSEED)."""
    position = {t.split(":")[0]: i for i, t in enumerate(inputs)}
    nodes = sorted(graph_def.node, key=lambda n: position.get(n.name, len(position)))  # stable
    out = tf.compat.v1.GraphDef()
    out.CopyFrom(graph_def)
    del out.node[:]
    out.node.extend(nodes)
    return out


def make_inputs(model: keras.Model, batch: int, rng: np.random.Generator) -> list[np.ndarray]:
    values = []
    for t in model.inputs:
        shape = (batch, *t.shape[1:])
        if t.name == "input_ids":
            v = rng.integers(1, BERT_VOCAB, shape).astype(np.int32)
            v[:, -20:] = 0  # a padded tail, as tokenizers leave it
        elif t.name == "categorical_ids":
            v = rng.integers(0, WD_BUCKETS, shape).astype(np.int32)
        elif t.name == "wide_features":
            v = (rng.random(shape) < 0.02).astype(np.float32)  # a few active crosses
        elif t.name == "image":
            v = rng.uniform(-1.0, 1.0, shape).astype(np.float32)  # preprocessed pixels
        else:
            v = rng.standard_normal(shape).astype(np.float32)
        values.append(v)
    return values


def main() -> int:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    tf.config.experimental.enable_op_determinism()
    manifest: dict[str, Any] = {}
    total = 0
    for index, (name, (build, batch)) in enumerate(MODELS.items()):
        keras.backend.clear_session()
        model = build()
        graph_def, inputs, outputs = freeze(model)
        graph_def = inputs_first(graph_def, inputs)
        ops = sorted({n.op for n in graph_def.node})
        fused = FORBIDDEN_OPS.intersection(ops)
        if fused:
            raise SystemExit(f"{name}: grappler fused ops into the frozen graph: {sorted(fused)}")
        if graph_def.library.function:
            raise SystemExit(f"{name}: frozen graph still has functions")
        values = make_inputs(model, batch, np.random.default_rng(SEED + 1100 + index))
        feeds = dict(zip(inputs, values, strict=True))
        results = run_in_tf(graph_def, feeds, outputs)
        with warnings.catch_warnings():  # keras.applications models expect their one input in a list
            warnings.filterwarnings("ignore", "The structure of `inputs`", UserWarning)
            keras_out = model([*values] if len(values) > 1 else values[0], training=False)
        keras_out = keras_out if isinstance(keras_out, (list, tuple)) else [keras_out]
        for got, want in zip(results, keras_out, strict=True):
            np.testing.assert_allclose(got, np.asarray(want), rtol=1e-4, atol=1e-5)

        data = graph_def.SerializeToString(deterministic=True)
        if len(data) > MAX_PB_BYTES:
            raise SystemExit(f"{name}: {len(data)} bytes, over the {MAX_PB_BYTES} byte budget")
        (OUT_DIR / f"{name}.pb").write_bytes(data)
        arrays = {f"in:{k}": v for k, v in feeds.items()}
        arrays.update({f"out:{k}": v for k, v in zip(outputs, results, strict=True)})
        with open(OUT_DIR / f"{name}.npz", "wb") as f:
            np.savez(f, **arrays)
        total += len(data) + (OUT_DIR / f"{name}.npz").stat().st_size
        by_name = {n.name: n for n in graph_def.node}
        manifest[name] = {
            "batch": batch,
            "inputs": [
                {
                    "name": t,
                    "dtype": tf.as_dtype(by_name[t.split(":")[0]].attr["dtype"].type).name,
                    "shape": [None, *(int(d) for d in m.shape[1:])],
                }
                for t, m in zip(inputs, model.inputs, strict=True)
            ],
            "outputs": outputs,
            "ops": ops,
            "nodes": len(graph_def.node),
            "parameters": int(model.count_params()),
            "pb_bytes": len(data),
        }
        print(
            f"{name:18s} {len(data) / 1024:8.1f} KB  {len(graph_def.node):4d} nodes  "
            f"{model.count_params():8d} params  batch {batch:2d}  "
            f"sha1 {hashlib.sha1(data).hexdigest()[:12]}"
        )
        print(f"{'':18s} ops: {' '.join(ops)}")
    (OUT_DIR / "models.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    if total > MAX_DIR_BYTES:
        raise SystemExit(f"{total} bytes in {OUT_DIR}, over the {MAX_DIR_BYTES} byte budget")
    print(f"\n{total / 1024:.0f} KB in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
