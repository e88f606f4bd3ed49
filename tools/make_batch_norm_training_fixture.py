"""Records TensorFlow's training-mode batch norm (``FusedBatchNorm*``, ``is_training=true``) and the Keras 2
layer norm built on it, for tests/test_kernels_batch_norm.py (dev only).

    /opt/tfenv/bin/python tools/make_batch_norm_training_fixture.py

Writes, under ``tests/fixtures/kernels``:

- ``batch_norm_training.pb``: a graph of raw ``FusedBatchNorm``, ``V2`` and ``V3`` nodes with
  ``is_training=true`` on placeholders: NHWC and NCHW, 4-D and 5-D, float32 and float16 input,
  ``exponential_avg_factor`` 1 (mean and variance inputs empty, as Keras passes them) and not 1 (running
  statistics given), one value per channel, and the ``[1, rows, features, 1]`` NCHW shape Keras 2's layer
  norm uses; ``batch_norm_training.npz``: its feeds (``in:<tensor>``), every output of every node as
  TensorFlow's Eigen kernels compute them (``out:<tensor>``, oneDNN off), and as its default CPU kernels
  (oneDNN on) do, in a process of their own (``onednn:<tensor>``);
- ``k2_layer_norm.pb``: a frozen tf_keras (Keras 2, the ``tf.keras`` of TensorFlow <= 2.15) model:
  ``LayerNormalization`` after a ``Dense`` layer, one over two axes, and a small transformer encoder block
  (``MultiHeadAttention``, residuals, two layer norms, a feed-forward layer); each layer norm with the
  default epsilon is a ``FusedBatchNormV3`` in training mode (BERT's 1e-12 is below what tf_keras fuses);
  ``k2_layer_norm.npz``: its feeds and TensorFlow's outputs;
- ``k2_layer_norm_saved/``: the same model as a SavedModel (``serving_default``), whose outputs are in
  ``k2_layer_norm.npz`` under ``saved:<key>``.

Inputs are far from zero with large spreads, where a mean taken late or a one-pass variance loses digits.
Re-running rewrites the same files.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np
import tensorflow as tf

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "kernels"
SEED = 2027

# name, op, x shape, data_format, x dtype, exponential_avg_factor (None: 1 with empty mean and variance)
CASES: list[tuple[str, str, tuple[int, ...], str, Any, float | None]] = [
    ("nhwc", "FusedBatchNormV3", (4, 5, 6, 8), "NHWC", np.float32, None),
    ("nchw", "FusedBatchNormV3", (3, 8, 5, 6), "NCHW", np.float32, None),
    ("nhwc_avg", "FusedBatchNormV3", (2, 4, 3, 6), "NHWC", np.float32, 0.25),
    ("nchw_avg", "FusedBatchNormV3", (2, 6, 4, 3), "NCHW", np.float32, 0.6),
    ("nhwc_half", "FusedBatchNormV3", (2, 4, 4, 6), "NHWC", np.float16, None),
    ("nchw_half_avg", "FusedBatchNormV2", (2, 6, 3, 3), "NCHW", np.float16, 0.5),
    ("v1_nhwc", "FusedBatchNorm", (2, 3, 3, 4), "NHWC", np.float32, None),
    ("one_value", "FusedBatchNormV3", (1, 1, 1, 5), "NHWC", np.float32, None),
    ("layer_norm", "FusedBatchNormV3", (1, 15, 8, 1), "NCHW", np.float32, None),
    ("ndhwc", "FusedBatchNormV3", (2, 3, 2, 2, 4), "NDHWC", np.float32, None),
    ("ncdhw_avg", "FusedBatchNormV3", (2, 4, 3, 2, 2), "NCDHW", np.float32, 0.3),
]
NUM_OUTPUTS = {"FusedBatchNorm": 5, "FusedBatchNormV2": 5, "FusedBatchNormV3": 6}


def raw_graph(rng: np.random.Generator) -> tuple[tf.compat.v1.GraphDef, dict[str, Any], list[str]]:
    graph = tf.Graph()
    feeds: dict[str, Any] = {}
    fetches: list[str] = []
    with graph.as_default():
        for name, op, shape, fmt, dtype, factor in CASES:
            c = shape[1] if fmt.startswith("NC") else shape[-1]
            x = tf.compat.v1.placeholder(dtype, [None, *shape[1:]], name=f"{name}/x")
            feeds[x.name] = (rng.standard_normal(shape) * rng.uniform(1, 30) + rng.uniform(-80, 80)).astype(
                dtype
            )
            params = {
                "scale": rng.uniform(0.5, 1.5, c),
                "offset": rng.standard_normal(c),
                "mean": rng.standard_normal(c) if factor is not None else np.zeros(0),
                "variance": rng.uniform(0.5, 2.0, c) if factor is not None else np.zeros(0),
            }
            args = {}
            for key, value in params.items():
                t = tf.compat.v1.placeholder(tf.float32, [None], name=f"{name}/{key}")
                feeds[t.name] = value.astype(np.float32)
                args[key] = t
            kwargs = {"epsilon": 1e-3, "data_format": fmt, "is_training": True, "name": f"{name}/bn"}
            if op != "FusedBatchNorm":
                kwargs["exponential_avg_factor"] = 1.0 if factor is None else factor
            outs = getattr(tf.raw_ops, op)(x=x, **args, **kwargs)
            assert len(outs) == NUM_OUTPUTS[op]
            fetches += [t.name for t in outs]
    return graph.as_graph_def(), feeds, fetches


def run_graph(graph_def: Any, feeds: dict[str, Any], fetches: list[str]) -> dict[str, np.ndarray]:
    """TensorFlow's outputs, node by node (a node its kernels refuse is left out), Grappler off."""
    config = tf.compat.v1.ConfigProto()
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    out: dict[str, np.ndarray] = {}
    with tf.compat.v1.Session(graph=g, config=config) as sess:
        for name, *_ in CASES:
            mine = [f for f in fetches if f.startswith(f"{name}/")]
            try:
                values = sess.run(mine, feeds)
            except tf.errors.OpError as e:
                print(f"  {name}: {type(e).__name__}: {e.message.splitlines()[0]}")
                continue
            out.update(zip(mine, values, strict=True))
    return out


