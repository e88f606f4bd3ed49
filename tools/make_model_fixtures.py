"""Generates the TensorFlow model fixtures under ``tests/fixtures/models`` (dev only).

Run with the TensorFlow environment, not the project's::

    /opt/tfenv/bin/python tools/make_model_fixtures.py

Each model is built with fixed seeds, frozen to an inference GraphDef (variables folded to Const) and
written as ``<name>.pb``; ``<name>.npz`` holds the inputs fed (``in:<tensor>``) and what TensorFlow computed
for them (``out:<tensor>``), by running the frozen GraphDef itself in a session with grappler off.
``models.json`` lists each model's inputs, outputs and op types. The mlp is also written as text
(``mlp.pbtxt``). Re-running rewrites identical files.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Before TensorFlow is imported: oneDNN's reordered sums make the saved outputs machine dependent.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras
import numpy as np
import tensorflow as tf
from google.protobuf import text_format
from keras import layers
from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2
from tensorflow.python.framework.convert_to_constants import (
    convert_variables_to_constants_v2,
)

OUT_DIR = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "models"
BATCH = 3
SEED = 1234
FORBIDDEN_OPS = {"_FusedConv2D", "_FusedMatMul", "_FusedBatchNormEx", "_MklFusedConv2D"}


def seed(offset: int) -> None:
    keras.utils.set_random_seed(SEED + offset)


def randomize_batchnorm(model: keras.Model, rng: np.random.Generator) -> None:
    """Non-trivial gamma/beta/moving stats, so a wrong folding of BN shows in the outputs."""
    for layer in model.layers:
        if isinstance(layer, layers.BatchNormalization):
            n = layer.get_weights()[0].shape
            layer.set_weights(
                [
                    rng.uniform(0.5, 1.5, n).astype(np.float32),
                    rng.uniform(-0.5, 0.5, n).astype(np.float32),
                    rng.uniform(-0.5, 0.5, n).astype(np.float32),
                    rng.uniform(0.3, 2.0, n).astype(np.float32),
                ]
            )


class FusedBatchNorm(layers.Layer):
    """Inference batch norm as the FusedBatchNormV3 op that tf.keras 2 models freeze to."""

    def __init__(self, epsilon: float = 1e-3, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.epsilon = epsilon

    def build(self, input_shape: Any) -> None:
        c = input_shape[-1]
        rng = np.random.default_rng(SEED + c)
        self.gamma = self.add_weight(shape=(c,), initializer="ones", name="gamma")
        self.beta = self.add_weight(shape=(c,), initializer="zeros", name="beta")
        self.mean = self.add_weight(shape=(c,), initializer="zeros", name="mean", trainable=False)
        self.var = self.add_weight(shape=(c,), initializer="ones", name="var", trainable=False)
        self.gamma.assign(rng.uniform(0.5, 1.5, c).astype(np.float32))
        self.beta.assign(rng.uniform(-0.5, 0.5, c).astype(np.float32))
        self.mean.assign(rng.uniform(-0.5, 0.5, c).astype(np.float32))
        self.var.assign(rng.uniform(0.3, 2.0, c).astype(np.float32))

    def call(self, x: Any) -> Any:
        y, _, _ = tf.compat.v1.nn.fused_batch_norm(
            x, self.gamma, self.beta, self.mean, self.var, epsilon=self.epsilon, is_training=False
        )
        return y


# --- models ------------------------------------------------------------------------------------------


def mlp() -> keras.Model:
    seed(1)
    return keras.Sequential(
        [
            keras.Input((20,), name="features"),
            layers.Dense(64, activation="relu", name="dense1"),
            layers.Dropout(0.3, name="dropout"),
            layers.Dense(32, activation="gelu", name="dense2"),
            layers.Dense(10, activation="softmax", name="logits"),
        ],
        name="mlp",
    )


def mobilenet() -> keras.Model:
    seed(2)

    def conv_bn(x: Any, filters: int, kernel: int, stride: int, name: str, relu: bool = True) -> Any:
        x = layers.Conv2D(filters, kernel, strides=stride, padding="same", use_bias=False, name=name)(x)
        x = layers.BatchNormalization(name=f"{name}_bn")(x)
        return layers.ReLU(6.0, name=f"{name}_relu6")(x) if relu else x

    def depthwise_bn(x: Any, stride: int, name: str, multiplier: int = 1) -> Any:
        x = layers.DepthwiseConv2D(
            3, strides=stride, padding="same", depth_multiplier=multiplier, use_bias=False, name=name
        )(x)
        x = layers.BatchNormalization(name=f"{name}_bn")(x)
        return layers.ReLU(6.0, name=f"{name}_relu6")(x)

    inp = keras.Input((32, 32, 3), name="image")
    x = conv_bn(inp, 16, 3, 2, "stem")  # 16x16x16
    # Depthwise-separable blocks.
    x = depthwise_bn(x, 1, "dw1")
    x = conv_bn(x, 24, 1, 1, "pw1")
    x = depthwise_bn(x, 2, "dw2")  # 8x8x24
    x = conv_bn(x, 32, 1, 1, "pw2")
    # Inverted residual: expand, depthwise, linear projection, add.
    y = conv_bn(x, 64, 1, 1, "ir_expand")
    y = depthwise_bn(y, 1, "ir_dw")
    y = conv_bn(y, 32, 1, 1, "ir_project", relu=False)
    x = layers.Add(name="ir_add")([x, y])
    x = layers.GlobalAveragePooling2D(name="gap")(x)
    out = layers.Dense(10, activation="softmax", name="classifier")(x)
    model = keras.Model(inp, out, name="mobilenet")
    randomize_batchnorm(model, np.random.default_rng(SEED + 2))
    return model


def resnet() -> keras.Model:
    seed(3)

    def block(x: Any, filters: int, stride: int, name: str) -> Any:
        shortcut = x
        y = layers.Conv2D(filters, 3, strides=stride, padding="same", name=f"{name}_conv1")(x)
        y = FusedBatchNorm(name=f"{name}_bn1")(y)
        y = layers.ReLU(name=f"{name}_relu1")(y)
        y = layers.Conv2D(filters, 3, padding="same", name=f"{name}_conv2")(y)
        y = layers.BatchNormalization(name=f"{name}_bn2")(y)
        if stride != 1 or shortcut.shape[-1] != filters:
            shortcut = layers.Conv2D(filters, 1, strides=stride, name=f"{name}_proj")(shortcut)
        y = layers.Add(name=f"{name}_add")([y, shortcut])
        return layers.ReLU(name=f"{name}_relu2")(y)

    inp = keras.Input((32, 32, 3), name="image")
    x = layers.Conv2D(16, 3, padding="same", name="stem_conv")(inp)
    x = layers.BatchNormalization(name="stem_bn")(x)
    x = layers.ReLU(name="stem_relu")(x)
    x = layers.MaxPooling2D(2, name="stem_pool")(x)  # 16x16x16
    x = block(x, 16, 1, "block1")
    x = block(x, 32, 2, "block2")  # 8x8x32
    x = layers.AveragePooling2D(2, name="avg_pool")(x)  # 4x4x32
    x = layers.Flatten(name="flatten")(x)
    out = layers.Dense(10, name="fc")(x)
    model = keras.Model(inp, out, name="resnet")
    randomize_batchnorm(model, np.random.default_rng(SEED + 3))
    return model


SEQ, D_MODEL, HEADS, VOCAB = 16, 32, 4, 100


def encoder_block(x: Any, name: str, mask: Any = None, causal: bool = False) -> Any:
    attn = layers.MultiHeadAttention(HEADS, D_MODEL // HEADS, name=f"{name}_mha")(
        x, x, attention_mask=mask, use_causal_mask=causal
    )
    x = layers.LayerNormalization(epsilon=1e-6, name=f"{name}_ln1")(
        layers.Add(name=f"{name}_res1")([x, attn])
    )
    ffn = layers.Dense(64, activation="gelu", name=f"{name}_ffn1")(x)
    ffn = layers.Dense(D_MODEL, name=f"{name}_ffn2")(ffn)
    return layers.LayerNormalization(epsilon=1e-6, name=f"{name}_ln2")(
        layers.Add(name=f"{name}_res2")([x, ffn])
    )


def transformer() -> keras.Model:
    """Float inputs, causal self-attention."""
    seed(4)
    inp = keras.Input((SEQ, D_MODEL), name="embeddings")
    out = encoder_block(inp, "enc", causal=True)
    return keras.Model(inp, out, name="transformer")


class PaddingMask(layers.Layer):
    """[batch, seq] token ids -> [batch, seq, seq] attention mask hiding padding (id 0) keys."""

    def call(self, tokens: Any) -> Any:
        keep = tf.not_equal(tokens, 0)
        return tf.logical_and(keep[:, None, :], tf.ones_like(keep)[:, :, None])


class PositionEmbedding(layers.Layer):
    def build(self, input_shape: Any) -> None:
        self.table = self.add_weight(shape=(SEQ, D_MODEL), initializer="random_normal", name="table")

    def call(self, x: Any) -> Any:
        positions = tf.range(tf.shape(x)[1])
        return x + tf.gather(self.table, positions)[None]


def transformer_tokens() -> keras.Model:
    """int32 token ids -> Embedding + positions -> encoder block with a padding mask -> mean-pooled logits."""
    seed(5)
    tokens = keras.Input((SEQ,), dtype="int32", name="tokens")
    x = layers.Embedding(VOCAB, D_MODEL, name="embedding")(tokens)
    x = PositionEmbedding(name="positions")(x)
    x = encoder_block(x, "enc", mask=PaddingMask(name="padding_mask")(tokens))
    pooled = layers.GlobalAveragePooling1D(name="pool")(x)
    out = layers.Dense(5, activation="softmax", name="head")(pooled)
    return keras.Model(tokens, [out, x], name="transformer_tokens")


def branches() -> keras.Model:
    seed(6)
    # Narrower than [256] -> 4 x (512 -> 256) to keep the .pb small (that would be 4 MB of weights).
    inp = keras.Input((64,), name="features")
    outs = []
    for i in range(4):
        h = layers.Dense(128, activation="relu", name=f"branch{i}_hidden")(inp)
        outs.append(layers.Dense(64, name=f"branch{i}_out")(h))
    x = layers.Concatenate(name="concat")(outs)
    out = layers.Dense(16, name="head")(x)
    return keras.Model(inp, out, name="branches")


def conv_transpose() -> keras.Model:
    seed(7)
    inp = keras.Input((8, 8, 16), name="latent")
    x = layers.Conv2DTranspose(8, 3, strides=2, padding="same", activation="relu", name="deconv")(inp)
    bilinear = layers.Lambda(lambda t: tf.image.resize(t, (20, 20), method="bilinear"), name="bilinear")(x)
    nearest = layers.Lambda(lambda t: tf.image.resize(t, (20, 20), method="nearest"), name="nearest")(x)
    x = layers.Concatenate(name="concat")([bilinear, nearest])
    out = layers.Conv2D(4, 3, padding="same", name="conv")(x)
    return keras.Model(inp, out, name="conv_transpose")


# --- freezing ----------------------------------------------------------------------------------------

MODELS: dict[str, Callable[[], keras.Model]] = {
    "mlp": mlp,
    "mobilenet": mobilenet,
    "resnet": resnet,
    "transformer": transformer,
    "transformer_tokens": transformer_tokens,
    "branches": branches,
    "conv_transpose": conv_transpose,
}


def make_inputs(model: keras.Model, rng: np.random.Generator) -> list[np.ndarray]:
    values = []
    for t in model.inputs:
        shape = (BATCH, *t.shape[1:])
        if t.dtype == "int32":
            v = rng.integers(1, VOCAB, shape).astype(np.int32)
            v[1, -5:] = 0  # padding at the end of one sequence
            v[2, -1:] = 0
        else:
            v = rng.standard_normal(shape).astype(np.float32)
        values.append(v)
    return values


def freeze(model: keras.Model) -> tuple[tf.compat.v1.GraphDef, list[str], list[str]]:
    specs = [tf.TensorSpec([None, *t.shape[1:]], t.dtype, name=t.name) for t in model.inputs]

    @tf.function(input_signature=specs)
    def serve(*args: Any) -> Any:
        return model(list(args) if len(args) > 1 else args[0], training=False)

    frozen = convert_variables_to_constants_v2(serve.get_concrete_function())
    graph_def = frozen.graph.as_graph_def()
    inputs = [t.name for t in frozen.inputs]
    outputs = [t.name for t in frozen.outputs]
    return graph_def, inputs, outputs


def run_in_tf(
    graph_def: tf.compat.v1.GraphDef, feeds: dict[str, np.ndarray], fetches: list[str]
) -> list[np.ndarray]:
    """Runs the frozen GraphDef itself, grappler off, so the reference is exactly this graph's value."""
    rewrite = rewriter_config_pb2.RewriterConfig(
        disable_meta_optimizer=True,
        constant_folding=rewriter_config_pb2.RewriterConfig.OFF,
        remapping=rewriter_config_pb2.RewriterConfig.OFF,
    )
    config = config_pb2.ConfigProto(
        graph_options=config_pb2.GraphOptions(
            rewrite_options=rewrite,
            optimizer_options=config_pb2.OptimizerOptions(opt_level=config_pb2.OptimizerOptions.L0),
        ),
        inter_op_parallelism_threads=1,
        intra_op_parallelism_threads=1,
    )
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    with tf.compat.v1.Session(graph=graph, config=config) as sess:
        return list(sess.run(fetches, feeds))


