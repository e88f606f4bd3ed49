"""Checks Keras layers one by one against poolserve (dev only; nothing it writes is committed).

Run with the TensorFlow environment; the poolserve side runs in a subprocess of the project's venv::

    /opt/tfenv/bin/python tools/check_keras_layers.py [--only Conv1D,LSTM] [--python .venv/bin/python]
        [--out /tmp/keras_layers]

Each entry of ``LAYERS`` is a small functional model around one layer (or a few, where a layer needs a
companion), with random weights, frozen as a serving graph is (``convert_variables_to_constants_v2``
on a ``tf.function`` of the model in inference mode) and run by TensorFlow on random inputs. ``--worker``
(this file, run by the venv's Python, importing only poolserve) loads each graph, runs it on the same
inputs and compares: a graph poolserve cannot load or run, or an output further than ``TOL`` (relative to
the output's largest magnitude) from TensorFlow's, is a finding. The table lists every layer with its ops.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

TOL = 1e-4
HERE = Path(__file__).resolve().parent


def _layers() -> dict[str, tuple[list[tuple[tuple[int, ...], str]], Callable[..., Any]]]:
    """name -> (input specs (shape without batch, dtype), build(keras, inputs) -> output)."""
    img = [((12, 12, 3), "float32")]
    seq = [((10, 6), "float32")]
    vol = [((6, 6, 6, 2), "float32")]
    ids = [((7,), "int32")]
    L: dict[str, tuple[list[tuple[tuple[int, ...], str]], Callable[..., Any]]] = {}

    def add(name: str, specs: list[tuple[tuple[int, ...], str]], fn: Callable[..., Any]) -> None:
        L[name] = (specs, fn)

    add("Dense", seq, lambda k, x: k.layers.Dense(5, activation="tanh")(x[0]))
    add("EinsumDense", seq, lambda k, x: k.layers.EinsumDense("abc,cd->abd", (10, 4), bias_axes="d")(x[0]))
    add("Conv1D", seq, lambda k, x: k.layers.Conv1D(4, 3, padding="same", dilation_rate=2)(x[0]))
    add("Conv1D_causal", seq, lambda k, x: k.layers.Conv1D(4, 3, padding="causal")(x[0]))
    add("Conv1D_strided", seq, lambda k, x: k.layers.Conv1D(4, 3, strides=2)(x[0]))
    add("Conv2D", img, lambda k, x: k.layers.Conv2D(4, 3, padding="same", activation="relu")(x[0]))
    add(
        "Conv2D_groups",
        img[:0] + [((8, 8, 4), "float32")],
        lambda k, x: k.layers.Conv2D(4, 3, groups=2)(x[0]),
    )
    add("Conv2D_dilated", img, lambda k, x: k.layers.Conv2D(4, 3, dilation_rate=2)(x[0]))
    add("Conv3D", vol, lambda k, x: k.layers.Conv3D(3, 3, padding="same")(x[0]))
    add("Conv1DTranspose", seq, lambda k, x: k.layers.Conv1DTranspose(3, 3, strides=2)(x[0]))
    add("Conv2DTranspose", img, lambda k, x: k.layers.Conv2DTranspose(3, 3, strides=2, padding="same")(x[0]))
    add("Conv3DTranspose", vol, lambda k, x: k.layers.Conv3DTranspose(2, 3, strides=2)(x[0]))
    add("SeparableConv1D", seq, lambda k, x: k.layers.SeparableConv1D(4, 3, depth_multiplier=2)(x[0]))
    add("SeparableConv2D", img, lambda k, x: k.layers.SeparableConv2D(4, 3, padding="same")(x[0]))
    add("DepthwiseConv1D", seq, lambda k, x: k.layers.DepthwiseConv1D(3, depth_multiplier=2)(x[0]))
    add("DepthwiseConv2D", img, lambda k, x: k.layers.DepthwiseConv2D(3, strides=2, padding="same")(x[0]))
    for name in ("MaxPooling", "AveragePooling", "GlobalMaxPooling", "GlobalAveragePooling"):
        for dims, spec in (("1D", seq), ("2D", img), ("3D", vol)):
            args: tuple[Any, ...] = () if name.startswith("Global") else (2,)
            add(f"{name}{dims}", spec, lambda k, x, n=f"{name}{dims}", a=args: getattr(k.layers, n)(*a)(x[0]))
    add("MaxPooling2D_same", img, lambda k, x: k.layers.MaxPooling2D(3, 2, padding="same")(x[0]))
    add("AveragePooling2D_same", img, lambda k, x: k.layers.AveragePooling2D(3, 2, padding="same")(x[0]))
    add("UpSampling1D", seq, lambda k, x: k.layers.UpSampling1D(2)(x[0]))
    add("UpSampling2D", img, lambda k, x: k.layers.UpSampling2D(2)(x[0]))
    add("UpSampling2D_bilinear", img, lambda k, x: k.layers.UpSampling2D(2, interpolation="bilinear")(x[0]))
    add("UpSampling3D", vol, lambda k, x: k.layers.UpSampling3D(2)(x[0]))
    add("ZeroPadding1D", seq, lambda k, x: k.layers.ZeroPadding1D(2)(x[0]))
    add("ZeroPadding2D", img, lambda k, x: k.layers.ZeroPadding2D(((1, 2), (0, 1)))(x[0]))
    add("ZeroPadding3D", vol, lambda k, x: k.layers.ZeroPadding3D(1)(x[0]))
    add("Cropping1D", seq, lambda k, x: k.layers.Cropping1D((1, 2))(x[0]))
    add("Cropping2D", img, lambda k, x: k.layers.Cropping2D(((1, 2), (2, 1)))(x[0]))
    add("Cropping3D", vol, lambda k, x: k.layers.Cropping3D(1)(x[0]))
    add("Flatten", img, lambda k, x: k.layers.Flatten()(x[0]))
    add("Reshape", img, lambda k, x: k.layers.Reshape((36, 12))(x[0]))
    add("Permute", img, lambda k, x: k.layers.Permute((3, 1, 2))(x[0]))
    add("RepeatVector", [((5,), "float32")], lambda k, x: k.layers.RepeatVector(3)(x[0]))
    add("Embedding", ids, lambda k, x: k.layers.Embedding(50, 8)(x[0]))
    add("SimpleRNN", seq, lambda k, x: k.layers.SimpleRNN(5, return_sequences=True)(x[0]))
    add("LSTM", seq, lambda k, x: k.layers.LSTM(5)(x[0]))
    add("GRU", seq, lambda k, x: k.layers.GRU(5, return_sequences=True)(x[0]))
    add("GRU_reset_before", seq, lambda k, x: k.layers.GRU(5, reset_after=False)(x[0]))
    add(
        "Bidirectional_LSTM",
        seq,
        lambda k, x: k.layers.Bidirectional(k.layers.LSTM(4, return_sequences=True))(x[0]),
    )
    add("LSTM_go_backwards", seq, lambda k, x: k.layers.LSTM(4, go_backwards=True)(x[0]))
    add("ConvLSTM1D", [((5, 8, 3), "float32")], lambda k, x: k.layers.ConvLSTM1D(2, 3)(x[0]))
    add("ConvLSTM2D", [((4, 6, 6, 2), "float32")], lambda k, x: k.layers.ConvLSTM2D(2, 3)(x[0]))
    add(
        "TimeDistributed",
        [((4, 6, 6, 2), "float32")],
        lambda k, x: k.layers.TimeDistributed(k.layers.Conv2D(2, 3))(x[0]),
    )
    add("LayerNormalization", seq, lambda k, x: k.layers.LayerNormalization()(x[0]))
    add("LayerNormalization_rms", seq, lambda k, x: k.layers.LayerNormalization(rms_scaling=True)(x[0]))
    add("BatchNormalization", img, lambda k, x: k.layers.BatchNormalization()(x[0]))
    add(
        "GroupNormalization",
        img[:0] + [((8, 8, 4), "float32")],
        lambda k, x: k.layers.GroupNormalization(2)(x[0]),
    )
    add("UnitNormalization", seq, lambda k, x: k.layers.UnitNormalization()(x[0]))
    add(
        "Dropout_SpatialDropout",
        img,
        lambda k, x: k.layers.SpatialDropout2D(0.5)(k.layers.Dropout(0.5)(x[0])),
    )
    add(
        "GaussianNoise_AlphaDropout",
        seq,
        lambda k, x: k.layers.AlphaDropout(0.2)(k.layers.GaussianNoise(0.1)(x[0])),
    )
    add("MultiHeadAttention", seq, lambda k, x: k.layers.MultiHeadAttention(2, 4)(x[0], x[0]))
    add(
        "MultiHeadAttention_causal",
        seq,
        lambda k, x: k.layers.MultiHeadAttention(2, 4)(x[0], x[0], use_causal_mask=True),
    )
    add("Attention", seq + seq, lambda k, x: k.layers.Attention()([x[0], x[1]]))
    add("AdditiveAttention", seq + seq, lambda k, x: k.layers.AdditiveAttention()([x[0], x[1]]))
    acts = (  # noqa: SIM905
        "relu gelu swish softplus softsign selu elu exponential hard_sigmoid hard_silu mish log_softmax "
        "relu6 leaky_relu sigmoid tanh softmax linear silu celu glu log_sigmoid sparse_plus "
        "squareplus tanh_shrink soft_shrink hard_shrink hard_tanh threshold sparsemax"
    ).split()
    for act in acts:
        add(f"Activation_{act}", seq, lambda k, x, a=act: k.layers.Activation(a)(x[0]))
    add("gelu_approximate", seq, lambda k, x: k.activations.gelu(x[0], approximate=True))
    add("PReLU", img, lambda k, x: k.layers.PReLU(shared_axes=[1, 2])(x[0]))
    add("ELU_layer", seq, lambda k, x: k.layers.ELU(0.7)(x[0]))
    add(
        "ReLU_clipped",
        seq,
        lambda k, x: k.layers.ReLU(max_value=1.5, negative_slope=0.1, threshold=0.2)(x[0]),
    )
    add("LeakyReLU", seq, lambda k, x: k.layers.LeakyReLU(0.2)(x[0]))
    add("Softmax_axis", img, lambda k, x: k.layers.Softmax(axis=1)(x[0]))
    add("Rescaling", img, lambda k, x: k.layers.Rescaling(1 / 255.0, offset=-1)(x[0]))
    add("Normalization", img, lambda k, x: k.layers.Normalization(mean=0.5, variance=2.0)(x[0]))
    add("CenterCrop", img, lambda k, x: k.layers.CenterCrop(8, 6)(x[0]))
    for method in (
        "bilinear",
        "nearest",
        "bicubic",
        "area",
        "lanczos3",
        "lanczos5",
        "gaussian",
        "mitchellcubic",
    ):
        add(f"Resizing_{method}", img, lambda k, x, m=method: k.layers.Resizing(7, 17, interpolation=m)(x[0]))
    add("Resizing_crop", img, lambda k, x: k.layers.Resizing(8, 5, crop_to_aspect_ratio=True)(x[0]))
    add("Discretization", seq, lambda k, x: k.layers.Discretization(bin_boundaries=[-1.0, 0.0, 0.5])(x[0]))
    add("CategoryEncoding", ids, lambda k, x: k.layers.CategoryEncoding(50, output_mode="count")(x[0]))
    add("CategoryEncoding_onehot", [((1,), "int32")], lambda k, x: k.layers.CategoryEncoding(50)(x[0]))
    words = [((4,), "string")]
    vocab = ["cat", "dog", "bird", "fish"]
    add("Hashing_int", ids, lambda k, x: k.layers.Hashing(10)(x[0]))
    add("Hashing_string", words, lambda k, x: k.layers.Hashing(7)(x[0]))
    add("IntegerLookup", ids, lambda k, x: k.layers.IntegerLookup(vocabulary=[3, 7, 11, 20])(x[0]))
    add("StringLookup", words, lambda k, x: k.layers.StringLookup(vocabulary=vocab)(x[0]))
    add(
        "StringLookup_oov2",
        words,
        lambda k, x: k.layers.StringLookup(vocabulary=vocab, num_oov_indices=2)(x[0]),
    )
    add(
        "StringLookup_multi_hot",
        words,
        lambda k, x: k.layers.StringLookup(vocabulary=vocab, output_mode="multi_hot")(x[0]),
    )
    add(
        "StringLookup_invert",
        ids,
        lambda k, x: k.layers.StringLookup(vocabulary=vocab, invert=True)(k.ops.minimum(x[0], 4)),
    )
    add(
        "TextVectorization",
        [((1,), "string")],
        lambda k, x: k.layers.TextVectorization(output_sequence_length=5, vocabulary=vocab)(x[0]),
    )
    for merge in ("Concatenate", "Add", "Multiply", "Subtract", "Average", "Maximum", "Minimum"):
        add(merge, seq + seq, lambda k, x, m=merge: getattr(k.layers, m)()([x[0], x[1]]))
    add("Dot", seq + seq, lambda k, x: k.layers.Dot(axes=(2, 2), normalize=True)([x[0], x[1]]))
    add("Masking_LSTM", seq, lambda k, x: k.layers.LSTM(4)(k.layers.Masking(0.0)(x[0])))
    add(
        "Embedding_mask_GRU",
        ids,
        lambda k, x: k.layers.GRU(4)(k.layers.Embedding(50, 6, mask_zero=True)(x[0])),
    )
    add(
        "RandomFlip_etc",
        img,
        lambda k, x: k.layers.RandomContrast(0.2)(k.layers.RandomRotation(0.1)(k.layers.RandomFlip()(x[0]))),
    )
    add("ops_sort_topk", seq, lambda k, x: k.ops.top_k(k.ops.sort(x[0], axis=-1), 3)[0])
    add("ops_argsort", seq, lambda k, x: k.ops.cast(k.ops.argsort(x[0], axis=1), "float32"))
    add("ops_cumsum_logsumexp", seq, lambda k, x: k.ops.logsumexp(k.ops.cumsum(x[0], axis=1), axis=-1))
    add("ops_norm_clip", seq, lambda k, x: k.ops.clip(k.ops.norm(x[0], axis=-1, keepdims=True), 0.5, 3.0))
    add(
        "ops_where_einsum",
        seq,
        lambda k, x: k.ops.einsum("btd,bsd->bts", k.ops.where(x[0] > 0, x[0], 0.0), x[0]),
    )
    sig = [((64,), "float32")]
    add("ops_stft", sig, lambda k, x: k.ops.stft(x[0], 16, 8, 16)[0])
    add("ops_rfft_irfft", sig, lambda k, x: k.ops.irfft(k.ops.rfft(x[0])))
    add(
        "ops_fft_abs",
        sig,
        lambda k, x: k.ops.sqrt(k.ops.square(k.ops.rfft(x[0])[0]) + k.ops.square(k.ops.rfft(x[0])[1])),
    )
    add("ops_rgb_to_grayscale", img, lambda k, x: k.ops.image.rgb_to_grayscale(x[0]))
    add("ops_rgb_to_hsv", img, lambda k, x: k.ops.image.rgb_to_hsv(k.ops.sigmoid(x[0])))
    add(
        "ops_affine_transform",
        img,
        lambda k, x: k.ops.image.affine_transform(
            x[0], k.ops.convert_to_tensor([[1.0, 0.1, 0.5, 0.0, 1.0, -0.5, 0.0, 0.0]] * 2)
        ),
    )
    add("ops_extract_patches", img, lambda k, x: k.ops.image.extract_patches(x[0], 3))
    add(
        "ops_segment_sum",
        seq,
        lambda k, x: k.ops.segment_sum(
            x[0][0], k.ops.convert_to_tensor([0, 0, 1, 1, 1, 2, 2, 3, 3, 3]), num_segments=4
        ),
    )
    add("ops_logsumexp_erfinv", seq, lambda k, x: k.ops.erfinv(k.ops.tanh(x[0]) * 0.9))
    add(
        "ops_cholesky_inv",
        [((4, 4), "float32")],
        lambda k, x: k.ops.linalg.inv(k.ops.matmul(x[0], k.ops.transpose(x[0], (0, 2, 1))) + k.ops.eye(4)),
    )
    add(
        "ops_argsort_searchsorted",
        seq,
        lambda k, x: k.ops.cast(k.ops.searchsorted(k.ops.sort(x[0][0, 0]), x[0][0, 1]), "float32"),
    )
    add("ops_unique_bincount", ids, lambda k, x: k.ops.bincount(k.ops.reshape(x[0], (-1,)), minlength=30))
    add("ops_roll_flip", seq, lambda k, x: k.ops.roll(k.ops.flip(x[0], 1), 2, axis=1))
    add(
        "ops_tril_triu_diag",
        [((5, 5), "float32")],
        lambda k, x: k.ops.tril(x[0]) + k.ops.triu(x[0], 1) * 2 + k.ops.diag(k.ops.diagonal(x[0][0])),
    )
    add("ops_linspace_meshgrid", seq, lambda k, x: x[0] * k.ops.linspace(0.0, 1.0, 6))
    add(
        "ops_nms",
        [((10, 4), "float32")],
        lambda k, x: k.ops.cast(k.ops.image.crop_images(x[0][..., None], 0, 0, 5, 2), "float32"),
    )
    add("ops_quantile", seq, lambda k, x: k.ops.quantile(x[0], 0.3, axis=1))
    add(
        "ops_histogram_digitize",
        seq,
        lambda k, x: k.ops.cast(k.ops.digitize(x[0], [-1.0, 0.0, 1.0]), "float32"),
    )
    add("ops_ctc_decode_like", seq, lambda k, x: k.ops.log_softmax(x[0], axis=-1))
    add(
        "TextVectorization_LSTM_classifier",
        [((1,), "string")],
        lambda k, x: k.layers.Dense(3, activation="softmax")(
            k.layers.LSTM(8)(
                k.layers.Embedding(10, 6, mask_zero=True)(
                    k.layers.TextVectorization(max_tokens=10, output_sequence_length=6, vocabulary=vocab)(
                        x[0]
                    )
                )
            )
        ),
    )
    add(
        "Hashing_Embedding_mean",
        words,
        lambda k, x: k.ops.mean(k.layers.Embedding(16, 4)(k.layers.Hashing(16)(x[0])), axis=1),
    )
    return L


def export(names: list[str], folder: Path) -> dict[str, Any]:
    import keras
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    layers = _layers()
    rng = np.random.default_rng(3)
    rows: dict[str, Any] = {}
    for name in names:
        specs, fn = layers[name]
        keras.utils.set_random_seed(1)
        try:
            inputs = [keras.Input(s, batch_size=2, dtype=d) for s, d in specs]
            model = keras.Model(inputs, fn(keras, inputs))
            sig = [tf.TensorSpec([2, *s], d, name=f"in{i}") for i, (s, d) in enumerate(specs)]

            @tf.function(input_signature=sig)
            def serve(*xs: Any, m: Any = model) -> Any:
                return m(list(xs) if len(xs) > 1 else xs[0], training=False)

            frozen = convert_variables_to_constants_v2(serve.get_concrete_function())
        except Exception as e:
            rows[name] = {"export_error": f"{type(e).__name__}: {e}"[:300]}
            continue
        graph_def = frozen.graph.as_graph_def()
        feeds = []
        for s, d in specs:
            if d.startswith("int"):
                feeds.append(rng.integers(0, 25, (2, *s)).astype(d))
            elif d == "string":
                pool = ["cat", "dog", "bird", "fish", "", "The Cat sat, on the dog!", "zebra", "Dog"]
                feeds.append(np.array(rng.choice(pool, (2, *s)).tolist(), dtype=object))
            else:
                feeds.append(rng.standard_normal((2, *s)).astype(d))
        if any(n.op in _TABLE_OPS or n.attr["dtype"].type == _DT_RESOURCE for n in graph_def.node):
            # a frozen graph cannot hold a table: served as users serve these layers, from a SavedModel
            rows[name] = _saved_model(model, sig, feeds, folder / name)
            continue
        graph = tf.Graph()
        with graph.as_default():
            tf.compat.v1.import_graph_def(graph_def, name="")
        in_names = [t.name for t in frozen.inputs if t.dtype != tf.resource]
        out_names = [t.name for t in frozen.outputs]
        try:
            with tf.compat.v1.Session(graph=graph) as sess:
                want = sess.run(out_names, dict(zip(in_names, feeds, strict=True)))
        except Exception as e:  # what freezing cannot hold (a lookup table's resource)
            rows[name] = {"export_error": f"{type(e).__name__}: {str(e).splitlines()[-1]}"[:300]}
            continue
        case = folder / name
        case.mkdir(parents=True, exist_ok=True)
        (case / "model.pb").write_bytes(graph_def.SerializeToString())
        np.savez(
            case / "io.npz",
            **{f"in{i}": f for i, f in enumerate(feeds)},
            **{f"out{i}": w for i, w in enumerate(want)},
        )
        ops = sorted(
            {n.op for n in graph_def.node} | {n.op for f in graph_def.library.function for n in f.node_def}
        )
        (case / "meta.json").write_text(json.dumps({"inputs": in_names, "outputs": out_names, "ops": ops}))
        rows[name] = {"ops": ops}
    return rows


_TABLE_OPS = {"HashTableV2", "MutableHashTableV2"}
_DT_RESOURCE = 20  # a resource placeholder: what freezing left of a table it cannot hold


def _saved_model(model: Any, sig: list[Any], feeds: list[np.ndarray], case: Path) -> dict[str, Any]:
    import tensorflow as tf

    case.mkdir(parents=True, exist_ok=True)
    try:
        model.export(str(case / "saved"), format="tf_saved_model", verbose=False, input_signature=sig)
        serve = tf.saved_model.load(str(case / "saved")).signatures["serving_default"]
        keys = sorted(serve.structured_input_signature[1])
        result = serve(**{k: tf.constant(f) for k, f in zip(keys, feeds, strict=True)})
    except Exception as e:
        return {"export_error": f"{type(e).__name__}: {str(e).splitlines()[0]}"[:300]}
    outs = sorted(result)
    np.savez(
        case / "io.npz",
        **{f"in{i}": f for i, f in enumerate(feeds)},
        **{f"out{i}": result[k].numpy() for i, k in enumerate(outs)},
    )
    (case / "meta.json").write_text(json.dumps({"inputs": keys, "outputs": outs, "saved_model": True}))
    return {"ops": ["(SavedModel)"]}


def worker(folder: Path) -> dict[str, Any]:
    from poolserve import Session, load_graph_def, load_saved_model

    rows: dict[str, Any] = {}
    for case in sorted(p for p in folder.iterdir() if (p / "meta.json").exists()):
        meta = json.loads((case / "meta.json").read_text())
        data = np.load(case / "io.npz", allow_pickle=True)
        feeds = {n: data[f"in{i}"] for i, n in enumerate(meta["inputs"])}
        try:
            if meta.get("saved_model"):
                model = load_saved_model(case / "saved")
                answer = model.run(feeds)
                model.close()
                got = [answer[k] for k in meta["outputs"]]
            else:
                with Session(load_graph_def(case / "model.pb")) as sess:
                    got = sess.run(meta["outputs"], feeds)
        except Exception as e:
            rows[case.name] = {"error": f"{type(e).__name__}: {e}"[:400]}
            continue
        errs = []
        for i, g in enumerate(got):
            w = data[f"out{i}"]
            if g.shape != w.shape or g.dtype != w.dtype:
                errs.append(f"out{i}: {g.dtype}{list(g.shape)} != TF {w.dtype}{list(w.shape)}")
                continue
            if w.dtype == object:
                if g.tolist() != w.tolist():
                    errs.append(f"out{i}: {g.ravel()[:6].tolist()} != TF {w.ravel()[:6].tolist()}")
                continue
            scale = float(np.max(np.abs(w))) if w.size else 0.0
            err = (
                float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64)))) / max(scale, 1e-30)
                if w.size
                else 0.0
            )
            if not err <= TOL:
                errs.append(f"out{i}: rel. error {err:.2e}")
        rows[case.name] = {"errors": errs} if errs else {"ok": True}
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", default="")
    parser.add_argument("--python", default=str(HERE.parent / ".venv/bin/python"))
    parser.add_argument("--out", default="")
    parser.add_argument("--worker", default="")
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(Path(args.worker))))
        return 0
    folder = Path(args.out or tempfile.mkdtemp(prefix="keras_layers_"))
    names = [n for n in args.only.split(",") if n] or list(_layers())
    exported = export(names, folder)
    done = subprocess.run(
        [args.python, __file__, "--worker", str(folder)], capture_output=True, text=True, cwd=HERE.parent
    )
    if done.returncode:
        print(done.stderr[-3000:])
        return 2
    checked = json.loads(done.stdout.strip().splitlines()[-1])
    bad = 0
    for name in names:
        row = exported[name] | checked.get(name, {})
        status = "ok" if row.get("ok") else "EXPORT" if "export_error" in row else "FAIL"
        bad += status == "FAIL"
        detail = row.get("export_error") or row.get("error") or "; ".join(row.get("errors", []))
        print(f"{status:6s} {name:34s} {detail}")
    print(f"{bad} of {len(names)} layers differ or fail in poolserve; folder {folder}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