def onednn_outputs(graph_def: Any, feeds: dict[str, Any], fetches: list[str]) -> dict[str, np.ndarray]:
    """The same graph run by TensorFlow's default CPU kernels (oneDNN), in a process of its own."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "in.npz"
        dst = Path(tmp) / "out.npz"
        (Path(tmp) / "graph.pb").write_bytes(graph_def.SerializeToString())
        np.savez(src, **{f"in:{k}": v for k, v in feeds.items()}, fetches=np.array(fetches))
        env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="1")
        subprocess.run([sys.executable, __file__, "--onednn", tmp], check=True, env=env)
        with np.load(dst) as data:
            return {k: data[k] for k in data.files}


def onednn_child(tmp: str) -> None:
    graph_def = tf.compat.v1.GraphDef()
    graph_def.ParseFromString((Path(tmp) / "graph.pb").read_bytes())
    with np.load(Path(tmp) / "in.npz") as data:
        feeds = {k[3:]: data[k] for k in data.files if k.startswith("in:")}
        fetches = [str(f) for f in data["fetches"]]
    np.savez(Path(tmp) / "out.npz", **run_graph(graph_def, feeds, fetches))


def keras2_model(rng: np.random.Generator) -> Any:
    import tf_keras as keras

    layers = keras.layers
    x = keras.Input((6, 16), name="x")
    ln = layers.LayerNormalization(epsilon=1e-3, name="ln")(layers.Dense(16, name="dense")(x))
    ln_axes = layers.LayerNormalization(axis=[1, 2], name="ln_axes")(x)
    # an encoder block: attention, residual, norm, feed-forward, residual, norm; tf_keras fuses a layer norm
    # only when epsilon >= 1.001e-5, so BERT's 1e-12 (the second) is the moments path Keras 3 also writes
    attn = layers.MultiHeadAttention(num_heads=2, key_dim=8, name="attention")(x, x)
    h = layers.LayerNormalization(name="attention_norm")(x + attn)
    ff = layers.Dense(16, name="ff_out")(layers.Dense(32, activation="gelu", name="ff_in")(h))
    block = layers.LayerNormalization(epsilon=1e-12, name="output_norm")(h + ff)
    model = keras.Model(x, {"ln": ln, "ln_axes": ln_axes, "block": block})
    for layer in model.layers:  # random scale and offset: the defaults (1 and 0) would hide mistakes
        if isinstance(layer, layers.LayerNormalization):
            layer.gamma.assign(rng.uniform(0.5, 1.5, layer.gamma.shape))
            layer.beta.assign(rng.standard_normal(layer.beta.shape))
    return model


def main() -> None:
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    rng = np.random.default_rng(SEED)
    OUT.mkdir(parents=True, exist_ok=True)

    graph_def, feeds, fetches = raw_graph(rng)
    eigen = run_graph(graph_def, feeds, fetches)
    onednn = onednn_outputs(graph_def, feeds, fetches)
    (OUT / "batch_norm_training.pb").write_bytes(graph_def.SerializeToString(deterministic=True))
    arrays = {f"in:{k}": v for k, v in feeds.items()}
    arrays.update({f"out:{k}": v for k, v in eigen.items()})
    arrays.update({f"onednn:{k}": v for k, v in onednn.items()})
    np.savez(OUT / "batch_norm_training.npz", **arrays)
    print(f"wrote batch_norm_training.pb/.npz: {len(eigen)} outputs, {len(onednn)} with oneDNN")

    model = keras2_model(rng)
    serve = tf.function(lambda x: model(x, training=False))
    concrete = serve.get_concrete_function(tf.TensorSpec([None, 6, 16], tf.float32, name="x"))
    frozen = convert_variables_to_constants_v2(concrete)
    frozen_def = frozen.graph.as_graph_def()
    ops = {n.op for n in frozen_def.node}
    assert "FusedBatchNormV3" in ops, sorted(ops)
    x = (rng.standard_normal((3, 6, 16)) * 25 + 40).astype(np.float32)
    names = [t.name for t in frozen.outputs]
    keys = sorted(concrete.structured_outputs)  # the frozen function's outputs, in flattened (sorted) order
    results = frozen(tf.constant(x))
    (OUT / "k2_layer_norm.pb").write_bytes(frozen_def.SerializeToString(deterministic=True))
    arrays = {f"in:{frozen.inputs[0].name}": x}
    arrays.update({f"out:{n}": r.numpy() for n, r in zip(names, results, strict=True)})

    saved = OUT / "k2_layer_norm_saved"
    shutil.rmtree(saved, ignore_errors=True)
    # a Module holding the variables and the serving function only: saving the Keras model itself would add
    # every layer's traced calls (8x the bytes)
    module = tf.Module()
    module.variables_ = list(model.variables)
    module.serve = serve
    tf.saved_model.save(module, str(saved), signatures=concrete)
    loaded = tf.saved_model.load(str(saved)).signatures["serving_default"]
    for key, value in loaded(x=tf.constant(x)).items():
        arrays[f"saved:{key}"] = value.numpy()
    np.savez(OUT / "k2_layer_norm.npz", **arrays)
    print(f"wrote k2_layer_norm.pb/.npz and {saved.name}/: outputs {dict(zip(keys, names, strict=True))}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--onednn":
        onednn_child(sys.argv[2])
    else:
        main()
