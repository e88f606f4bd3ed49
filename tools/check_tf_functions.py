"""Checks hand-written ``tf.function`` SavedModels and TF1 frozen graphs against poolserve (dev only).

Run with the TensorFlow environment; the poolserve side runs in a subprocess of the project's venv::

    /opt/tfenv/bin/python tools/check_tf_functions.py [--only name,name] [--python .venv/bin/python]
        [--out /tmp/tf_functions]

Each entry of ``CASES`` is a small ``tf.function`` as users write them in a ``tf.Module`` (control flow v2,
string chains, parsing, linalg, segment and scan ops, image resizing, stateless random, scatter and gather,
dtype corners), saved as a SavedModel and run by TensorFlow on fixed inputs. Entries of ``V1_CASES`` are
``tf.compat.v1`` graphs, frozen. ``--worker`` (run by the venv's Python, importing only poolserve) loads
each, runs it on the same inputs and compares: floats within ``TOL`` of the output's largest magnitude,
everything else exactly, dtypes and shapes equal.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

TOL = 1e-5
_weights: Any = None
_bias: Any = None
_counts: Any = None
_tables: list[Any] = []
HERE = Path(__file__).resolve().parent


def _cases(tf: Any) -> dict[str, tuple[Callable[..., Any], list[Any], list[np.ndarray]]]:
    """name -> (function returning a tensor or a tuple, input specs, inputs)."""
    S = tf.TensorSpec
    rng = np.random.default_rng(5)
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    C: dict[str, tuple[Callable[..., Any], list[Any], list[np.ndarray]]] = {}
    global _weights, _bias, _counts
    _tables.clear()
    _weights = tf.Variable(rng.standard_normal((3, 2)).astype(np.float32))
    _bias = tf.Variable(np.float32([0.5, -1.0]))
    _counts = tf.Variable(np.int64([3, 4]))

    def add(name: str, specs: list[Any], inputs: list[Any]) -> Callable[..., Any]:
        def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
            C[name] = (fn, specs, [np.asarray(x) for x in inputs])
            return fn

        return deco

    # --- control flow v2 ---
    @add("while_nested_cond", [S([None], tf.float32)], [f32(5)])
    def _(x):
        def body(i, acc):
            acc = tf.cond(
                i % 2 == 0,
                lambda: acc + x[i],
                lambda: tf.cond(x[i] > 0, lambda: acc * 1.5, lambda: acc - 1.0),
            )
            return i + 1, acc

        return tf.while_loop(lambda i, a: i < tf.shape(x)[0], body, [0, 0.0])[1]

    @add("tensorarray_dynamic", [S([None, 3], tf.float32)], [f32(4, 3)])
    def _(x):
        ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
        for i in tf.range(tf.shape(x)[0]):
            ta = ta.write(i, tf.reduce_sum(x[: i + 1], axis=0))
        return ta.stack()

    @add("tensorarray_ragged_rows", [S([None], tf.int32)], [np.array([3, 1, 4, 1, 5], np.int32)])
    def _(n):
        ta = tf.TensorArray(tf.float32, size=tf.shape(n)[0], infer_shape=False)
        for i in tf.range(tf.shape(n)[0]):
            ta = ta.write(i, tf.range(n[i], dtype=tf.float32) * 0.5)
        return ta.concat()

    @add("loop_break", [S([None], tf.float32)], [np.array([1.0, 2.0, 3.0, -1.0, 5.0], np.float32)])
    def _(x):
        total = tf.constant(0.0)
        for v in x:
            if v < 0:
                break
            total += v
        return total

    @add("range_loop_accum", [S([], tf.int32)], [np.int32(6)])
    def _(n):
        s = tf.constant(0, tf.int64)
        for i in tf.range(n):
            s += tf.cast(i * i, tf.int64)
        return s

    inner = tf.function(lambda a: tf.nn.relu(a) * 2.0)

    @add("function_calls_function", [S([None, 2], tf.float32)], [f32(3, 2)])
    def _(x):
        return inner(x) + inner(-x)

    @add("switch_case", [S([], tf.int32), S([3], tf.float32)], [np.int32(1), f32(3)])
    def _(k, x):
        return tf.switch_case(k, [lambda: x * 2.0, lambda: tf.sin(x), lambda: -x], default=lambda: x)

    @add("switch_case_default", [S([], tf.int32), S([3], tf.float32)], [np.int32(7), f32(3)])
    def _(k, x):
        return tf.switch_case(k, [lambda: x * 2.0, lambda: tf.sin(x)], default=lambda: x - 1.0)

    @add("while_shape_changes", [S([2], tf.float32)], [f32(2)])
    def _(x):
        def body(i, a):
            return i + 1, tf.concat([a, a * 0.5], 0)

        return tf.while_loop(
            lambda i, a: i < 3, body, [0, x], shape_invariants=[tf.TensorShape([]), tf.TensorShape([None])]
        )[1]

    @add("autograph_if_else_tensor", [S([None], tf.float32)], [f32(4)])
    def _(x):
        if tf.reduce_sum(x) > 0:  # noqa: SIM108 (autograph turns this statement into a cond)
            y = x * 2
        else:
            y = -x
        return y, tf.shape(y)

    @add("map_fn", [S([None, 3], tf.float32)], [f32(4, 3)])
    def _(x):
        return tf.map_fn(lambda r: tf.reduce_max(r) - tf.reduce_min(r), x)

    @add("scan_cumprod", [S([None], tf.float32)], [f32(5)])
    def _(x):
        return tf.scan(lambda a, v: a * v + 1.0, x, initializer=1.0)

    @add("foldl", [S([None], tf.int32)], [np.array([1, 2, 3, 4], np.int32)])
    def _(x):
        return tf.foldl(lambda a, v: a * 2 + v, x, initializer=tf.constant(0))

    # --- strings ---
    @add(
        "strings_chain",
        [S([None], tf.string)],
        [np.array([b" Hello World ", b"a,b,,c", b"\xc3\xa9t\xc3\xa9 42"], object)],
    )
    def _(s):
        t = tf.strings.lower(tf.strings.strip(s))
        parts = tf.strings.split(t, " ")
        joined = tf.strings.reduce_join(parts, axis=-1, separator="|")
        return (
            joined,
            tf.strings.length(t),
            tf.strings.length(t, unit="UTF8_CHAR"),
            tf.strings.substr(t, 1, 3),
            tf.strings.regex_replace(t, "[0-9]+", "#"),
            tf.strings.join([t, "x"], separator="-"),
            tf.strings.to_hash_bucket_fast(t, 10),
            tf.strings.upper(t),
            parts.row_lengths(),
        )

    @add("strings_to_number", [S([None], tf.string)], [np.array([b"1.5", b"-2", b"3e2", b"0"], object)])
    def _(s):
        return (
            tf.strings.to_number(s),
            tf.strings.to_number(s[1:2], tf.int64),
            tf.strings.as_string(tf.strings.to_number(s), precision=2),
        )

    @add("strings_split_ngrams", [S([None], tf.string)], [np.array([b"a b c d", b"e f", b""], object)])
    def _(s):
        w = tf.strings.split(s)
        ng = tf.strings.ngrams(w, 2, separator="_")
        return ng.flat_values, ng.row_splits, tf.strings.format("{} words", tf.size(w.flat_values))

    @add("decode_csv", [S([None], tf.string)], [np.array([b"1,2.5,abc", b"4,,de", b",7,"], object)])
    def _(s):
        a, b, c = tf.io.decode_csv(s, record_defaults=[[0], [1.0], ["zz"]])
        return a, b, c

    @add("decode_base64", [S([None], tf.string)], [np.array([b"aGVsbG8", b"d29ybGQ_", b""], object)])
    def _(s):
        d = tf.io.decode_base64(s)
        return d, tf.io.encode_base64(d, pad=True)

    @add(
        "unicode_ops", [S([None], tf.string)], [np.array(["héllo".encode(), b"abc", "日本".encode()], object)]
    )
    def _(s):
        cp = tf.strings.unicode_decode(s, "UTF-8")
        return (
            cp.flat_values,
            cp.row_splits,
            tf.strings.unicode_encode(cp, "UTF-8"),
            tf.strings.unicode_split(s, "UTF-8").flat_values,
        )

    # --- parsing ---
    def _example(i: int) -> bytes:
        f = tf.train.Feature
        return tf.train.Example(
            features=tf.train.Features(
                feature={
                    "age": f(int64_list=tf.train.Int64List(value=[20 + i])),
                    "score": f(float_list=tf.train.FloatList(value=[0.5 * i, 1.0 + i])),
                    "tags": f(bytes_list=tf.train.BytesList(value=[b"t%d" % k for k in range(i)])),
                    "ids": f(int64_list=tf.train.Int64List(value=list(range(i + 1)))),
                }
            )
        ).SerializeToString()

    ser = np.array([_example(i) for i in range(3)], object)
    spec = {
        "age": tf.io.FixedLenFeature([], tf.int64),
        "score": tf.io.FixedLenFeature([2], tf.float32),
        "missing": tf.io.FixedLenFeature([], tf.float32, default_value=-1.0),
        "tags": tf.io.VarLenFeature(tf.string),
        "ids": tf.io.RaggedFeature(tf.int64),
    }

    @add("parse_example", [S([None], tf.string)], [ser])
    def _(s):
        p = tf.io.parse_example(s, spec)
        return (
            p["age"],
            p["score"],
            p["missing"],
            p["tags"].indices,
            p["tags"].values,
            p["tags"].dense_shape,
            p["ids"].flat_values,
            p["ids"].row_splits,
        )

    @add("parse_single_example", [S([], tf.string)], [ser[2]])
    def _(s):
        p = tf.io.parse_single_example(s, spec)
        return p["age"], p["score"], p["tags"].values, p["ids"]

    @add("parse_example_fixed_seq", [S([None], tf.string)], [ser])
    def _(s):
        p = tf.io.parse_example(
            s, {"ids": tf.io.FixedLenSequenceFeature([], tf.int64, allow_missing=True, default_value=-1)}
        )
        return p["ids"]

    # --- signal ---
    @add("signal_stft", [S([None, 64], tf.float32)], [f32(2, 64)])
    def _(x):
        st = tf.signal.stft(x, frame_length=16, frame_step=8, fft_length=16)
        return tf.abs(st), tf.signal.inverse_stft(st, 16, 8, 16)

    @add("signal_frame_overlap", [S([None, 20], tf.float32)], [f32(2, 20)])
    def _(x):
        fr = tf.signal.frame(x, 6, 3, pad_end=True)
        return fr, tf.signal.overlap_and_add(fr, 3)

    @add("signal_mfcc", [S([None, 128], tf.float32)], [f32(2, 128)])
    def _(x):
        spec_ = tf.abs(tf.signal.stft(x, 32, 16))
        mel = tf.signal.linear_to_mel_weight_matrix(8, spec_.shape[-1], 8000.0, 20.0, 4000.0)
        logmel = tf.math.log(tf.tensordot(spec_, mel, 1) + 1e-6)
        return tf.signal.mfccs_from_log_mel_spectrograms(logmel)

    @add("signal_dct_rfft", [S([None, 8], tf.float32)], [f32(3, 8)])
    def _(x):
        r = tf.signal.rfft(x)
        return (
            tf.signal.dct(x, type=2),
            tf.signal.dct(x, type=3, norm="ortho"),
            tf.signal.idct(x, norm="ortho"),
            tf.signal.irfft(r),
            tf.math.real(r),
            tf.signal.hann_window(8),
            tf.signal.hamming_window(7, periodic=False),
        )

    # --- linalg ---
    a4 = f32(4, 4)
    spd = (a4 @ a4.T + 4 * np.eye(4)).astype(np.float32)

    @add("linalg_solve_chol", [S([4, 4], tf.float32), S([4, 2], tf.float32)], [spd, f32(4, 2)])
    def _(a, b):
        ch = tf.linalg.cholesky(a)
        return (
            tf.linalg.solve(a, b),
            ch,
            tf.linalg.cholesky_solve(ch, b),
            tf.linalg.triangular_solve(ch, b, lower=True),
            tf.linalg.inv(a),
            tf.linalg.det(a),
            tf.linalg.logdet(a),
            tf.linalg.slogdet(a)[1],
        )

    @add("linalg_qr_svd", [S([5, 3], tf.float32)], [f32(5, 3)])
    def _(a):
        q, r = tf.linalg.qr(a)
        s = tf.linalg.svd(a, compute_uv=False)
        return tf.abs(q), tf.abs(r), s, tf.linalg.pinv(a), tf.linalg.norm(a), tf.linalg.matrix_rank(a)

    @add("linalg_eigh", [S([4, 4], tf.float32)], [spd])
    def _(a):
        e, v = tf.linalg.eigh(a)
        return e, tf.abs(v), tf.linalg.eigvalsh(a)

    @add("linalg_eig", [S([3, 3], tf.float32)], [spd[:3, :3]])
    def _(a):
        return tf.math.real(tf.linalg.eigvals(a))

    @add("linalg_misc", [S([2, 3, 3], tf.float32)], [f32(2, 3, 3)])
    def _(a):
        return (
            tf.linalg.band_part(a, 1, 0),
            tf.linalg.diag_part(a),
            tf.linalg.trace(a),
            tf.linalg.matrix_transpose(a),
            tf.linalg.set_diag(a, tf.ones([2, 3])),
            tf.linalg.lstsq(a, tf.ones([2, 3, 1])),
            tf.linalg.expm(a * 0.1),
            tf.linalg.cross(a[:, 0], a[:, 1]),
            tf.linalg.l2_normalize(a, axis=-1),
        )

    # --- segment / cumulative ---
    @add(
        "segment_cumulative",
        [S([None, 2], tf.float32), S([None], tf.int32)],
        [f32(6, 2), np.array([0, 0, 1, 1, 1, 3], np.int32)],
    )
    def _(x, seg):
        return (
            tf.math.segment_sum(x, seg),
            tf.math.segment_mean(x, seg),
            tf.math.segment_max(x, seg),
            tf.math.unsorted_segment_sum(x, seg, 5),
            tf.math.unsorted_segment_min(x, seg, 5),
            tf.math.unsorted_segment_mean(x, seg, 5),
            tf.math.unsorted_segment_sqrt_n(x, seg, 5),
            tf.math.cumsum(x, axis=0, exclusive=True),
            tf.math.cumsum(x, axis=0, reverse=True),
            tf.math.cumsum(x, axis=0, exclusive=True, reverse=True),
            tf.math.cumprod(x, axis=0, exclusive=True, reverse=True),
            tf.math.cumulative_logsumexp(x, axis=0, reverse=True),
            tf.math.cumsum(seg, exclusive=True),
            tf.math.segment_prod(x, seg),
        )

    @add("sparse_segment", [S([None, 2], tf.float32)], [f32(5, 2)])
    def _(x):
        idx = tf.constant([0, 2, 4, 1])
        seg = tf.constant([0, 0, 1, 2])
        return (
            tf.sparse.segment_sum(x, idx, seg),
            tf.sparse.segment_mean(x, idx, seg),
            tf.sparse.segment_sqrt_n(x, idx, seg, num_segments=4),
        )

    # --- image ---
    img = rng.uniform(0, 255, (1, 7, 9, 3)).astype(np.float32)

    @add("image_resize_methods", [S([None, 7, 9, 3], tf.float32)], [img])
    def _(x):
        outs = []
        for m in (
            "bilinear",
            "nearest",
            "bicubic",
            "area",
            "lanczos3",
            "lanczos5",
            "gaussian",
            "mitchellcubic",
        ):
            for aa in (False, True):
                outs.append(tf.image.resize(x, [4, 5], method=m, antialias=aa))
        outs.append(tf.image.resize(x, [11, 13], method="bicubic"))
        outs.append(tf.image.resize(x, [11, 13], method="lanczos3", antialias=True))
        outs.append(tf.image.resize(x, [11, 13], method="bilinear", antialias=True))
        outs.append(tf.image.resize_with_pad(x, 10, 10))
        outs.append(tf.image.resize(x, [5, 5], preserve_aspect_ratio=True))
        outs.append(tf.compat.v1.image.resize_bilinear(x, [4, 5], align_corners=True))
        outs.append(tf.compat.v1.image.resize_nearest_neighbor(x, [14, 18], half_pixel_centers=True))
        outs.append(tf.compat.v1.image.resize_bicubic(x, [4, 5], half_pixel_centers=True))
        return tuple(outs)

    @add("image_uint8", [S([None, 7, 9, 3], tf.uint8)], [img.astype(np.uint8)])
    def _(x):
        f = tf.image.convert_image_dtype(x, tf.float32)
        return (
            tf.image.resize(x, [4, 5]),
            tf.image.resize(x, [4, 5], method="nearest"),
            tf.image.convert_image_dtype(tf.image.adjust_brightness(f, 0.1), tf.uint8, saturate=True),
            tf.image.rgb_to_grayscale(x),
            tf.image.rgb_to_hsv(f),
            tf.image.adjust_contrast(f, 1.5),
            tf.image.adjust_saturation(f, 0.5),
            tf.image.adjust_hue(f, 0.2),
            tf.image.per_image_standardization(x),
            tf.image.central_crop(f, 0.5),
            tf.image.flip_left_right(x),
            tf.image.rot90(x, 3),
            tf.image.crop_and_resize(f, [[0.1, 0.1, 0.9, 0.8]], [0], [3, 3]),
            tf.image.extract_patches(f, [1, 3, 3, 1], [1, 2, 2, 1], [1, 1, 1, 1], "VALID"),
            tf.image.total_variation(f),
            tf.image.adjust_gamma(f, 2.0),
            tf.image.sobel_edges(f),
        )

    # --- stateless random ---
    draws = {
        "uniform": lambda seed: tf.random.stateless_uniform([3, 4], seed),
        "normal": lambda seed: tf.random.stateless_normal([5], seed, mean=1.0, stddev=2.0),
        "truncated": lambda seed: tf.random.stateless_truncated_normal([5], seed),
        "int32": lambda seed: tf.random.stateless_uniform([6], seed, minval=0, maxval=10, dtype=tf.int32),
        "int64": lambda seed: tf.random.stateless_uniform([6], seed, minval=0, maxval=10, dtype=tf.int64),
        "categorical": lambda seed: tf.random.stateless_categorical(tf.math.log([[0.1, 0.5, 0.4]]), 6, seed),
        "binomial": lambda seed: tf.random.stateless_binomial([4], seed, counts=10.0, probs=0.3),
        "poisson": lambda seed: tf.random.stateless_poisson([4], seed, lam=3.0),
        "gamma": lambda seed: tf.random.stateless_gamma([4], seed, alpha=2.0),
        "float64": lambda seed: tf.random.stateless_uniform([3], seed, dtype=tf.float64),
        "float16": lambda seed: tf.random.stateless_normal([3], seed, dtype=tf.float16),
        "param_truncated": lambda seed: tf.random.stateless_parameterized_truncated_normal(
            [4], seed, 0.0, 1.0, -1.0, 1.0
        ),
        "split": lambda seed: tf.random.experimental.stateless_split(seed, 3),
        "fold_in": lambda seed: tf.random.experimental.stateless_fold_in(seed, 5),
        "flip": lambda seed: tf.image.stateless_random_flip_left_right(
            tf.reshape(tf.range(12.0), [1, 2, 2, 3]), seed
        ),
        "brightness": lambda seed: tf.image.stateless_random_brightness(tf.ones([2, 2, 3]), 0.2, seed),
        "crop": lambda seed: tf.image.stateless_random_crop(
            tf.reshape(tf.range(48.0), [4, 4, 3]), [2, 3, 3], seed
        ),
        "dropout": lambda seed: tf.nn.experimental.stateless_dropout(tf.ones([8]), 0.5, seed),
    }
    for kind, draw in draws.items():
        add(f"stateless_{kind}", [S([2], tf.int32)], [np.array([7, 11], np.int32)])(draw)

    @add("stateless_shuffle", [S([2], tf.int32)], [np.array([7, 11], np.int32)])
    def _(seed):
        return tf.random.experimental.stateless_shuffle(tf.range(8), seed)

    # --- sort / unique / bincount ---
    @add(
        "sort_unique_bincount",
        [S([None], tf.int32), S([None], tf.float32)],
        [
            np.array([3, 1, 3, 0, 5, 1, 1], np.int32),
            np.array([0.5, -1, 0.5, 2, np.nan, -0.0, 0.0], np.float32),
        ],
    )
    def _(i, f):
        u, ui = tf.unique(i)
        uc = tf.unique_with_counts(i)
        return (
            tf.sort(i),
            tf.sort(i, direction="DESCENDING"),
            tf.argsort(i, stable=True),
            tf.argsort(i, direction="DESCENDING", stable=True),
            tf.sort(f[:4]),
            u,
            ui,
            uc.count,
            tf.math.bincount(i),
            tf.math.bincount(i, minlength=8, weights=tf.range(7, dtype=tf.float32)),
            tf.math.bincount(i, maxlength=3),
            tf.math.bincount(tf.reshape(i[:6], [2, 3]), axis=-1),
            tf.math.top_k(f[:4], 2).indices,
            tf.math.bincount(i, binary_output=True, minlength=7, axis=0),
            tf.raw_ops.UniqueV2(x=tf.reshape(i[:6], [3, 2]), axis=[0])[0],
            tf.math.count_nonzero(i),
        )

    # --- einsum ---
    @add(
        "einsum_patterns", [S([2, 3, 4], tf.float32), S([2, 4, 5], tf.float32)], [f32(2, 3, 4), f32(2, 4, 5)]
    )
    def _(a, b):
        return (
            tf.einsum("bij,bjk->bik", a, b),
            tf.einsum("bij->bji", a),
            tf.einsum("bii->bi", a[:, :3, :3]),
            tf.einsum("bij->", a),
            tf.einsum("bij,bij->b", a, a),
            tf.einsum("...ij,...jk->...ik", a, b),
            tf.einsum("i,j->ij", a[0, 0], b[0, 0]),
            tf.einsum("bij,bkj->bik", a, a),
            tf.einsum("ijk,ikl->jl", a, b),
            tf.einsum("bij,jk->bik", a, b[0]),
            tf.einsum("ii", a[0, :3, :3]),
        )

    # --- gather / scatter ---
    @add(
        "gather_scatter",
        [S([4, 3], tf.float32), S([None, 2], tf.int32)],
        [f32(4, 3), np.array([[0, 1], [3, 2], [0, 1]], np.int32)],
    )
    def _(x, idx):
        upd = tf.ones([tf.shape(idx)[0]])
        return (
            tf.gather_nd(x, idx),
            tf.gather_nd(x, idx[:, :1]),
            tf.gather_nd(tf.stack([x, x * 2]), tf.reshape(idx % 2, [3, 1, 2]), batch_dims=0),
            tf.gather(tf.stack([x, -x]), [[2, 0], [1, 1]], axis=1, batch_dims=1),
            tf.scatter_nd(idx, upd, [4, 3]),
            tf.tensor_scatter_nd_update(x, idx, upd * 5),
            tf.tensor_scatter_nd_add(x, idx, upd),
            tf.tensor_scatter_nd_sub(x, idx, upd),
            tf.tensor_scatter_nd_max(x, idx, upd),
            tf.tensor_scatter_nd_min(x, idx, upd * -3),
            tf.tensor_scatter_nd_update(x, idx[:1, :1], tf.zeros([1, 3])),
            tf.gather(x, [3, 0], axis=0),
            tf.gather_nd(tf.stack([x, x * 2]), idx[:2], batch_dims=1),
            tf.scatter_nd(idx, tf.ones([3], tf.int32), [4, 3]),
        )

    # --- dtype corners ---
    i8 = np.array([[-128, -3, 0], [5, 100, 127]], np.int8)

    @add(
        "dtype_int8_uint8",
        [S([2, 3], tf.int8), S([2, 3], tf.uint8)],
        [i8, np.array([[0, 3, 255], [128, 7, 1]], np.uint8)],
    )
    def _(a, b):
        return (
            a + a,
            a * 3,
            tf.abs(a),
            -a,
            tf.reduce_sum(a, axis=1),
            tf.reduce_max(a),
            tf.cast(a, tf.uint8),
            tf.cast(b, tf.int8),
            b + b,
            b - tf.constant(1, tf.uint8),
            b // 3,
            b % 7,
            tf.reduce_sum(b),
            tf.maximum(a, tf.constant(1, tf.int8)),
            tf.transpose(b),
            tf.concat([a, a], 0),
            tf.math.floordiv(a, tf.constant(3, tf.int8)),
            tf.math.floormod(a, tf.constant(3, tf.int8)),
            tf.truncatediv(a, tf.constant(3, tf.int8)),
            tf.bitwise.bitwise_and(b, tf.constant(15, tf.uint8)),
            tf.bitwise.left_shift(b, tf.constant(1, tf.uint8)),
            tf.bitwise.right_shift(a, tf.constant(2, tf.int8)),
            tf.bitwise.invert(b),
            tf.argmax(a, axis=1),
            tf.one_hot(tf.cast(b % 4, tf.int32), 4, dtype=tf.uint8),
            tf.cast(tf.cast(a, tf.float32) / 10, tf.int8),
            tf.cast(tf.constant([300.7, -200.2, 1e10]), tf.uint8),
            tf.cast(tf.constant([300.7, -200.2, -1.5]), tf.int8),
            tf.clip_by_value(a, -5, 5),
            tf.reduce_prod(b, axis=1),
            tf.reduce_mean(b, axis=1),
            tf.reduce_mean(a, axis=1),
        )

    @add(
        "dtype_int16_uint32_uint64",
        [S([3], tf.int16), S([3], tf.uint32), S([3], tf.uint64)],
        [
            np.array([-32768, 7, 32767], np.int16),
            np.array([0, 7, 4294967295], np.uint32),
            np.array([1, 2**63, 2**64 - 1], np.uint64),
        ],
    )
    def _(a, b, c):
        return (
            a + tf.constant(1, tf.int16),
            a * 2,
            tf.cast(a, tf.float32),
            tf.reduce_sum(a),
            b + tf.constant(1, tf.uint32),
            b * 3,
            b // 2,
            tf.maximum(b, tf.constant(5, tf.uint32)),
            tf.cast(b, tf.int64),
            tf.cast(b, tf.float32),
            tf.cast(c, tf.float64),
            c + tf.constant(1, tf.uint64),
            c // 3,
            tf.reduce_max(c),
            tf.cast(c, tf.int64),
            tf.bitwise.right_shift(c, tf.constant(60, tf.uint64)),
            tf.cast(b, tf.int32),
            tf.cast(a, tf.uint16),
            tf.minimum(a, tf.constant(0, tf.int16)),
            tf.sort(b),
            tf.argmax(c),
            tf.equal(b, 7),
        )

    @add("dtype_complex64", [S([3], tf.complex64)], [np.array([1 + 2j, -0.5 + 0j, 3 - 4j], np.complex64)])
    def _(z):
        return (
            z * z,
            tf.abs(z),
            tf.math.angle(z),
            tf.math.conj(z),
            tf.math.real(z),
            tf.math.imag(z),
            tf.exp(z),
            tf.math.log(z),
            tf.sqrt(z),
            tf.reduce_sum(z),
            tf.complex(tf.math.real(z), 1.0),
            z / (z + 1),
            tf.tensordot(z, z, 1),
            tf.cast(z, tf.complex128),
            tf.math.reciprocal(z),
            tf.signal.fft(z),
            tf.signal.ifft(z),
            tf.square(z),
            tf.math.tanh(z),
            tf.reduce_prod(z),
            tf.math.sign(z),
            tf.linalg.matmul(tf.reshape(z, [1, 3]), tf.reshape(z, [3, 1])),
            tf.equal(z, z),
            tf.pow(z, 2),
        )

    @add("dtype_float16", [S([2, 3], tf.float16)], [f32(2, 3).astype(np.float16)])
    def _(h):
        return (
            h + h,
            h * h,
            tf.nn.relu(h),
            tf.nn.sigmoid(h),
            tf.nn.softmax(h),
            tf.tanh(h),
            tf.matmul(h, tf.transpose(h)),
            tf.reduce_sum(h, 1),
            tf.reduce_mean(h),
            tf.exp(h),
            tf.cast(h, tf.float32),
            tf.cast(h, tf.int32),
            tf.math.rsqrt(tf.abs(h) + 1),
            tf.nn.gelu(h),
            tf.math.log_softmax(h),
            tf.nn.l2_normalize(h, 1),
            tf.square(h),
            tf.math.erf(h),
            tf.nn.conv2d(tf.reshape(h, [1, 2, 3, 1]), tf.ones([2, 2, 1, 2], tf.float16), 1, "SAME"),
            tf.nn.bias_add(h, tf.constant([1, 2, 3], tf.float16)),
            tf.math.reduce_variance(h),
            tf.nn.max_pool2d(tf.reshape(h, [1, 2, 3, 1]), 2, 1, "SAME"),
        )

    @add(
        "array_misc", [S([4, 5], tf.float32), S([4], tf.int32)], [f32(4, 5), np.array([2, 0, 1, 2], np.int32)]
    )
    def _(x, k):
        parts = tf.dynamic_partition(x, k % 2, 2)
        boxes = tf.abs(tf.reshape(x[:, :4], [4, 4]))
        boxes = tf.concat([boxes[:, :2], boxes[:, :2] + boxes[:, 2:] + 0.1], 1)
        return (
            tf.one_hot(k, 3, on_value=5.0, off_value=-1.0, axis=0),
            tf.where(x > 0, x, tf.zeros([1, 5])),
            tf.clip_by_norm(x, 1.0, axes=[1]),
            tf.math.reduce_euclidean_norm(x, 1),
            tf.boolean_mask(x, k > 0, axis=0),
            parts[0],
            tf.dynamic_stitch([tf.range(2), tf.range(2, 4)], [x[:2], x[2:]]),
            tf.unravel_index(k + 3, [3, 3]),
            tf.math.confusion_matrix(k, [2, 1, 1, 0], num_classes=3),
            tf.reverse_sequence(x, [1, 2, 3, 4], seq_axis=1, batch_axis=0),
            tf.linalg.band_part(tf.ones([4, 4]), -1, 0) * x[:, :4],
            tf.image.non_max_suppression(boxes, x[:, 4], 3, iou_threshold=0.3),
            tf.image.non_max_suppression_padded(
                boxes, x[:, 4], 3, iou_threshold=0.3, pad_to_max_output_size=True
            )[0],
            tf.image.non_max_suppression_with_scores(boxes, tf.abs(x[:, 4]), 3, soft_nms_sigma=0.5)[1],
            tf.tensor_scatter_nd_update(tf.fill([3], "a"), [[1]], ["z"]),
            tf.math.unsorted_segment_max(tf.cast(x * 10, tf.int64), k, 3),
            tf.math.segment_min(x, tf.constant([0, 0, 1, 1], tf.int64)),
            tf.math.argmax(x, axis=0, output_type=tf.int32),
            tf.math.in_top_k(tf.cast(k % 5, tf.int32), x, 2),
            tf.nn.softmax(x, axis=0),
            tf.math.reduce_prod(x, 0),
            tf.math.segment_sum(tf.ones([4]), [0, 0, 2, 2]),
            tf.image.resize(tf.reshape(x, [1, 4, 5, 1]), [8, 10], method="nearest"),
            tf.image.pad_to_bounding_box(tf.reshape(x, [4, 5, 1]), 1, 2, 6, 8),
            tf.image.image_gradients(tf.reshape(x, [1, 4, 5, 1]))[0],
            tf.image.psnr(tf.reshape(x, [4, 5, 1]), tf.reshape(x * 0.9, [4, 5, 1]), 3.0),
            tf.image.ssim(
                tf.abs(tf.reshape(tf.tile(x, [3, 3]), [12, 15, 1])),
                tf.abs(tf.reshape(tf.tile(x * 0.9, [3, 3]), [12, 15, 1])),
                3.0,
                filter_size=3,
            ),
        )

    @add("half_unary", [S([None], tf.float16)], [(rng.standard_normal(4007) * 2).astype(np.float16)])
    def _(x):
        pos = tf.abs(x) + 0.01
        return (
            tf.tanh(x),
            tf.exp(x),
            tf.math.log(pos),
            tf.sqrt(pos),
            tf.math.rsqrt(pos),
            tf.math.reciprocal(pos),
            tf.math.log1p(pos),
            tf.math.expm1(x),
            tf.nn.softplus(x),
            tf.nn.elu(x),
            tf.nn.selu(x),
            tf.nn.silu(x),
            tf.nn.gelu(x),
            tf.nn.gelu(x, approximate=True),
            tf.math.erf(x),
            tf.nn.softsign(x),
            tf.nn.leaky_relu(x),
            tf.sigmoid(x),
            tf.math.sin(x),
            tf.math.pow(pos, 1.5),
            x * x + x / pos - x,
            tf.math.reduce_mean(tf.reshape(x[:4000], [40, 100]), axis=1),
            tf.math.reduce_max(x),
            tf.math.l2_normalize(tf.reshape(x[:4000], [40, 100]), axis=1),
            tf.math.reduce_variance(tf.reshape(x[:4000], [40, 100]), axis=1),
        )

    @add(
        "dtype_bool_string",
        [S([4], tf.bool), S([4], tf.string)],
        [np.array([True, False, True, True]), np.array([b"a", b"bb", b"", b"a"], object)],
    )
    def _(b, s):
        return (
            tf.logical_and(b, tf.logical_not(b[::-1])),
            tf.reduce_any(b),
            tf.reduce_all(b),
            tf.cast(b, tf.float32),
            tf.cast(b, tf.int8),
            tf.where(b, s, "z"),
            tf.boolean_mask(s, b),
            tf.where(b),
            tf.equal(s, "a"),
            tf.reverse(s, [0]),
            tf.concat([s, s], 0),
            tf.tile(s, [2]),
            tf.gather(s, [3, 0]),
            tf.stack([b, b]),
            tf.math.logical_xor(b, b[::-1]),
            tf.reshape(s, [2, 2]),
            tf.strings.reduce_join(tf.reshape(s, [2, 2]), axis=0),
            tf.fill([2], "q"),
            tf.zeros_like(s),
            tf.expand_dims(s, 0),
            tf.pad(s, [[1, 1]]),
            tf.math.count_nonzero(b),
            tf.cast(tf.reduce_sum(tf.cast(b, tf.int32)), tf.bool),
            tf.unique(s)[0],
            tf.size(s),
        )

    @add(
        "dtype_float64_int64",
        [S([3], tf.float64), S([3], tf.int64)],
        [np.array([1.5, -2.25, 1e300]), np.array([-(2**62), 3, 2**62], np.int64)],
    )
    def _(d, i):
        return (
            d * 2,
            tf.math.log(tf.abs(d)),
            tf.reduce_sum(i),
            i // 7,
            i % 7,
            tf.cast(i, tf.float64),
            tf.cast(d, tf.int64)[:2],
            tf.cast(d, tf.float32),
            tf.math.cumsum(i),
            tf.abs(i),
            tf.nn.softmax(d[:2]),
            tf.range(i[1], dtype=tf.int64),
            tf.math.round(d),
            tf.math.floormod(d, 1.0),
            tf.cast(i, tf.int32),
        )

    # --- second batch: more ops users reach for ---
    @add("while_nested_while_v2", [S([], tf.int32)], [np.int32(4)])
    def _(n):
        def outer(i, s):
            t = tf.while_loop(lambda j, t: j < i, lambda j, t: (j + 1, t + j * i), [0, 0])[1]
            return i + 1, s + t

        return tf.while_loop(lambda i, s: i < n, outer, [0, 0], maximum_iterations=10)[1]

    @add(
        "while_max_iter_tensorarray_strings", [S([None], tf.string)], [np.array([b"a", b"bc", b"d"], object)]
    )
    def _(s):
        ta = tf.TensorArray(tf.string, size=0, dynamic_size=True)
        i = tf.constant(0)
        for j in tf.range(tf.size(s)):
            ta = ta.write(j, tf.strings.join([s[j], tf.strings.as_string(j)]))
            i += 1
        return ta.stack(), i

    @add("ragged_ops", [S([None], tf.string)], [np.array([b"a b c", b"", b"d e"], object)])
    def _(s):
        w = tf.strings.split(s)
        lens = tf.strings.length(w)
        return (
            w.to_tensor(default_value="<pad>"),
            tf.reduce_sum(lens, axis=1),
            tf.reduce_max(lens, axis=1),
            tf.ragged.map_flat_values(tf.strings.upper, w).flat_values,
            w.nrows(),
            tf.ragged.boolean_mask(w, lens > 0).row_lengths(),
            w[:, :2].to_tensor(),
            tf.concat([w, w], axis=1).row_lengths(),
            w.bounding_shape(),
            tf.strings.bytes_split(s).flat_values,
            tf.reduce_mean(tf.cast(lens, tf.float32), axis=1),
        )

    @add("sparse_inputs", [S([None, 4], tf.float32)], [f32(3, 4)])
    def _(x):
        sp = tf.sparse.from_dense(tf.where(x > 0, x, 0.0))
        w = tf.constant(np.arange(8, dtype=np.float32).reshape(4, 2))
        return (
            tf.sparse.sparse_dense_matmul(sp, w),
            tf.sparse.to_dense(tf.sparse.reorder(sp)),
            tf.sparse.reduce_sum(sp, axis=1),
            tf.sparse.to_dense(tf.sparse.reset_shape(sp, [5, 4])),
            tf.sparse.to_indicator(
                tf.sparse.SparseTensor(sp.indices, tf.cast(sp.indices[:, 1], tf.int64), sp.dense_shape), 4
            ),
            tf.sparse.to_dense(tf.sparse.fill_empty_rows(sp, -1.0)[0]),
        )

    @add("misc_math", [S([6], tf.float32)], [np.abs(f32(6)) + 0.1])
    def _(x):
        return (
            tf.searchsorted(tf.sort(x), [0.2, 1.0], side="left"),
            tf.searchsorted(tf.sort(x), [0.2, 1.0], side="right"),
            tf.histogram_fixed_width(x, [0.0, 2.0], nbins=4),
            tf.math.reduce_logsumexp(x),
            tf.math.polyval([1.0, 2.0, 3.0], x),
            tf.roll(x, 2, 0),
            tf.linspace(0.0, 1.0, 5),
            tf.meshgrid(x[:2], x[:3])[0],
            tf.nn.moments(x, axes=[0])[1],
            tf.clip_by_global_norm([x, x * 2], 1.0)[0][1],
            tf.math.lgamma(x),
            tf.math.digamma(x),
            tf.math.igamma(x, x + 1),
            tf.math.betainc(x / 10, x / 5, tf.fill([6], 0.3)),
            tf.math.bessel_i0e(x),
            tf.math.bessel_i1e(x),
            tf.math.zeta(x + 1.5, x + 1),
            tf.math.xlogy(x, x),
            tf.math.log1p(x),
            tf.math.softplus(x),
            tf.nn.in_top_k([0, 2], tf.reshape(x, [2, 3]), 1),
            tf.math.top_k(x, 3).values,
            tf.math.reduce_std(x),
            tf.math.erfinv(x / 3),
            tf.math.ndtri(x / 3),
            tf.math.is_finite(x / (x - x[0])),
            tf.math.special.dawsn(x),
            tf.math.special.expint(x),
            tf.math.special.fresnel_cos(x),
            tf.math.special.spence(x),
            tf.math.special.bessel_j0(x),
        )

    @add("nn_misc", [S([2, 8, 3], tf.float32)], [f32(2, 8, 3)])
    def _(x):
        return (
            tf.nn.conv1d_transpose(x, tf.ones([3, 2, 3]), [2, 16, 2], 2),
            tf.nn.avg_pool1d(x, 3, 2, "SAME"),
            tf.nn.local_response_normalization(tf.reshape(x, [2, 8, 3, 1]), 2),
            tf.nn.embedding_lookup(tf.reshape(x, [16, 3]), [[1, 5], [15, 0]], max_norm=1.0),
            tf.nn.normalize_moments(
                tf.constant(4.0), tf.reduce_sum(x, [0, 1]), tf.reduce_sum(x * x, [0, 1]), None
            )[1],
            tf.nn.weighted_moments(x, [1], tf.ones([2, 8, 1]))[0],
            tf.nn.log_poisson_loss(tf.abs(x), x),
            tf.nn.sigmoid_cross_entropy_with_logits(tf.sigmoid(x), x),
            tf.nn.softmax_cross_entropy_with_logits(tf.nn.softmax(x), x),
            tf.nn.sparse_softmax_cross_entropy_with_logits(tf.zeros([2, 8], tf.int32), x),
            tf.nn.depth_to_space(tf.reshape(x, [2, 2, 3, 4]), 2),
            tf.nn.space_to_depth(tf.reshape(x, [2, 4, 2, 3]), 2),
            tf.nn.dilation2d(
                tf.reshape(x, [2, 4, 6, 1]), tf.ones([2, 2, 1]), [1, 1, 1, 1], "SAME", "NHWC", [1, 1, 1, 1]
            ),
            tf.nn.erosion2d(
                tf.reshape(x, [2, 4, 6, 1]), tf.ones([2, 2, 1]), [1, 1, 1, 1], "SAME", "NHWC", [1, 1, 1, 1]
            ),
            tf.nn.pool(x, [2], "MAX", strides=[2], padding="VALID"),
            tf.nn.atrous_conv2d(tf.reshape(x, [2, 4, 6, 1]), tf.ones([2, 2, 1, 2]), 2, "SAME"),
            tf.nn.ctc_greedy_decoder(tf.transpose(x, [1, 0, 2]), tf.fill([2], 8))[0][0].values,
            tf.nn.collapse_repeated(tf.constant([[1, 1, 2, 2, 3], [4, 4, 4, 5, 5]]), [5, 3])[0],
            tf.nn.crelu(x),
            tf.nn.selu(x),
            tf.nn.silu(x),
            tf.nn.leaky_relu(x, 0.3),
            tf.nn.relu6(x * 4),
        )

    @add(
        "strings_more",
        [S([None], tf.string)],
        [np.array([b"Hello, World", b"  x  y ", "naïve café".encode()], object)],
    )
    def _(s):
        return (
            tf.strings.regex_full_match(s, ".*o.*"),
            tf.strings.split(s, maxsplit=1).to_tensor(),
            tf.strings.to_hash_bucket_strong(s, 7, [1, 2]),
            tf.strings.to_hash_bucket(s, 9),
            tf.strings.unicode_script(tf.strings.unicode_decode(s, "UTF-8").flat_values),
            tf.strings.substr(s, -3, 2),
            tf.strings.substr(s, 1, 3, unit="UTF8_CHAR"),
            tf.strings.lower(s, encoding="utf-8"),
            tf.strings.unsorted_segment_join(s, [1, 0, 1], 2, separator="+"),
            tf.strings.reduce_join(s, separator=" "),
            tf.strings.regex_replace(s, r"(\w+)", r"<\1>", replace_global=False),
            tf.strings.unicode_split(s, "UTF-8").row_lengths(),
            tf.strings.as_string(tf.constant([1.5, 2.25]), precision=3, width=8, fill="0"),
            tf.strings.as_string(tf.constant([3, -4]), width=5),
            tf.strings.as_string(tf.constant([True, False])),
            tf.strings.as_string(tf.constant([1e-7, 123456789.0]), scientific=True),
            tf.strings.as_string(tf.constant([1e-7, 123456789.0]), shortest=True),
        )

    @add("linalg_more", [S([3, 3], tf.float32)], [spd[:3, :3]])
    def _(a):
        lu, p = tf.linalg.lu(a)
        return (
            lu,
            p,
            tf.linalg.lu_solve(lu, p, tf.ones([3, 1])),
            tf.linalg.sqrtm(a),
            tf.linalg.matrix_transpose(tf.linalg.adjoint(a)),
            tf.linalg.tridiagonal_solve(tf.stack([a[0], a[1], a[2]]), tf.ones([3])),
            tf.linalg.tensor_diag(a[0]),
            tf.linalg.eye(3, 2),
            tf.linalg.global_norm([a]),
            tf.linalg.normalize(a)[0],
            tf.linalg.diag(a, k=(-1, 1)),
            tf.linalg.matvec(a, a[0]),
        )

    @add("io_misc", [S([None], tf.string)], [np.array([b"abc", b"hello world"], object)])
    def _(s):
        z = tf.io.encode_base64(s)
        return (
            tf.io.decode_raw(s[:1], tf.uint8),
            tf.raw_ops.DecodePaddedRaw(input_bytes=s, fixed_length=6, out_type=tf.uint8),
            tf.strings.unicode_decode_with_offsets(s, "UTF-8")[1].flat_values,
            z,
            tf.io.decode_base64(z),
        )

    @add("serialize_tensor", [S([None], tf.string)], [np.array([b"a", b"bc"], object)])
    def _(s):
        return tf.io.serialize_tensor(tf.strings.length(s)), tf.io.parse_tensor(
            tf.io.serialize_tensor(s), tf.string
        )

    @add("sparse_maximum", [S([None, 4], tf.float32)], [f32(3, 4)])
    def _(x):
        sp = tf.sparse.from_dense(tf.where(x > 0, x, 0.0))
        return tf.sparse.to_dense(tf.sparse.maximum(sp, tf.sparse.from_dense(x * 0.5)))

    @add("cond_structures", [S([], tf.bool), S([2], tf.float32)], [np.bool_(False), f32(2)])
    def _(p, x):
        a, b = tf.cond(p, lambda: (x, tf.constant(1)), lambda: (x * 2, tf.constant(2)))
        c = tf.cond(p, lambda: {"u": x[0]}, lambda: {"u": x[1]})["u"]
        d = tf.case([(p, lambda: x + 1)], default=lambda: x - 1)
        e = tf.cond(tf.logical_not(p), lambda: tf.strings.as_string(x), lambda: tf.fill([2], "no"))
        return a, b, c, d, e

    @add("variables_module", [S([None, 3], tf.float32)], [f32(4, 3)])
    def _(x):
        return tf.matmul(x, _weights) + _bias, tf.reduce_sum(_counts)

    # --- third batch: serving pipelines (lookup tables, detection, attention, audio, text, sparse) ---
    _tables.append(
        tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(["cat", "dog", "bird"]), tf.constant([0, 1, 2], tf.int64)
            ),
            default_value=-1,
        )
    )
    _tables.append(
        tf.lookup.StaticVocabularyTable(
            tf.lookup.KeyValueTensorInitializer(tf.constant(["cat", "dog"]), tf.constant([0, 1], tf.int64)),
            num_oov_buckets=3,
        )
    )

    _tables.append(
        tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tf.constant([1, 2], tf.int64), tf.constant(["one", "two"])),
            default_value="?",
        )
    )

    @add(
        "lookup_static_tables", [S([None], tf.string)], [np.array([b"dog", b"fish", b"cat", b"a b"], object)]
    )
    def _(s):
        return (
            _tables[0].lookup(s),
            _tables[1].lookup(s),
            _tables[0].size(),
            _tables[2].lookup(tf.cast(tf.strings.length(s), tf.int64)),
            _tables[0].lookup(tf.strings.split(s).flat_values),
        )

    @add("while_tensorarray_greedy_decode", [S([None, 4], tf.float32)], [f32(3, 4)])
    def _(emb):
        w = tf.constant(rng.standard_normal((4, 6)).astype(np.float32))
        tokens = tf.TensorArray(tf.int32, size=0, dynamic_size=True, element_shape=[])
        scores = tf.TensorArray(tf.float32, size=5)
        h = tf.reduce_mean(emb, 0)
        tok = tf.constant(0)
        for t in tf.range(5):
            logits = tf.linalg.matvec(w, h, transpose_a=True)
            tok = tf.argmax(logits, output_type=tf.int32)
            tokens = tokens.write(t, tok)
            scores = scores.write(t, tf.reduce_max(tf.nn.log_softmax(logits)))
            h = tf.tanh(h + emb[tok % tf.shape(emb)[0]])
            if tok == 5:
                break
        return tokens.stack(), scores.gather([0, 2]), tokens.size(), scores.read(4)

    @add(
        "attention_block",
        [S([None, 5, 8], tf.float32), S([None, 5], tf.int32)],
        [f32(2, 5, 8), np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int32)],
    )
    def _(x, mask):
        r = np.random.default_rng(11)
        wq, wk, wv, wo = (
            tf.constant(r.standard_normal((8, 2, 4)).astype(np.float32) * 0.3) for _ in range(4)
        )
        q = tf.einsum("btd,dhk->bhtk", x, wq)
        k = tf.einsum("btd,dhk->bhtk", x, wk)
        v = tf.einsum("btd,dhk->bhtk", x, wv)
        logits = tf.einsum("bhqk,bhtk->bhqt", q, k) / tf.sqrt(4.0)
        causal = tf.linalg.band_part(tf.ones([5, 5]), -1, 0)
        keep = causal[None, None] * tf.cast(mask, tf.float32)[:, None, None, :]
        logits += (1.0 - keep) * -1e9
        att = tf.nn.softmax(logits, axis=-1)
        y = tf.einsum("bhqt,bhtk->bqhk", att, v)
        y = tf.einsum("bqhk,dhk->bqd", y, wo) + x
        mean, var = tf.nn.moments(y, axes=[-1], keepdims=True)
        y = (y - mean) * tf.math.rsqrt(var + 1e-6)
        return tf.nn.gelu(y), tf.reduce_sum(att, -1)

    @add("conv_block", [S([None, 8, 8, 3], tf.float32)], [f32(2, 8, 8, 3)])
    def _(x):
        r = np.random.default_rng(12)
        k = tf.constant(r.standard_normal((3, 3, 3, 4)).astype(np.float32) * 0.3)
        dw = tf.constant(r.standard_normal((3, 3, 4, 2)).astype(np.float32) * 0.3)
        pw = tf.constant(r.standard_normal((1, 1, 8, 5)).astype(np.float32) * 0.3)
        y = tf.nn.relu6(tf.nn.conv2d(x, k, 1, "SAME"))
        y2 = tf.nn.separable_conv2d(y, dw, pw, [1, 2, 2, 1], "SAME")
        y3 = tf.nn.conv2d_transpose(y2, tf.ones([3, 3, 4, 5]) * 0.1, [2, 8, 8, 4], 2, "SAME")
        mp, argmax = tf.nn.max_pool_with_argmax(y, 2, 2, "VALID", include_batch_in_index=True)
        bn = tf.compat.v1.nn.fused_batch_norm(
            y3, tf.ones([4]), tf.zeros([4]), tf.fill([4], 0.1), tf.fill([4], 2.0), is_training=False
        )[0]
        return (
            tf.reduce_mean(y2, [1, 2]),
            bn,
            mp,
            argmax,
            tf.nn.avg_pool2d(y, 3, 2, "SAME"),
            tf.nn.depthwise_conv2d(y, dw, [1, 1, 1, 1], "VALID", dilations=[2, 2]),
            tf.nn.conv2d(x, k, 2, [[0, 0], [1, 2], [2, 1], [0, 0]]),
        )

    @add(
        "detection_postprocess",
        [S([1, 6, 4], tf.float32), S([1, 6, 3], tf.float32)],
        [
            np.array(
                [
                    [
                        [0.1, 0.1, 0.5, 0.5],
                        [0.12, 0.1, 0.52, 0.5],
                        [0.6, 0.6, 0.9, 0.95],
                        [0.0, 0.5, 0.3, 0.9],
                        [0.61, 0.6, 0.9, 0.9],
                        [0.2, 0.2, 0.3, 0.25],
                    ]
                ],
                np.float32,
            ),
            rng.uniform(0, 1, (1, 6, 3)).astype(np.float32),
        ],
    )
    def _(boxes, scores):
        nms = tf.image.combined_non_max_suppression(boxes[:, :, None, :], scores, 4, 5, 0.5, 0.2)
        nms_pc = tf.image.combined_non_max_suppression(
            tf.tile(boxes[:, :, None, :], [1, 1, 3, 1]),
            scores,
            3,
            6,
            0.4,
            0.1,
            pad_per_class=True,
            clip_boxes=False,
        )
        img = tf.reshape(tf.range(1 * 10 * 12 * 2, dtype=tf.float32), [1, 10, 12, 2])
        return (
            nms.nmsed_boxes,
            nms.nmsed_scores,
            nms.nmsed_classes,
            nms.valid_detections,
            nms_pc.nmsed_boxes,
            nms_pc.valid_detections,
            tf.image.crop_and_resize(img, boxes[0], tf.zeros([6], tf.int32), [3, 4]),
            tf.image.crop_and_resize(
                img, boxes[0, :2], [0, 0], [2, 2], method="nearest", extrapolation_value=-1.0
            ),
            tf.image.non_max_suppression_padded(
                boxes[0], scores[0, :, 0], 4, 0.5, 0.1, pad_to_max_output_size=True
            )[0],
            tf.image.non_max_suppression_overlaps(tf.eye(6) * 0.0 + 0.3, scores[0, :, 1], 3, 0.5),
            tf.image.draw_bounding_boxes(img[..., :1] / 240.0, boxes, tf.constant([[0.5], [1.0]])),
            tf.image.resize_with_crop_or_pad(img, 6, 15),
        )

    @add("audio_frontend", [S([None, 400], tf.float32)], [f32(2, 400)])
    def _(pcm):
        stft = tf.signal.stft(pcm, 64, 32, 64, window_fn=tf.signal.hann_window, pad_end=True)
        mag = tf.abs(stft)
        mel = tf.signal.linear_to_mel_weight_matrix(20, 33, 8000, 20.0, 4000.0)
        logmel = tf.math.log(tf.tensordot(mag, mel, 1) + 1e-6)
        inv = tf.signal.inverse_stft(stft, 64, 32, 64, window_fn=tf.signal.inverse_stft_window_fn(32))
        return (
            logmel,
            tf.signal.mfccs_from_log_mel_spectrograms(logmel)[..., :13],
            inv,
            tf.signal.overlap_and_add(tf.signal.frame(pcm, 50, 25), 25),
            tf.signal.hamming_window(10, periodic=False),
            tf.signal.kaiser_window(8),
            tf.signal.vorbis_window(8),
            tf.signal.idct(tf.signal.dct(pcm[:, :16], type=3), type=3),
            tf.signal.dct(pcm[:, :16], type=1),
            tf.signal.irfft(tf.signal.rfft(pcm[:, :32])),
            tf.signal.fftshift(pcm[:, :6], axes=-1),
        )

    @add(
        "text_preprocess",
        [S([None], tf.string)],
        [np.array([b"The quick  brown fox!", "Ünïcode \u2013 text, 123".encode(), b""], object)],
    )
    def _(s):
        low = tf.strings.lower(s, encoding="utf-8")
        clean = tf.strings.regex_replace(low, r"[^\w\s]", "")
        clean = tf.strings.regex_replace(clean, r"\s+", " ")
        toks = tf.strings.split(tf.strings.strip(clean))
        chars = tf.strings.unicode_split(low, "UTF-8")
        ids = tf.strings.to_hash_bucket_fast(toks, 100)
        return (
            clean,
            tf.strings.ngrams(toks, 2, separator="_").to_tensor(),
            tf.strings.ngrams(toks, (1, 3), pad_values=("<s>", "</s>"), padding_width=1).flat_values,
            chars.to_tensor(),
            ids.to_tensor(-1),
            tf.strings.unicode_encode(tf.strings.unicode_decode(s, "UTF-8"), "UTF-8"),
            tf.strings.length(s, unit="UTF8_CHAR"),
            tf.strings.format("{} has {} tokens", (s[0], toks.row_lengths()[0])),
            tf.strings.unicode_transcode(s, "UTF-8", "UTF-16-BE"),
            tf.strings.join([s, tf.strings.as_string(tf.strings.length(s))], separator="#"),
            toks.to_sparse().indices,
            tf.strings.regex_replace(s, r"(\d)", r"<\1>"),
        )

    @add(
        "sparse_features",
        [S([None], tf.string), S([None, 3], tf.int64)],
        [np.array([b"a,b,a", b"", b"c,b"], object), np.array([[1, 5, 2], [0, 0, 7], [3, 3, 3]], np.int64)],
    )
    def _(s, ids):
        sp = tf.strings.split(s, ",").to_sparse()
        hashed = tf.sparse.SparseTensor(
            sp.indices, tf.strings.to_hash_bucket_fast(sp.values, 10), sp.dense_shape
        )
        ids_sp = tf.sparse.from_dense(ids)
        emb = tf.constant(np.arange(40, dtype=np.float32).reshape(10, 4) * 0.1)
        return (
            tf.sparse.to_dense(hashed, default_value=-1),
            tf.sparse.to_dense(tf.sparse.bincount(hashed, minlength=10, binary_output=True)),
            tf.sparse.to_dense(tf.sparse.bincount(ids_sp, minlength=8, axis=-1)),
            tf.nn.safe_embedding_lookup_sparse(emb, hashed, combiner="mean"),
            tf.nn.embedding_lookup_sparse(emb, ids_sp, None, combiner="sqrtn"),
            tf.sparse.reduce_max(
                tf.sparse.SparseTensor(
                    ids_sp.indices, tf.cast(ids_sp.values, tf.float32), ids_sp.dense_shape
                ),
                axis=1,
            ),
            tf.sparse.to_dense(tf.sparse.concat(1, [hashed, hashed])),
            tf.sparse.to_dense(tf.sparse.slice(ids_sp, [0, 1], [2, 2])),
            tf.sparse.to_dense(tf.sparse.retain(ids_sp, ids_sp.values > 2)),
            tf.math.bincount(tf.cast(ids, tf.int32), minlength=8, axis=-1),
            tf.sparse.to_dense(tf.sparse.transpose(ids_sp)),
            tf.sparse.to_dense(tf.sparse.expand_dims(ids_sp, 0)),
        )

    @add(
        "ragged_segments",
        [S([None], tf.float32), S([None], tf.int64)],
        [f32(7), np.array([3, 0, 2, 2], np.int64)],
    )
    def _(v, lens):
        rt = tf.RaggedTensor.from_row_lengths(v, lens)
        seg = rt.value_rowids()
        nrows = rt.nrows()
        return (
            tf.math.segment_sum(v, seg),
            tf.math.unsorted_segment_max(v, seg, nrows),
            tf.reduce_sum(rt, axis=1),
            tf.reduce_mean(rt, axis=1),
            tf.reduce_max(rt, axis=1),
            tf.math.cumsum(rt.to_tensor(), axis=1),
            tf.ragged.range(lens).flat_values,
            seg,
            (rt * 2.0).to_tensor(default_value=-1.0, shape=[4, 4]),
            tf.math.cumulative_logsumexp(v, exclusive=True),
            tf.math.unsorted_segment_prod(v, seg, nrows),
            tf.map_fn(tf.reduce_sum, rt, fn_output_signature=tf.float32),
            rt.row_splits,
        )

    @add("quantize_fake", [S([2, 5], tf.float32)], [f32(2, 5) * 3])
    def _(x):
        return (
            tf.quantization.fake_quant_with_min_max_vars(x, -2.0, 2.5, num_bits=8),
            tf.quantization.fake_quant_with_min_max_args(x, -1.0, 1.0, num_bits=4, narrow_range=True),
            tf.quantization.fake_quant_with_min_max_vars_per_channel(
                x, tf.fill([5], -1.5), tf.fill([5], 1.5)
            ),
            tf.quantization.quantize_and_dequantize_v2(x, -2.0, 2.0, range_given=True),
            tf.quantization.quantize_and_dequantize_v2(x, 0.0, 0.0, range_given=False, num_bits=6),
            tf.quantization.quantize(x, -3.0, 3.0, tf.quint8).output,
            tf.quantization.dequantize(
                tf.quantization.quantize(x, -3.0, 3.0, tf.qint8, mode="SCALED").output,
                -3.0,
                3.0,
                mode="SCALED",
            ),
        )

    @add("ctc_lrn_pool", [S([6, 2, 5], tf.float32)], [f32(6, 2, 5)])
    def _(logits):
        dec, lp = tf.nn.ctc_beam_search_decoder(logits, tf.constant([6, 4]), beam_width=4, top_paths=2)
        g, glp = tf.nn.ctc_greedy_decoder(logits, tf.constant([6, 4]), blank_index=0)
        img = tf.reshape(logits, [1, 6, 2, 5])
        return (
            tf.sparse.to_dense(dec[0], default_value=-1),
            tf.sparse.to_dense(dec[1], default_value=-1),
            lp,
            tf.sparse.to_dense(g[0]),
            glp,
            tf.nn.local_response_normalization(img, depth_radius=2, bias=1.5, alpha=0.3, beta=0.6),
        )

    @add("fractional_pool", [S([1, 9, 9, 2], tf.float32)], [f32(1, 9, 9, 2)])
    def _(x):
        mp = tf.nn.fractional_max_pool(x, [1.0, 1.5, 1.5, 1.0], pseudo_random=True, overlapping=True, seed=7)
        ap = tf.nn.fractional_avg_pool(x, [1.0, 2.0, 1.44, 1.0], pseudo_random=False, seed=3)
        return mp[0], mp[1], mp[2], ap[0], ap[1], ap[2]

    @add("math_bucketize_misc", [S([9], tf.float32)], [f32(9) * 3])
    def _(x):
        return (
            tf.raw_ops.Bucketize(input=x, boundaries=[-1.0, 0.0, 0.5, 2.0]),
            tf.math.bincount(tf.raw_ops.Bucketize(input=x, boundaries=[-1.0, 0.0, 2.0]), minlength=4),
            tf.math.cumulative_logsumexp(tf.reshape(x, [3, 3]), axis=1, exclusive=True, reverse=True),
            tf.math.approx_max_k(x, 3)[0],
            tf.math.reduce_logsumexp(tf.reshape(x, [3, 3]), axis=0),
            tf.math.segment_mean(x, [0, 0, 0, 1, 1, 2, 2, 2, 2]),
            tf.math.floormod(x, 1.5),
            tf.math.nextafter(x, 0.0),
            tf.math.truediv(tf.range(5), 2),
            tf.math.divide_no_nan(x, tf.round(x)),
            tf.math.multiply_no_nan(x, tf.zeros_like(x)),
            tf.math.squared_difference(x, 1.0),
            tf.math.reduce_variance(tf.reshape(x, [3, 3]), axis=1),
            tf.histogram_fixed_width_bins(x, [-3.0, 3.0], nbins=5),
        )

    # --- fourth batch: bytes in (images, audio), sets, ragged construction ---
    img_rgb = rng.uniform(0, 255, (6, 8, 3)).astype(np.uint8)

    @add(
        "image_bytes_pipeline",
        [S([], tf.string), S([], tf.string)],
        [
            tf.io.encode_png(img_rgb).numpy(),
            tf.io.encode_jpeg(img_rgb, quality=90).numpy(),
        ],
    )
    def _(png, jpeg):
        a = tf.io.decode_png(png, channels=3)
        b = tf.io.decode_jpeg(jpeg, channels=3)
        c = tf.io.decode_image(png, channels=3, expand_animations=False)
        x = tf.image.convert_image_dtype(a, tf.float32)
        return (
            a,
            b,
            c,
            tf.image.resize(x[None], [4, 4])[0],
            tf.image.rgb_to_grayscale(b),
            tf.image.crop_to_bounding_box(a, 1, 2, 3, 4),
            tf.io.extract_jpeg_shape(jpeg),
            tf.image.decode_and_crop_jpeg(jpeg, [1, 1, 4, 5], channels=3),
            tf.shape(tf.io.decode_png(png, channels=1)),
            tf.io.encode_png(a[:2, :2]),
        )

    pcm = (np.sin(np.arange(800) / 7.0) * 0.5).astype(np.float32).reshape(-1, 1)

    @add("audio_wav_pipeline", [S([], tf.string)], [tf.audio.encode_wav(pcm, 8000).numpy()])
    def _(wav):
        audio, rate = tf.audio.decode_wav(wav, desired_channels=1)
        x = tf.squeeze(audio, -1)
        spec = tf.abs(tf.signal.stft(x, 128, 64))
        return audio[:5], rate, spec, tf.audio.encode_wav(audio[:10], rate)

    @add(
        "sets_ops",
        [S([None, 4], tf.int32), S([None, 3], tf.int32)],
        [
            np.array([[1, 2, 3, 4], [5, 5, 6, 7]], np.int32),
            np.array([[2, 4, 9], [5, 8, 7]], np.int32),
        ],
    )
    def _(a, b):
        return (
            tf.sparse.to_dense(tf.sets.intersection(a, b)),
            tf.sparse.to_dense(tf.sets.union(a, b)),
            tf.sparse.to_dense(tf.sets.difference(a, b)),
            tf.sets.size(tf.sets.union(a, b)),
            tf.sparse.to_dense(tf.sets.difference(b, a, aminusb=False)),
        )

    @add(
        "ragged_construct",
        [S([None], tf.float32), S([None], tf.int64)],
        [f32(6), np.array([0, 0, 2, 2, 2, 3], np.int64)],
    )
    def _(v, rows):
        rt = tf.RaggedTensor.from_value_rowids(v, rows, nrows=4)
        nested = tf.RaggedTensor.from_row_lengths(rt, [2, 2])
        st = rt.to_sparse()
        return (
            rt.to_tensor(),
            nested.merge_dims(0, 1).to_tensor(),
            tf.ragged.stack([rt, rt * 2], axis=1).flat_values,
            st.indices,
            tf.RaggedTensor.from_sparse(st).row_lengths(),
            tf.ragged.boolean_mask(rt, rt > 0).to_tensor(),
            rt.with_flat_values(tf.nn.relu(rt.flat_values)).to_tensor(),
            tf.concat([rt, rt], axis=0).nrows(),
            tf.RaggedTensor.from_tensor(tf.reshape(v, [2, 3]), lengths=[1, 3]).flat_values,
            tf.gather(rt, [3, 0]).to_tensor(),
            tf.reduce_sum(nested, axis=[1, 2]),
        )

    return C


def _v1_cases(tf: Any) -> dict[str, tuple[Callable[[], tuple[list[Any], list[Any]]], list[np.ndarray]]]:
    """name -> (builder in a fresh default graph returning (placeholders, fetches), feeds)."""
    v1 = tf.compat.v1
    rng = np.random.default_rng(9)
    C: dict[str, tuple[Callable[[], tuple[list[Any], list[Any]]], list[np.ndarray]]] = {}

    def add(name: str, feeds: list[Any]) -> Callable[..., Any]:
        def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
            C[name] = (fn, [np.asarray(f) for f in feeds])
            return fn

        return deco

    from tensorflow.python.ops import rnn_cell_impl as rci

    class Cell:
        """A minimal RNNCell (Keras 3 has none for dynamic_rnn): LSTM, GRU or tanh RNN, fixed weights."""

        def __init__(self, kind: str, units: int, seed: int) -> None:
            self.kind, self.units, self.r = kind, units, np.random.default_rng(seed)
            self.w: dict[int, Any] = {}

        @property
        def state_size(self) -> Any:
            return rci.LSTMStateTuple(self.units, self.units) if self.kind == "lstm" else self.units

        @property
        def output_size(self) -> int:
            return self.units

        def zero_state(self, batch: Any, dtype: Any) -> Any:
            z = tf.zeros([batch, self.units], dtype)
            return rci.LSTMStateTuple(z, z) if self.kind == "lstm" else z

        def _weight(self, n_in: int, k: int) -> Any:
            if n_in not in self.w:
                self.w[n_in] = tf.constant(
                    self.r.standard_normal((n_in, k * self.units)).astype(np.float32) * 0.5
                )
            return self.w[n_in]

        def __call__(self, x: Any, state: Any, scope: Any = None) -> Any:
            if self.kind == "lstm":
                c, h = state
                z = tf.matmul(tf.concat([x, h], 1), self._weight(x.shape[-1] + self.units, 4))
                i, j, f, o = tf.split(z, 4, axis=1)
                c = tf.sigmoid(f + 1.0) * c + tf.sigmoid(i) * tf.tanh(j)
                h = tf.sigmoid(o) * tf.tanh(c)
                return h, rci.LSTMStateTuple(c, h)
            if self.kind == "gru":
                w = self._weight(x.shape[-1] + self.units, 3)
                zr = tf.sigmoid(tf.matmul(tf.concat([x, state], 1), w[:, : 2 * self.units]))
                z, r = tf.split(zr, 2, axis=1)
                cand = tf.tanh(tf.matmul(tf.concat([x, r * state], 1), w[:, 2 * self.units :]))
                h = z * state + (1 - z) * cand
                return h, h
            h = tf.tanh(tf.matmul(tf.concat([x, state], 1), self._weight(x.shape[-1] + self.units, 1)))
            return h, h

    x_seq = rng.standard_normal((3, 5, 4)).astype(np.float32)
    lens = np.array([5, 2, 0], np.int32)

    @add("v1_dynamic_rnn_lstm", [x_seq, lens])
    def _():
        x = v1.placeholder(tf.float32, [None, None, 4], "x")
        n = v1.placeholder(tf.int32, [None], "n")
        cell = Cell("lstm", 3, 1)
        out, st = v1.nn.dynamic_rnn(cell, x, sequence_length=n, dtype=tf.float32)
        return [x, n], [out, st.c, st.h]

    @add("v1_dynamic_rnn_gru_time_major", [x_seq.transpose(1, 0, 2).copy(), lens])
    def _():
        x = v1.placeholder(tf.float32, [None, None, 4], "x")
        n = v1.placeholder(tf.int32, [None], "n")
        cell = Cell("gru", 3, 2)
        out, st = v1.nn.dynamic_rnn(cell, x, sequence_length=n, dtype=tf.float32, time_major=True)
        return [x, n], [out, st]

    @add("v1_bidirectional_rnn", [x_seq, lens])
    def _():
        x = v1.placeholder(tf.float32, [None, None, 4], "x")
        n = v1.placeholder(tf.int32, [None], "n")
        fw = Cell("lstm", 3, 3)
        bw = Cell("rnn", 2, 4)
        (o1, o2), (s1, s2) = v1.nn.bidirectional_dynamic_rnn(fw, bw, x, sequence_length=n, dtype=tf.float32)
        return [x, n], [o1, o2, s1.h, s2]

    @add("v1_multi_rnn_cell", [x_seq, lens])
    def _():
        x = v1.placeholder(tf.float32, [None, None, 4], "x")
        n = v1.placeholder(tf.int32, [None], "n")
        cell = rci.MultiRNNCell([Cell("gru", 3, 5), Cell("lstm", 2, 6)])
        out, st = v1.nn.dynamic_rnn(cell, x, sequence_length=n, dtype=tf.float32)
        return [x, n], [out, st[0], st[1].h]

    @add("v1_while_shape_invariants", [np.float32([1.0, 2.0])])
    def _():
        x = v1.placeholder(tf.float32, [None], "x")
        i0 = tf.constant(0)
        _, r = v1.while_loop(
            lambda i, a: i < 3,
            lambda i, a: (i + 1, tf.concat([a, a * 2], 0)),
            [i0, x],
            shape_invariants=[i0.get_shape(), tf.TensorShape([None])],
        )
        return [x], [r]

    @add("v1_while_nested_cond", [np.float32([0.5, -1.0, 2.0, 3.0])])
    def _():
        x = v1.placeholder(tf.float32, [None], "x")

        def body(i, acc):
            xi = x[i]
            acc = v1.cond(xi > 0, lambda: v1.cond(xi > 1, lambda: acc + xi, lambda: acc * 2), lambda: acc - 1)
            return i + 1, acc

        return [x], [v1.while_loop(lambda i, a: i < tf.shape(x)[0], body, [0, 0.0])[1]]

    @add("v1_nested_while", [np.int32(4)])
    def _():
        n = v1.placeholder(tf.int32, [], "n")

        def outer(i, s):
            _, t = v1.while_loop(lambda j, t: j < i, lambda j, t: (j + 1, t + j), [0, 0])
            return i + 1, s + t

        return [n], [v1.while_loop(lambda i, s: i < n, outer, [0, 0])[1]]

    @add("v1_cond_case", [np.float32([1.0, -2.0]), np.int32(2)])
    def _():
        x = v1.placeholder(tf.float32, [2], "x")
        k = v1.placeholder(tf.int32, [], "k")
        c = v1.cond(tf.reduce_sum(x) > 0, lambda: x * 2, lambda: x - 1)
        cs = v1.case([(tf.equal(k, 1), lambda: x + 10), (tf.equal(k, 2), lambda: x + 20)], default=lambda: x)
        return [x, k], [c, cs]

    @add(
        "v1_embedding_lookup_sparse",
        [
            np.array([[0, 0], [0, 1], [2, 0]], np.int64),
            np.array([1, 3, 2], np.int64),
            np.array([0.5, 2.0, 1.0], np.float32),
        ],
    )
    def _():
        ind = v1.placeholder(tf.int64, [None, 2], "ind")
        ids = v1.placeholder(tf.int64, [None], "ids")
        w = v1.placeholder(tf.float32, [None], "w")
        emb = tf.constant(np.arange(20, dtype=np.float32).reshape(5, 4) * 0.1)
        sp = tf.SparseTensor(ind, ids, [3, 2])
        spw = tf.SparseTensor(ind, w, [3, 2])
        return [ind, ids, w], [
            v1.nn.embedding_lookup_sparse(emb, sp, None, combiner="mean"),
            v1.nn.embedding_lookup_sparse(emb, sp, spw, combiner="sqrtn"),
            v1.nn.embedding_lookup_sparse([emb[:3], emb[3:]], sp, spw, combiner="sum"),
            v1.nn.safe_embedding_lookup_sparse(emb, sp, spw, combiner="mean"),
            v1.nn.embedding_lookup([emb[:3], emb[3:]], ids, partition_strategy="div"),
            v1.nn.embedding_lookup([emb[:3], emb[3:]], ids, partition_strategy="mod"),
        ]

    @add("v1_partial_shapes", [rng.standard_normal((2, 3, 4)).astype(np.float32)])
    def _():
        x = v1.placeholder(tf.float32, [None, 3, None], "x")
        w = tf.constant(rng.standard_normal((4, 2)).astype(np.float32))
        y = tf.tensordot(x, w, [[2], [0]])
        z = tf.reshape(x, [tf.shape(x)[0], -1])
        return [x], [
            y,
            z,
            tf.shape(x),
            tf.reshape(x, [-1, 3 * tf.shape(x)[2]]),
            tf.reduce_mean(x, axis=[1, 2], keepdims=True),
        ]

    @add("v1_raw_rnn_tensorarray", [x_seq])
    def _():
        x = v1.placeholder(tf.float32, [None, None, 4], "x")
        xt = tf.transpose(x, [1, 0, 2])
        ta_in = tf.TensorArray(tf.float32, size=tf.shape(xt)[0]).unstack(xt)
        ta = tf.TensorArray(tf.float32, size=tf.shape(xt)[0])

        def body(t, h, ta):
            h = tf.tanh(ta_in.read(t) + h)
            return t + 1, h, ta.write(t, h)

        _, h, ta = v1.while_loop(lambda t, *_: t < tf.shape(xt)[0], body, [0, tf.zeros_like(xt[0]), ta])
        return [x], [h, ta.stack()]

    @add("v1_graph_idioms", [np.float32([[1.0, -2.0, 3.0], [4.0, 5.0, -6.0]]), np.array([True, False])])
    def _():
        x = v1.placeholder(tf.float32, [None, 3], "x")
        c = v1.placeholder(tf.bool, [None], "c")
        keep = v1.placeholder_with_default(1.0, [], "keep_prob")
        d = v1.nn.dropout(x, keep_prob=keep, seed=5)
        checked = v1.check_numerics(x, "x has nan")
        with tf.control_dependencies([v1.assert_greater(tf.shape(x)[0], 0), v1.Print(x, [x], "x=")]):
            y = tf.identity(x)
        return [x, c], [
            v1.where(c, x, -x),
            v1.batch_gather(x, [[0, 2], [1, 1]]),
            v1.reduce_sum(x, 1, keep_dims=True),
            v1.argmax(x, dimension=1),
            v1.to_float(v1.to_int32(x)),
            v1.sparse_to_dense([[0, 1], [1, 2]], [2, 3], [7.0, 8.0], default_value=-1.0),
            v1.nn.softmax(x, dim=0),
            v1.nn.top_k(x, 2).indices,
            d,
            checked,
            y,
            v1.nn.fused_batch_norm(
                tf.reshape(x, [1, 2, 3, 1]), [2.0], [0.5], mean=[0.1], variance=[4.0], is_training=False
            )[0],
            v1.space_to_batch_nd(tf.reshape(x, [1, 2, 3, 1]), [1, 2], [[0, 0], [0, 1]]),
            v1.nn.batch_normalization(x, 0.5, 2.0, 0.1, 1.5, 1e-3),
            v1.image.resize_images(tf.reshape(x, [1, 2, 3, 1]), [4, 5]),
            v1.image.crop_to_bounding_box(tf.reshape(x, [2, 3, 1]), 0, 1, 2, 2),
            v1.sparse_tensor_dense_matmul(
                tf.SparseTensor([[0, 0], [1, 2]], [1.0, 2.0], [2, 3]), tf.transpose(x)
            ),
            v1.unsorted_segment_sum(x, [1, 0], 3),
            v1.sparse.segment_sum(x, [0, 1], [0, 0], num_segments=2),
            v1.string_to_number(v1.as_string(x)),
            v1.count_nonzero(x, axis=1),
            v1.nn.l2_loss(x),
        ]

    @add("v1_map_fn_scan", [np.float32([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])])
    def _():
        x = v1.placeholder(tf.float32, [None, 2], "x")
        m = v1.map_fn(lambda r: r * tf.reduce_sum(r), x)
        sc = v1.scan(lambda a, r: a + r, x)
        fl = v1.foldr(lambda a, r: a * 0.5 + r, x)
        return [x], [m, sc, fl]

    @add("v1_static_rnn", [x_seq])
    def _():
        x = v1.placeholder(tf.float32, [None, 5, 4], "x")
        steps = tf.unstack(x, axis=1)
        outs, st = v1.nn.static_rnn(Cell("lstm", 3, 8), steps, dtype=tf.float32)
        both, fw, bw = v1.nn.static_bidirectional_rnn(
            Cell("gru", 2, 9), Cell("rnn", 2, 10), steps, dtype=tf.float32
        )
        return [x], [tf.stack(outs, 1), st.c, tf.stack(both, 1), fw, bw]

    @add("v1_lookup_index_table", [np.array([b"b", b"zz", b"a", b"c"], object)])
    def _():
        s = v1.placeholder(tf.string, [None], "s")
        words = tf.constant(["a", "b", "c"])
        idx = tf.lookup.StaticVocabularyTable(
            tf.lookup.KeyValueTensorInitializer(words, tf.range(3, dtype=tf.int64)), num_oov_buckets=2
        ).lookup(s)
        rev = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tf.range(3, dtype=tf.int64), words), "UNK"
        ).lookup(idx)
        ta = tf.TensorArray(tf.string, size=tf.size(s))
        _, ta = v1.while_loop(
            lambda i, ta: i < tf.size(s), lambda i, ta: (i + 1, ta.write(i, rev[i] + "/" + s[i])), [0, ta]
        )
        return [s], [idx, rev, ta.stack()]

    return C


def _serving(fn: Callable[..., Any]) -> Callable[..., Any]:
    def serve(*args: Any) -> dict[str, Any]:
        r = fn(*args)
        r = r if isinstance(r, tuple) else (r,)
        return {f"o{k}": v for k, v in enumerate(r)}

    return serve


def build(only: set[str] | None, out: Path) -> list[str]:
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    names = []
    out.mkdir(parents=True, exist_ok=True)
    for name, (fn, specs, inputs) in _cases(tf).items():
        if only and name not in only:
            continue
        names.append(name)
        (out / f"{name}.tferror").unlink(missing_ok=True)
        try:
            mod = tf.Module()
            mod.v = [_weights, _bias, _counts]
            mod.tables = list(_tables)
            mod.f = tf.function(_serving(fn), input_signature=specs)
            tf.saved_model.save(mod, str(out / name), signatures={"serving_default": mod.f})
            loaded = tf.saved_model.load(str(out / name))
            feeds = {f"args_{k}": v for k, v in enumerate(inputs)}
            res = loaded.f(*[tf.constant(v) for v in inputs])
            np.savez(
                out / f"{name}.npz",
                **{f"in:{k}": v for k, v in feeds.items()},
                **{f"out:{k}": v.numpy() for k, v in res.items()},
            )
        except Exception:
            (out / f"{name}.tferror").write_text(traceback.format_exc())
        # the same function frozen, its control flow lowered to v1 (Switch/Merge/Enter/Exit), as users freeze
        frozen_name = f"{name}__frozen"
        names.append(frozen_name)
        (out / f"{frozen_name}.tferror").unlink(missing_ok=True)
        try:
            from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

            frozen = convert_variables_to_constants_v2(mod.f.get_concrete_function())
            vals = frozen(*[tf.constant(v) for v in inputs])
            vals = vals if isinstance(vals, list | tuple) else [vals]
            (out / f"{frozen_name}.pb").write_bytes(frozen.graph.as_graph_def().SerializeToString())
            np.savez(
                out / f"{frozen_name}.npz",
                **{f"in:{t.name}": v for t, v in zip(frozen.inputs, inputs, strict=False)},
                **{f"out:{t.name}": v.numpy() for t, v in zip(frozen.outputs, vals, strict=True)},
            )
        except Exception:
            (out / f"{frozen_name}.tferror").write_text(traceback.format_exc())
    for name, (builder, feeds) in _v1_cases(tf).items():
        if only and name not in only:
            continue
        names.append(name)
        (out / f"{name}.tferror").unlink(missing_ok=True)
        try:
            g = tf.Graph()
            with g.as_default():
                tf.compat.v1.set_random_seed(3)
                phs, fetches = builder()
                # lookup tables are filled by an init op the caller runs first, as TF1 servers do
                tables = g.get_collection(tf.compat.v1.GraphKeys.TABLE_INITIALIZERS)
                init = [tf.compat.v1.tables_initializer(name="init_all_tables")] if tables else []
                (out / f"{name}.init").unlink(missing_ok=True)
                if init:
                    (out / f"{name}.init").write_text(init[0].name)
                with tf.compat.v1.Session() as sess:
                    sess.run([tf.compat.v1.global_variables_initializer(), *init])
                    vals = sess.run(fetches, dict(zip(phs, feeds, strict=True)))
                    gd = tf.compat.v1.graph_util.convert_variables_to_constants(
                        sess, g.as_graph_def(), [f.op.name for f in fetches] + [i.name for i in init]
                    )
            (out / f"{name}.pb").write_bytes(gd.SerializeToString())
            np.savez(
                out / f"{name}.npz",
                **{f"in:{p.name}": v for p, v in zip(phs, feeds, strict=True)},
                **{f"out:{f.name}": v for f, v in zip(fetches, vals, strict=True)},
            )
        except Exception:
            (out / f"{name}.tferror").write_text(traceback.format_exc())
    return names


def _compare(want: np.ndarray, got: Any) -> str | None:
    got = np.asarray(got)
    if want.dtype != got.dtype:
        return f"dtype {got.dtype} != {want.dtype}"
    if want.shape != got.shape:
        return f"shape {got.shape} != {want.shape}"
    if want.dtype.kind in "fc":
        w = want.astype(np.complex128 if want.dtype.kind == "c" else np.float64)
        g = got.astype(w.dtype)
        if not np.array_equal(np.isnan(w), np.isnan(g)):
            return "nan positions differ"
        fin = ~np.isnan(w)
        scale = float(np.max(np.abs(w[fin]), initial=0.0)) or 1.0
        err = float(np.max(np.abs(w[fin] - g[fin]), initial=0.0)) / scale
        if not np.isfinite(err) and not np.array_equal(w[fin], g[fin]):
            return "inf mismatch"
        return None if err <= TOL or np.array_equal(w[fin], g[fin]) else f"rel err {err:.3g}"
    if want.dtype == object:
        same = [bytes(a) == bytes(b) for a, b in zip(want.ravel(), got.ravel(), strict=True)]
        return None if all(same) else f"strings differ: {got.ravel()[:6]} vs {want.ravel()[:6]}"
    return None if np.array_equal(want, got) else f"values differ: {got.ravel()[:8]} vs {want.ravel()[:8]}"


def worker(names: list[str], out: Path) -> dict[str, str]:
    from poolserve import Session, load_saved_model
    from poolserve.runtime.graph import load_graph_def

    res = {}
    for name in names:
        if (out / f"{name}.tferror").exists():
            res[name] = "TF-ERROR " + (out / f"{name}.tferror").read_text().strip().splitlines()[-1]
            continue
        data = np.load(out / f"{name}.npz", allow_pickle=True)
        ins = {k[3:]: data[k] for k in data.files if k.startswith("in:")}
        outs = {k[4:]: data[k] for k in data.files if k.startswith("out:")}
        try:
            if (out / f"{name}.pb").exists():
                with Session(load_graph_def(out / f"{name}.pb")) as s:
                    if (out / f"{name}.init").exists():
                        s.run((out / f"{name}.init").read_text())
                    vals = s.run(list(outs), ins)
                got = dict(zip(outs, vals, strict=True))
            else:
                m = load_saved_model(out / name)
                got = m.run(ins)
                m.close()
            errs = [f"{k}: {e}" for k in outs if (e := _compare(outs[k], got[k]))]
            res[name] = (
                "ok"
                if not errs
                else "MISMATCH "
                + "; ".join(
                    sorted(
                        errs, key=lambda e: int(e[1:].split(":")[0]) if e[1:].split(":")[0].isdigit() else 0
                    )
                )
            )
        except Exception as e:
            res[name] = f"FAIL {type(e).__name__}: {str(e)[:400]}"
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only")
    ap.add_argument("--python", default=str(HERE.parent / ".venv" / "bin" / "python"))
    ap.add_argument("--out", default="/tmp/tf_functions")
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--names")
    a = ap.parse_args()
    out = Path(a.out)
    if a.worker:
        print(json.dumps(worker(a.names.split(","), out)))
        return
    names = build(set(a.only.split(",")) if a.only else None, out)
    r = subprocess.run(
        [a.python, __file__, "--worker", "--out", str(out), "--names", ",".join(names)],
        capture_output=True,
        text=True,
    )
    if r.returncode:
        print(r.stderr[-3000:])
        return
    results = json.loads(r.stdout.strip().splitlines()[-1])
    for n, v in results.items():
        print(f"{n:32s} {v}")
    print(f"{sum(v == 'ok' for v in results.values())}/{len(results)} ok")


if __name__ == "__main__":
    main()