def main() -> int:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    tf.config.experimental.enable_op_determinism()
    manifest: dict[str, Any] = {}
    union: set[str] = set()
    for index, (name, build) in enumerate(MODELS.items()):
        keras.backend.clear_session()
        model = build()
        graph_def, inputs, outputs = freeze(model)
        ops = sorted({n.op for n in graph_def.node})
        fused = FORBIDDEN_OPS.intersection(ops)
        if fused:
            raise SystemExit(f"{name}: grappler fused ops into the frozen graph: {sorted(fused)}")
        if graph_def.library.function:
            raise SystemExit(f"{name}: frozen graph still has functions: {graph_def.library.function}")
        values = make_inputs(model, np.random.default_rng(SEED + 100 + index))
        feeds = dict(zip(inputs, values, strict=True))
        results = run_in_tf(graph_def, feeds, outputs)
        # The frozen graph must compute what the Keras model does.
        keras_out = model([*values] if len(values) > 1 else values[0], training=False)
        keras_out = keras_out if isinstance(keras_out, (list, tuple)) else [keras_out]
        for got, want in zip(results, keras_out, strict=True):
            np.testing.assert_allclose(got, np.asarray(want), rtol=1e-5, atol=1e-6)

        data = graph_def.SerializeToString(deterministic=True)
        (OUT_DIR / f"{name}.pb").write_bytes(data)
        if name == "mlp":
            (OUT_DIR / f"{name}.pbtxt").write_text(text_format.MessageToString(graph_def))
        arrays = {f"in:{k}": v for k, v in feeds.items()}
        arrays.update({f"out:{k}": v for k, v in zip(outputs, results, strict=True)})
        with open(OUT_DIR / f"{name}.npz", "wb") as f:
            np.savez(f, **arrays)
        by_name = {n.name: n for n in graph_def.node}
        manifest[name] = {
            "inputs": [
                {
                    "name": t,
                    "dtype": tf.as_dtype(by_name[t.split(":")[0]].attr["dtype"].type).name,
                    "shape": [None if d is None else int(d) for d in [None, *m.shape[1:]]],
                }
                for t, m in zip(inputs, model.inputs, strict=True)
            ],
            "outputs": outputs,
            "ops": ops,
        }
        union.update(ops)
        print(
            f"{name:20s} {len(data) / 1024:8.1f} KB  {len(graph_def.node):4d} nodes  "
            f"sha1 {hashlib.sha1(data).hexdigest()[:12]}  in {inputs} out {outputs}"
        )
        print(f"{'':20s} ops: {' '.join(ops)}")
    (OUT_DIR / "models.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    print(f"\nunion of op types ({len(union)}): {' '.join(sorted(union))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
