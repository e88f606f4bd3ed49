"""Generates single-op fixtures under ``tests/fixtures/kernels/cases`` (dev only): for each group, one
GraphDef holding one ``tf.raw_ops`` node per case over Placeholders, and what TensorFlow computed for it.

    /opt/tfenv/bin/python tools/make_op_case_fixtures.py [group ...]

Writes ``<group>.pb``, ``<group>.npz`` (``<case>/in/<tensor>`` fed, ``<case>/out/<tensor>`` fetched) and
``<group>.json`` (per case: its feeds, its fetches, and TensorFlow's error class and message when it refused
the inputs). Placeholders have unknown shapes, so inputs TensorFlow's shape functions would refuse reach the
kernel. Strings are stored as numpy bytes arrays (``S``). Groups: ``cross`` (SparseCross, SparseCrossHashed,
SparseCrossV2, Fingerprint), ``sparse`` (sparse reductions, SparseAdd, SparseConcat, SparseSlice,
SparseSoftmax), ``ragged`` (RaggedRange, RaggedGather, RaggedTensorToSparse), ``sets`` (set operations,
UnravelIndex, AdjustHue, AdjustSaturation), ``csv`` (DecodeCSV), ``segment_join`` (UnsortedSegmentJoin),
``full_int`` (StatelessRandomUniformFullInt and V2), ``sequence_features`` (ParseExampleV2 with
FixedLenSequenceFeatures), ``serialized_tensors`` (SerializeTensor, ParseTensor), ``half_sigmoid``,
``half_softplus``, ``count_sparse`` (DenseCountSparseOutput, SparseCountSparseOutput,
RaggedCountSparseOutput), ``sparse_minmax`` (SparseSparseMaximum, SparseSparseMinimum), ``padded_raw``
(DecodePaddedRaw), ``gamma`` (Igamma, Igammac, Betainc, Zeta, Polygamma), ``fractional_pool``
(FractionalMaxPool, FractionalAvgPool), ``shuffle`` (StatelessShuffle, RandomShuffle), ``param_truncated``
(StatelessParameterizedTruncatedNormal), ``jpeg_crop`` (DecodeAndCropJpeg, ExtractJpegShape), ``set_size``,
``half`` (float16 Softmax, LogSoftmax, Sum, Mean, Rsqrt, Elu, Selu), ``dilation`` (Dilation2D). Tests:
tests/test_kernels_<group>_cases.py.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

OUT_DIR = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "kernels" / "cases"
tf1 = tf.compat.v1
I32, I64, F32, F64 = np.int32, np.int64, np.float32, np.float64


def S(*items: str | bytes) -> np.ndarray:
    return np.array([i.encode() if isinstance(i, str) else i for i in items], dtype=object)


def idx(rows: list[list[int]]) -> np.ndarray:
    return np.array(rows, I64).reshape(-1, 2) if not rows else np.array(rows, I64)


class Group:
    def __init__(self, name: str) -> None:
        self.name = name
        # placeholders of the fed shapes, for ops whose shape functions need them (ApproxTopK)
        self.shapes_known = False
        self.graph = tf.Graph()
        self.cases: dict[str, dict[str, Any]] = {}
        self.feeds: dict[str, dict[str, np.ndarray]] = {}

    def case(self, case: str, op: str, inputs: dict[str, Any], **attrs: Any) -> None:
        """One ``tf.raw_ops.<op>`` node named ``case``; ``inputs`` maps each input arg to an array or a
        list of arrays (list args)."""
        assert case not in self.cases, case
        feeds: dict[str, np.ndarray] = {}
        with self.graph.as_default():

            def holder(value: Any) -> Any:
                arr = np.asarray(value)
                dtype = tf.string if arr.dtype == object else tf.as_dtype(arr.dtype)
                shape = arr.shape if self.shapes_known else None
                t = tf1.placeholder(dtype, shape=shape, name=f"{case}_in{len(feeds)}")
                feeds[t.name] = arr
                return t

            kwargs = {
                k: [holder(x) for x in v] if isinstance(v, list) else holder(v) for k, v in inputs.items()
            }
            getattr(tf.raw_ops, op)(**kwargs, **attrs, name=case)
            node = self.graph.get_operation_by_name(case)
        self.cases[case] = {"op": op, "feeds": list(feeds), "fetches": [t.name for t in node.outputs]}
        self.feeds[case] = feeds

    def write(self) -> None:
        config = tf1.ConfigProto()
        config.graph_options.rewrite_options.disable_meta_optimizer = True
        arrays: dict[str, np.ndarray] = {}
        with tf1.Session(graph=self.graph, config=config) as sess:
            for case, meta in self.cases.items():
                feeds = self.feeds[case]
                print(case, flush=True) if os.environ.get("VERBOSE") else None
                for k, v in feeds.items():
                    store_into(arrays, f"{case}/in/{k}", v)
                try:
                    outs = sess.run(meta["fetches"], feeds)
                except tf.errors.OpError as e:
                    lines = [x for x in e.message.split("\n\t [[")[0].splitlines() if x.strip()]
                    meta["error"] = [type(e).__name__, lines[-1]]
                    continue
                for k, v in zip(meta["fetches"], outs, strict=True):
                    store_into(arrays, f"{case}/out/{k}", np.asarray(v))
        graph_def = self.graph.as_graph_def()
        OUT_DIR.mkdir(parents=True, exist_ok=True)
        (OUT_DIR / f"{self.name}.pb").write_bytes(graph_def.SerializeToString(deterministic=True))
        np.savez_compressed(OUT_DIR / f"{self.name}.npz", **arrays)
        (OUT_DIR / f"{self.name}.json").write_text(json.dumps(self.cases, indent=1, sort_keys=True) + "\n")
        errors = sum("error" in m for m in self.cases.values())
        print(f"{self.name}: {len(self.cases)} cases, {errors} refused")


def store_into(arrays: dict[str, np.ndarray], key: str, arr: np.ndarray) -> None:
    """``arr`` as ``arrays[key]``; strings ending in NUL (gzip's trailer, UTF-16-LE), which numpy's S arrays
    drop, as their bytes end to end (``key#bytes``) and each one's length (``key#lengths``)."""
    if arr.dtype == object:
        items = [bytes(x) for x in arr.ravel().tolist()]
        if any(x.endswith(b"\0") for x in items):
            arrays[f"{key}#bytes"] = np.frombuffer(b"".join(items), np.uint8)
            arrays[f"{key}#lengths"] = np.array([len(x) for x in items], np.int64).reshape(arr.shape)
            return
    arrays[key] = store(arr)


def store(arr: np.ndarray) -> np.ndarray:
    if arr.dtype == object:
        items = [bytes(x) for x in arr.ravel().tolist()]
        assert all(not x.endswith(b"\0") for x in items), "numpy S arrays drop trailing NULs"
        out = np.array(items, dtype="S")
        return out.reshape(arr.shape) if arr.size else np.zeros(arr.shape, "S1")
    return arr


# --- cross -------------------------------------------------------------------------------------------------


def cross(g: Group) -> None:
    rng = np.random.default_rng(11)
    # a: strings, 3 rows (row 1 empty); b: int64; d: dense strings, e: dense int64
    a = (idx([[0, 0], [0, 1], [2, 0]]), S("x", "yy", "z"), np.array([3, 2], I64))
    b = (
        idx([[0, 0], [1, 0], [2, 0], [2, 1]]),
        np.array([7, -3, 123456789012, 0], I64),
        np.array([3, 2], I64),
    )
    d = S("p", "q", "r", "s", "", "u").reshape(3, 2)
    e = np.array([[5], [-1], [2**40]], I64)

    def parts(*cols: tuple[Any, Any, Any]) -> dict[str, Any]:
        return {
            "indices": [c[0] for c in cols],
            "values": [c[1] for c in cols],
            "shapes": [c[2] for c in cols],
        }

    v1 = {"hash_key": 956888297470, "internal_type": tf.string, "num_buckets": 0}
    for name, cols, dense in (
        ("sparse_only", (a, b), []),
        ("with_dense", (a, b), [d, e]),
        ("dense_only", (), [d, e]),
        ("one_column", (a,), []),
    ):
        ins = {**parts(*cols), "dense_inputs": dense}
        for out, hashed, buckets, key in (
            ("str", False, 0, 956888297470),
            ("hash", True, 0, 956888297470),
            ("hash_b", True, 100, 956888297470),
            ("hash_key", True, 7, 12345),
        ):
            attrs = dict(v1, hashed_output=hashed, num_buckets=buckets, hash_key=key)
            attrs["out_type"] = tf.int64 if hashed else tf.string
            attrs["internal_type"] = tf.int64 if any(c[1].dtype == I64 for c in cols) or dense else tf.string
            g.case(f"cross_{name}_{out}", "SparseCross", ins, **attrs)
        g.case(f"v2_{name}", "SparseCrossV2", {**ins, "sep": np.array(b"_X_", object)})
        g.case(f"v2_{name}_sep", "SparseCrossV2", {**ins, "sep": np.array(b"", object)})
        # TensorFlow 2.21 crashes on strong hashes of dense int64 columns: no such case
        for strong in (False, True) if not dense else (False,):
            for buckets in (0, 1000):
                g.case(
                    f"hashed_{name}_{int(strong)}_{buckets}",
                    "SparseCrossHashed",
                    {
                        **ins,
                        "num_buckets": np.array(buckets, I64),
                        "strong_hash": np.array(strong),
                        "salt": np.array([137, 29], I64),
                    },
                )
    g.case(
        "hashed_dense_strings_strong",
        "SparseCrossHashed",
        {
            **parts(a),
            "dense_inputs": [d],
            "num_buckets": np.array(50, I64),
            "strong_hash": np.array(True),
            "salt": np.array([-5, 2**62], I64),
        },
    )
    # unsorted rows: TensorFlow walks the indices in order and stops at the first row that goes back
    unsorted = (idx([[1, 0], [0, 0], [2, 0]]), S("a", "b", "c"), np.array([3, 1], I64))
    g.case(
        "v2_unsorted",
        "SparseCrossV2",
        {**parts(unsorted, b), "dense_inputs": [], "sep": np.array(b"+", object)},
    )
    # bigger, random: a keras HashedCrossing-like cross of two dense int64 columns and a sparse string one
    n = 40
    words = S(*(f"w{i}" for i in rng.integers(0, 50, 60)))
    rows = np.sort(rng.integers(0, n, 60))
    cols = np.zeros(60, I64)
    for i in range(1, 60):
        cols[i] = cols[i - 1] + 1 if rows[i] == rows[i - 1] else 0
    big = (np.stack([rows, cols], 1).astype(I64), words, np.array([n, int(cols.max()) + 1], I64))
    dense = [rng.integers(-5, 5, (n, 1)).astype(I64), rng.integers(0, 3, (n, 2)).astype(I64)]
    for buckets in (0, 17):
        g.case(
            f"hashed_big_{buckets}",
            "SparseCrossHashed",
            {
                **parts(big),
                "dense_inputs": dense,
                "num_buckets": np.array(buckets, I64),
                "strong_hash": np.array(False),
                "salt": np.array([0, 0], I64),
            },
        )
    g.case(
        "cross_big",
        "SparseCross",
        {**parts(big), "dense_inputs": dense},
        hashed_output=True,
        num_buckets=1000,
        hash_key=956888297470,
        out_type=tf.int64,
        internal_type=tf.int64,
    )
    g.case("v2_big", "SparseCrossV2", {**parts(big), "dense_inputs": dense, "sep": np.array(b"_X_", object)})
    # empty batch, no crosses
    empty = (np.zeros((0, 2), I64), S(), np.array([2, 0], I64))
    g.case(
        "v2_empty_values",
        "SparseCrossV2",
        {**parts(empty, a[:2] + (np.array([2, 2], I64),)), "dense_inputs": [], "sep": np.array(b"_", object)},
    )
    # refused inputs
    g.case(
        "v2_batch_mismatch",
        "SparseCrossV2",
        {**parts(a), "dense_inputs": [np.zeros((2, 1), I64)], "sep": np.array(b"_", object)},
    )
    g.case(
        "v2_bad_index_width",
        "SparseCrossV2",
        {
            **parts((np.zeros((1, 3), I64), S("a"), np.array([1, 1], I64))),
            "dense_inputs": [],
            "sep": np.array(b"_", object),
        },
    )
    g.case(
        "v2_values_mismatch",
        "SparseCrossV2",
        {
            **parts((np.zeros((2, 2), I64), S("a"), np.array([1, 1], I64))),
            "dense_inputs": [],
            "sep": np.array(b"_", object),
        },
    )
    g.case(
        "v2_shape_3d",
        "SparseCrossV2",
        {
            **parts((np.zeros((1, 2), I64), S("a"), np.array([1, 1, 1], I64))),
            "dense_inputs": [],
            "sep": np.array(b"_", object),
        },
    )
    g.case(
        "v2_dense_vector",
        "SparseCrossV2",
        {**parts(a), "dense_inputs": [S("a", "b", "c")], "sep": np.array(b"_", object)},
    )
    g.case(
        "hashed_bad_salt",
        "SparseCrossHashed",
        {
            **parts(a),
            "dense_inputs": [],
            "num_buckets": np.array(3, I64),
            "strong_hash": np.array(True),
            "salt": np.array([1], I64),
        },
    )
    # Fingerprint
    fp = {"method": np.array(b"farmhash64", object)}
    g.case("fp_strings", "Fingerprint", {"data": S("", "a", "hello world", "x" * 100), **fp})
    g.case("fp_strings_2d", "Fingerprint", {"data": S("a", "b", "c", "d", "e", "f").reshape(2, 3), **fp})
    g.case("fp_strings_3d", "Fingerprint", {"data": S(*"abcdefgh").reshape(2, 2, 2), **fp})
    g.case("fp_int64", "Fingerprint", {"data": np.arange(12, dtype=I64).reshape(3, 4), **fp})
    g.case("fp_float32", "Fingerprint", {"data": rng.standard_normal((4, 3)).astype(F32), **fp})
    g.case("fp_uint8", "Fingerprint", {"data": np.arange(10, dtype=np.uint8), **fp})
    g.case("fp_bool", "Fingerprint", {"data": np.array([[True, False], [False, False]]), **fp})
    g.case("fp_empty_rows", "Fingerprint", {"data": np.zeros((3, 0), F32), **fp})
    g.case("fp_none", "Fingerprint", {"data": np.zeros((0, 4), I32), **fp})
    g.case("fp_scalar", "Fingerprint", {"data": np.array(3, I32), **fp})
    g.case("fp_bad_method", "Fingerprint", {"data": np.zeros(2, I32), "method": np.array(b"md5", object)})


# --- sparse ------------------------------------------------------------------------------------------------


def sparse(g: Group) -> None:
    rng = np.random.default_rng(12)
    ind = idx([[0, 0, 1], [0, 2, 0], [1, 1, 1], [1, 1, 2], [2, 0, 0], [2, 2, 2]])
    shape = np.array([3, 3, 3], I64)
    vals = {
        "f32": rng.standard_normal(6).astype(F32),
        "f64": rng.standard_normal(6),
        "i32": np.array([4, -1, 7, 3, 0, -9], I32),
        "i64": np.array([4, -1, 7, 3, 0, -9], I64),
    }
    for op in ("SparseReduceSum", "SparseReduceSumSparse", "SparseReduceMax", "SparseReduceMaxSparse"):
        short = op.removeprefix("SparseReduce").lower()
        for dt, v in vals.items():
            for axes, keep in (([1], False), ([0, 2], True), ([-1], False), ([], False), ([0, 1, 2], False)):
                name = f"{short}_{dt}_{'_'.join(str(a) for a in axes) or 'none'}_{int(keep)}"
                g.case(
                    name.replace("-", "m"),
                    op,
                    {
                        "input_indices": ind,
                        "input_values": v,
                        "input_shape": shape,
                        "reduction_axes": np.array(axes, I32),
                    },
                    keep_dims=keep,
                )
        neg = np.array([-1, -2, -3, -4, -5, -6], F32)
        g.case(
            f"{short}_negative",
            op,
            {
                "input_indices": ind,
                "input_values": neg,
                "input_shape": shape,
                "reduction_axes": np.array(1, I32),
            },
            keep_dims=False,
        )
        g.case(
            f"{short}_empty",
            op,
            {
                "input_indices": np.zeros((0, 2), I64),
                "input_values": np.zeros(0, F32),
                "input_shape": np.array([2, 3], I64),
                "reduction_axes": np.array([0], I32),
            },
        )
        g.case(
            f"{short}_unsorted",
            op,
            {
                "input_indices": ind[::-1].copy(),
                "input_values": vals["f64"],
                "input_shape": shape,
                "reduction_axes": np.array([2], I32),
            },
        )
        g.case(
            f"{short}_bad_axis",
            op,
            {
                "input_indices": ind,
                "input_values": vals["f32"],
                "input_shape": shape,
                "reduction_axes": np.array([3], I32),
            },
        )
    # SparseAdd: overlapping, cancelling under thresh, disjoint, empty
    a_i = idx([[0, 0], [0, 2], [1, 1], [2, 0]])
    b_i = idx([[0, 1], [0, 2], [1, 1], [3, 3]])
    sh = np.array([4, 4], I64)
    for dt, cast in (("f32", F32), ("f64", F64), ("i64", I64), ("i32", I32)):
        a_v = np.array([1, 2, 3, 4], cast)
        b_v = np.array([10, -2, 0.5 if cast in (F32, F64) else 5, 7], cast)
        for thresh in (0, 1):
            g.case(
                f"add_{dt}_{thresh}",
                "SparseAdd",
                {
                    "a_indices": a_i,
                    "a_values": a_v,
                    "a_shape": sh,
                    "b_indices": b_i,
                    "b_values": b_v,
                    "b_shape": sh,
                    "thresh": np.array(thresh, cast),
                },
            )
    g.case(
        "add_empty",
        "SparseAdd",
        {
            "a_indices": np.zeros((0, 2), I64),
            "a_values": np.zeros(0, F32),
            "a_shape": sh,
            "b_indices": b_i,
            "b_values": np.ones(4, F32),
            "b_shape": sh,
            "thresh": np.array(0, F32),
        },
    )
    g.case(
        "add_strings_none",
        "SparseAdd",
        {
            "a_indices": a_i,
            "a_values": np.arange(4, dtype=F32),
            "a_shape": sh,
            "b_indices": b_i,
            "b_values": np.ones(4, F32),
            "b_shape": np.array([4, 5], I64),
            "thresh": np.array(0, F32),
        },
    )
    g.case(
        "add_rank_mismatch",
        "SparseAdd",
        {
            "a_indices": a_i,
            "a_values": np.arange(4, dtype=F32),
            "a_shape": sh,
            "b_indices": b_i,
            "b_values": np.ones(4, F32),
            "b_shape": np.array([4, 4, 1], I64),
            "thresh": np.array(0, F32),
        },
    )
    # TensorFlow merges the operands as given: unsorted or repeated indices
    for name, ai in (("unsorted", idx([[2, 0], [0, 1]])), ("repeated", idx([[0, 1], [0, 1]]))):
        g.case(
            f"add_{name}",
            "SparseAdd",
            {
                "a_indices": ai,
                "a_values": np.array([1, 2], F32),
                "a_shape": np.array([3, 3], I64),
                "b_indices": idx([[0, 1], [1, 1], [2, 0]]),
                "b_values": np.array([10, 20, 30], F32),
                "b_shape": np.array([3, 3], I64),
                "thresh": np.array(0, F32),
            },
        )
    # SparseConcat
    c1 = (idx([[0, 1], [1, 0]]), np.array([1, 2], F32), np.array([2, 3], I64))
    c2 = (idx([[0, 0], [1, 2], [1, 3]]), np.array([3, 4, 5], F32), np.array([2, 4], I64))
    c3 = (np.zeros((0, 2), I64), np.zeros(0, F32), np.array([2, 1], I64))
    for dim in (1, -1):
        g.case(
            f"concat_{dim}".replace("-", "m"),
            "SparseConcat",
            {
                "indices": [c1[0], c2[0], c3[0]],
                "values": [c1[1], c2[1], c3[1]],
                "shapes": [c1[2], c2[2], c3[2]],
            },
            concat_dim=dim,
        )
    r1 = (idx([[0, 1], [1, 0]]), S("a", "b"), np.array([2, 3], I64))
    r2 = (idx([[0, 0], [2, 2]]), S("c", "d"), np.array([3, 3], I64))
    g.case(
        "concat_rows_strings",
        "SparseConcat",
        {"indices": [r1[0], r2[0]], "values": [r1[1], r2[1]], "shapes": [r1[2], r2[2]]},
        concat_dim=0,
    )
    g.case(
        "concat_shape_mismatch",
        "SparseConcat",
        {"indices": [c1[0], r2[0]], "values": [c1[1], c1[1]], "shapes": [c1[2], r2[2]]},
        concat_dim=1,
    )
    g.case(
        "concat_bad_dim",
        "SparseConcat",
        {"indices": [c1[0], c2[0]], "values": [c1[1], c2[1]], "shapes": [c1[2], c2[2]]},
        concat_dim=2,
    )
    # SparseSlice
    s_i = idx([[0, 0], [0, 3], [1, 1], [2, 2], [3, 0], [3, 4]])
    s_v = np.arange(6, dtype=I64)
    s_sh = np.array([4, 5], I64)
    for name, start, size in (
        ("mid", [1, 1], [2, 3]),
        ("past_end", [2, 3], [10, 10]),
        ("all", [0, 0], [4, 5]),
        ("empty", [4, 0], [2, 2]),
        ("zero_size", [1, 1], [0, 2]),
    ):
        g.case(
            f"slice_{name}",
            "SparseSlice",
            {
                "indices": s_i,
                "values": s_v,
                "shape": s_sh,
                "start": np.array(start, I64),
                "size": np.array(size, I64),
            },
        )
    g.case(
        "slice_strings",
        "SparseSlice",
        {
            "indices": s_i,
            "values": S(*"abcdef"),
            "shape": s_sh,
            "start": np.array([0, 2], I64),
            "size": np.array([4, 3], I64),
        },
    )
    g.case(
        "slice_bad_rank",
        "SparseSlice",
        {
            "indices": s_i,
            "values": s_v,
            "shape": s_sh,
            "start": np.array([0], I64),
            "size": np.array([4, 3], I64),
        },
    )
    # SparseSoftmax
    for dt, cast in (("f32", F32), ("f64", F64)):
        g.case(
            f"softmax_{dt}",
            "SparseSoftmax",
            {"sp_indices": ind, "sp_values": (vals["f64"] * 3).astype(cast), "sp_shape": shape},
        )
    g.case(
        "softmax_2d",
        "SparseSoftmax",
        {"sp_indices": s_i, "sp_values": np.array([1, 2, 3, 4, 1000, 1001], F32), "sp_shape": s_sh},
    )
    g.case(
        "softmax_empty",
        "SparseSoftmax",
        {"sp_indices": np.zeros((0, 2), I64), "sp_values": np.zeros(0, F32), "sp_shape": s_sh},
    )
    g.case(
        "softmax_unsorted",
        "SparseSoftmax",
        {"sp_indices": s_i[[0, 2, 1, 3, 4, 5]], "sp_values": np.arange(6, dtype=F32), "sp_shape": s_sh},
    )
    g.case(
        "softmax_rank1",
        "SparseSoftmax",
        {
            "sp_indices": idx([[0], [1]]).reshape(2, 1),
            "sp_values": np.zeros(2, F32),
            "sp_shape": np.array([2], I64),
        },
    )


# --- ragged ------------------------------------------------------------------------------------------------


def ragged(g: Group) -> None:
    rng = np.random.default_rng(13)
    for name, st, li, de, dt in (
        ("int", [0, 5, 3, 2], [4, 5, -3, 9], [1, 2, -2, 3], I32),
        ("int64_bcast", 2, [5, 2, 8], 3, I64),
        ("float", [0.0, 1.5, -2.0], [1.0, 1.0, 2.0], [0.1, -0.25, 0.3], F32),
        ("double", [0.0, 10.0], [1.0, 0.0], [0.07, -0.7], F64),
        ("scalar", 1, 10, 4, I32),
        ("empty", np.zeros(0, I32), np.zeros(0, I32), np.zeros(0, I32), I32),
        ("zero_delta", [0, 1], [3, 4], [1, 0], I32),
        ("shape_mismatch", [0, 1], [3, 4, 5], 1, I32),
    ):
        for splits in (I32, I64):
            g.case(
                f"range_{name}_{np.dtype(splits).name}",
                "RaggedRange",
                {"starts": np.array(st, dt), "limits": np.array(li, dt), "deltas": np.array(de, dt)},
                Tsplits=tf.as_dtype(splits),
            )
    # RaggedGather: params [[a, b], [], [c, d, e]] (ragged rank 1), and a ragged rank 2 one
    splits1 = np.array([0, 2, 2, 5], I64)
    vals1 = S(*"abcde")
    for name, ind in (
        ("vector", np.array([2, 0, 1, 2], I32)),
        ("matrix", np.array([[0, 2], [1, 1], [2, 0]], I64)),
        ("scalar_like", np.array([1], I32)),
        ("empty", np.zeros(0, I32)),
        ("out_of_range", np.array([0, 3], I32)),
        ("negative", np.array([-1], I32)),
    ):
        g.case(
            f"gather_{name}",
            "RaggedGather",
            {"params_nested_splits": [splits1], "params_dense_values": vals1, "indices": ind},
            OUTPUT_RAGGED_RANK=ind.ndim,
        )
    s_outer = np.array([0, 1, 3, 3, 4], I32)
    s_inner = np.array([0, 2, 2, 5, 6], I32)
    dense = rng.standard_normal((6, 2)).astype(F32)
    g.case(
        "gather_rank2",
        "RaggedGather",
        {
            "params_nested_splits": [s_outer, s_inner],
            "params_dense_values": dense,
            "indices": np.array([1, 3, 0, 1, 2], I64),
        },
        OUTPUT_RAGGED_RANK=2,
    )
    g.case(
        "gather_rank2_matrix",
        "RaggedGather",
        {
            "params_nested_splits": [s_outer, s_inner],
            "params_dense_values": dense,
            "indices": np.array([[3, 1], [0, 2]], I32),
        },
        OUTPUT_RAGGED_RANK=3,
    )
    # RaggedTensorToSparse
    g.case(
        "to_sparse_rank1",
        "RaggedTensorToSparse",
        {"rt_nested_splits": [splits1], "rt_dense_values": np.arange(5, dtype=F32)},
    )
    g.case(
        "to_sparse_rank2",
        "RaggedTensorToSparse",
        {"rt_nested_splits": [s_outer, s_inner], "rt_dense_values": dense},
    )
    g.case(
        "to_sparse_strings",
        "RaggedTensorToSparse",
        {"rt_nested_splits": [np.array([0, 0, 3, 4], I64)], "rt_dense_values": S("x", "y", "z", "w")},
    )
    g.case(
        "to_sparse_empty",
        "RaggedTensorToSparse",
        {"rt_nested_splits": [np.array([0, 0, 0], I64)], "rt_dense_values": np.zeros(0, I32)},
    )
    g.case(
        "to_sparse_no_rows",
        "RaggedTensorToSparse",
        {"rt_nested_splits": [np.array([0], I64)], "rt_dense_values": np.zeros(0, I32)},
    )
    for name, sp in (("bad_start", [1, 2, 5]), ("bad_end", [0, 2, 4]), ("unsorted", [0, 3, 2, 5])):
        g.case(
            f"to_sparse_{name}",
            "RaggedTensorToSparse",
            {"rt_nested_splits": [np.array(sp, I64)], "rt_dense_values": np.arange(5, dtype=F32)},
        )


# --- sets, UnravelIndex, AdjustHue -------------------------------------------------------------------------


def sets(g: Group) -> None:
    rng = np.random.default_rng(14)
    a = np.array([[1, 2, 2, 5], [3, 3, 1, 0], [7, 8, 9, 7]], I32)
    b = np.array([[2, 1, 6], [4, 3, 3], [0, 0, 0]], I32)
    words_a = S("a", "b", "c", "b", "x", "y").reshape(2, 3)
    words_b = S("b", "z", "y", "y").reshape(2, 2)
    for op_name in ("intersection", "union", "a-b", "b-a"):
        short = op_name.replace("-", "_")
        g.case(f"dd_{short}_int32", "DenseToDenseSetOperation", {"set1": a, "set2": b}, set_operation=op_name)
        g.case(
            f"dd_{short}_int64_3d",
            "DenseToDenseSetOperation",
            {"set1": a.astype(I64).reshape(3, 2, 2), "set2": b[:, :2].astype(I64).reshape(3, 2, 1)},
            set_operation=op_name,
        )
        g.case(
            f"dd_{short}_strings",
            "DenseToDenseSetOperation",
            {"set1": words_a, "set2": words_b},
            set_operation=op_name,
        )
        g.case(
            f"dd_{short}_empty",
            "DenseToDenseSetOperation",
            {"set1": np.zeros((2, 0), I32), "set2": np.zeros((2, 3), I32)},
            set_operation=op_name,
        )
        # set2 sparse: rows 0 and 2 hold values, row 1 none
        g.case(
            f"ds_{short}_int32",
            "DenseToSparseSetOperation",
            {
                "set1": a,
                "set2_indices": idx([[0, 0], [0, 1], [2, 0], [2, 2]]),
                "set2_values": np.array([2, 9, 7, 1], I32),
                "set2_shape": np.array([3, 4], I64),
            },
            set_operation=op_name,
        )
        g.case(
            f"ds_{short}_strings",
            "DenseToSparseSetOperation",
            {
                "set1": words_a,
                "set2_indices": idx([[1, 0], [1, 1]]),
                "set2_values": S("y", "q"),
                "set2_shape": np.array([2, 5], I64),
            },
            set_operation=op_name,
        )
    g.case(
        "dd_big",
        "DenseToDenseSetOperation",
        {"set1": rng.integers(0, 20, (30, 12)).astype(I64), "set2": rng.integers(0, 20, (30, 9)).astype(I64)},
        set_operation="intersection",
    )
    g.case("dd_bad_op", "DenseToDenseSetOperation", {"set1": a, "set2": b}, set_operation="xor")
    g.case("dd_shape_mismatch", "DenseToDenseSetOperation", {"set1": a, "set2": b[:2]}, set_operation="union")
    g.case("dd_rank1", "DenseToDenseSetOperation", {"set1": a[0], "set2": b[0]}, set_operation="union")
    g.case(
        "ds_unsorted",
        "DenseToSparseSetOperation",
        {
            "set1": a,
            "set2_indices": idx([[2, 0], [0, 0]]),
            "set2_values": np.array([2, 9], I32),
            "set2_shape": np.array([3, 4], I64),
        },
        set_operation="union",
    )
    two = np.array([[1, 2], [3, 4]], I32)
    g.case(
        "dd_rank_mismatch",
        "DenseToDenseSetOperation",
        {"set1": two.reshape(2, 1, 2), "set2": two},
        set_operation="union",
    )
    for name, ind, shape in (
        ("ds_group_mismatch", [[0, 0]], [3, 2]),
        ("ds_out_of_bounds", [[0, 5]], [2, 2]),
        ("ds_rank_mismatch", [[0, 0, 0]], [2, 2, 1]),
    ):
        g.case(
            name,
            "DenseToSparseSetOperation",
            {
                "set1": two,
                "set2_indices": np.array(ind, I64),
                "set2_values": np.array([1], I32),
                "set2_shape": np.array(shape, I64),
            },
            set_operation="union",
        )
    # UnravelIndex
    for name, ind, dims, dt in (
        ("vector", [0, 5, 11, 7], [3, 4], I32),
        ("scalar", 17, [2, 3, 4], I64),
        ("matrix", [[1, 2], [3, 4]], [5], I32),
        ("empty", np.zeros(0, I32), [2, 2], I32),
        ("out_of_range", [0, 12], [3, 4], I32),
        ("negative", [-1], [3, 4], I64),
        ("zero_dim", [0], [3, 0], I32),
    ):
        g.case(f"unravel_{name}", "UnravelIndex", {"indices": np.array(ind, dt), "dims": np.array(dims, dt)})
    # AdjustHue
    img = rng.random((2, 4, 5, 3)).astype(F32)
    img[0, 0, 0] = [0.5, 0.5, 0.5]  # grey: no hue
    img[0, 0, 1] = [0.2, 0.7, 0.7]  # ties
    img[0, 0, 2] = [0.7, 0.2, 0.7]
    img[0, 0, 3] = [0.0, 0.0, 0.0]
    for delta in (0.0, 0.2, -0.45, 0.999, 1.7, -2.3):
        g.case(
            f"hue_{str(delta).replace('-', 'm').replace('.', '_')}",
            "AdjustHue",
            {"images": img, "delta": np.array(delta, F32)},
        )
    g.case("hue_bad_channels", "AdjustHue", {"images": img[..., :2], "delta": np.array(0.3, F32)})
    g.case("hue_rank2", "AdjustHue", {"images": img[0, 0], "delta": np.array(0.3, F32)})
    g.case("hue_delta_vector", "AdjustHue", {"images": img, "delta": np.array([0.3], F32)})


# --- csv ---------------------------------------------------------------------------------------------------


def csv(g: Group) -> None:
    num = [np.array([0], I32), np.array([1.5], F32), np.array([-1], I64), np.array([0.25], F64), S("dflt")]
    rows = S("1,2.5,3,4e-2,abc", ' -7 ,+1e3,9223372036854775807,inf,"q,""x"""', ",,,,", "5,nan,16,-0,")
    g.case("types", "DecodeCSV", {"records": rows, "record_defaults": num})
    g.case("matrix", "DecodeCSV", {"records": rows.reshape(2, 2), "record_defaults": num})
    g.case(
        "scalar",
        "DecodeCSV",
        {"records": np.array(b"3;x", object), "record_defaults": [num[0], num[4]]},
        field_delim=";",
    )
    g.case(
        "no_quotes",
        "DecodeCSV",
        {"records": S('"a"|b"', 'x|"'), "record_defaults": [num[4], num[4]]},
        field_delim="|",
        use_quote_delim=False,
    )
    g.case(
        "na_value",
        "DecodeCSV",
        {"records": S("NA,1", "2,NA", "3,"), "record_defaults": [num[0], num[1]]},
        na_value="NA",
    )
    g.case(
        "select_cols",
        "DecodeCSV",
        {"records": S("a,1,b,2,c", '"x",,"y",4,'), "record_defaults": [num[4], num[2]]},
        select_cols=[2, 3],
    )
    g.case(
        "select_last",
        "DecodeCSV",
        {"records": S("a,1,", "b,2,z"), "record_defaults": [num[2], num[4]]},
        select_cols=[1, 2],
    )
    g.case("empty_batch", "DecodeCSV", {"records": np.zeros(0, object), "record_defaults": num[:2]})
    # refused
    g.case(
        "required", "DecodeCSV", {"records": S("1,2", ",3"), "record_defaults": [np.zeros(0, I32), num[0]]}
    )
    g.case("too_few", "DecodeCSV", {"records": S("1,2", "3"), "record_defaults": [num[0], num[0]]})
    g.case("too_many", "DecodeCSV", {"records": S("1,2,3"), "record_defaults": [num[0], num[0]]})
    g.case("empty_record", "DecodeCSV", {"records": S(""), "record_defaults": [num[0]]})
    g.case("bad_int", "DecodeCSV", {"records": S("1.5"), "record_defaults": [num[0]]})
    g.case("int32_overflow", "DecodeCSV", {"records": S("3000000000"), "record_defaults": [num[0]]})
    g.case("bad_float", "DecodeCSV", {"records": S("x1"), "record_defaults": [num[1]]})
    g.case("bad_double", "DecodeCSV", {"records": S("1e"), "record_defaults": [num[3]]})
    g.case("bad_int64", "DecodeCSV", {"records": S("9223372036854775808"), "record_defaults": [num[2]]})
    g.case("quote_inside", "DecodeCSV", {"records": S('a"b'), "record_defaults": [num[4]]})
    g.case("quote_unclosed", "DecodeCSV", {"records": S('"ab'), "record_defaults": [num[4]]})
    g.case("quote_then_text", "DecodeCSV", {"records": S('"a"b,c'), "record_defaults": [num[4], num[4]]})
    g.case("two_defaults", "DecodeCSV", {"records": S("1"), "record_defaults": [np.array([1, 2], I32)]})


# --- segment_join / full_int --------------------------------------------------------------------------------


def segment_join(g: Group) -> None:
    words = S("a", "bb", "", "c", "dd", "e")
    for name, ids, num in (
        ("vector", np.array([0, 2, 0, 1, 2, 0], I32), 3),
        ("unused_segments", np.array([3, 3, 1, 1, 3, 0], I64), np.array(6, I64)),
        ("one_segment", np.zeros(6, I32), 1),
        ("negative", np.array([0, -1, 0, 1, 2, 0], I32), 3),
        ("too_big", np.array([0, 3, 0, 1, 2, 0], I32), 3),
        ("wrong_shape", np.array([0, 1], I32), 3),
    ):
        for sep in ("", "|", " - "):
            g.case(
                f"{name}_{len(sep)}",
                "UnsortedSegmentJoin",
                {"inputs": words, "segment_ids": ids, "num_segments": np.asarray(num)},
                separator=sep,
            )
    g.case(
        "matrix_rows",
        "UnsortedSegmentJoin",
        {
            "inputs": words.reshape(3, 2),
            "segment_ids": np.array([1, 0, 1], I32),
            "num_segments": np.array(2, I32),
        },
        separator=",",
    )
    g.case(
        "matrix_ids",
        "UnsortedSegmentJoin",
        {
            "inputs": words.reshape(3, 2),
            "segment_ids": np.array([[1, 0], [0, 0], [2, 1]], I32),
            "num_segments": np.array(4, I32),
        },
        separator=",",
    )
    g.case(
        "empty",
        "UnsortedSegmentJoin",
        {
            "inputs": np.zeros((0, 2), object),
            "segment_ids": np.zeros(0, I32),
            "num_segments": np.array(2, I32),
        },
    )


def full_int(g: Group) -> None:
    for dtype in (tf.int32, tf.int64, tf.uint32, tf.uint64):
        for shape in ([5], [2, 3], [0]):
            name = f"{dtype.name}_{'x'.join(map(str, shape))}"
            g.case(
                f"v1_{name}",
                "StatelessRandomUniformFullInt",
                {"shape": np.array(shape, I32), "seed": np.array([7, -3], I64)},
                dtype=dtype,
            )
            g.case(
                f"v2_{name}",
                "StatelessRandomUniformFullIntV2",
                {
                    "shape": np.array(shape, I64),
                    "key": np.array([12345], np.uint64),
                    "counter": np.array([2**40 + 3, 9], np.uint64),
                    "alg": np.array(1, I32),
                },
                dtype=dtype,
            )
    g.case(
        "bad_seed",
        "StatelessRandomUniformFullInt",
        {"shape": np.array([2], I32), "seed": np.array([1], I64)},
        dtype=tf.int32,
    )


# --- sequence_features --------------------------------------------------------------------------------------


def sequence_features(g: Group) -> None:
    """ParseExampleV2 with FixedLenSequenceFeatures (a leading -1 in dense_shapes), beside a fixed one."""
    f = tf.train.Feature

    def ex(**feats: Any) -> bytes:
        def one(v: Any) -> Any:
            if isinstance(v[0], bytes):
                return f(bytes_list=tf.train.BytesList(value=v))
            if isinstance(v[0], int):
                return f(int64_list=tf.train.Int64List(value=v))
            return f(float_list=tf.train.FloatList(value=v))

        return tf.train.Example(
            features=tf.train.Features(feature={k: one(v) for k, v in feats.items()})
        ).SerializeToString()

    batch = S(
        ex(ids=[1, 2, 3], xy=[0.5, 1.5, 2.5, 3.5], w=[b"a"], age=[30]),
        ex(ids=[4], w=[b"b", b"c", b"d"], age=[31]),
        ex(age=[32]),
    )

    def parse(name: str, serialized: Any, keys: list[str], defaults: list[Any], shapes: list[Any]) -> None:
        g.case(
            name,
            "ParseExampleV2",
            {
                "serialized": serialized,
                "names": np.zeros(0, object),
                "sparse_keys": np.zeros(0, object),
                "dense_keys": S(*keys),
                "ragged_keys": np.zeros(0, object),
                "dense_defaults": defaults,
            },
            num_sparse=0,
            sparse_types=[],
            ragged_value_types=[],
            ragged_split_types=[],
            dense_shapes=shapes,
        )

    parse(
        "mixed",
        batch,
        ["ids", "xy", "w", "age"],
        [np.array(-1, I64), np.array(0.0, F32), np.array(b"pad", object), np.array([0], I64)],
        [[None], [None, 2], [None], [1]],
    )
    both = [[None], [None, 2]]
    parse("scalar_input", batch[0], ["ids", "xy"], [np.array(7, I64), np.array(9.0, F32)], both)
    parse("none_present", batch[2:], ["ids"], [np.array(5, I64)], [[None]])
    parse(
        "empty_batch",
        np.zeros(0, object),
        ["ids", "xy"],
        [np.array(5, I64), np.array(1.0, F32)],
        [[None], [None, 2]],
    )
    parse("rank3", batch, ["xy"], [np.array(-2.0, F32)], [[None, 2, 1]])
    # refused
    parse("not_multiple", batch, ["ids"], [np.array(0, I64)], [[None, 2]])
    parse("wrong_type", batch, ["w"], [np.array(0, I64)], [[None]])


# --- serialized_tensors -------------------------------------------------------------------------------------


def serialized_tensors(g: Group) -> None:
    values = {
        "float": np.arange(6, dtype=F32).reshape(2, 3) - 2.5,
        "scalar": np.array(-7, I64),  # its last byte not 0: the fixture's bytes arrays drop trailing NULs
        "int8": np.array([-3, 0, 127], np.int8),
        "uint16": np.array([[1], [65535]], np.uint16),
        "double": np.array([1e300, -0.0]),
        "bool": np.array([True, False, True]),
        "half": np.array([1.5, -2.0], np.float16),
        "complex": np.array([1 + 2j, -3j], np.complex64),
        "empty": np.zeros((0, 3), F32),
        "strings": S("a", "", "日本"),
        "string_scalar": np.array(b"xyz", object),
        "strings_2d": S("p", "q", "r", "s").reshape(2, 2),
    }
    for name, value in values.items():
        g.case(f"serialize_{name}", "SerializeTensor", {"tensor": value})
    protos = {name: tf.make_tensor_proto(value).SerializeToString() for name, value in values.items()}
    for name, value in values.items():
        dtype = tf.string if value.dtype == object else tf.as_dtype(value.dtype)
        g.case(f"parse_{name}", "ParseTensor", {"serialized": np.array(protos[name], object)}, out_type=dtype)
    g.case(
        "parse_wrong_type",
        "ParseTensor",
        {"serialized": np.array(protos["float"], object)},
        out_type=tf.int32,
    )
    g.case("parse_garbage", "ParseTensor", {"serialized": np.array(b"\xff\xff", object)}, out_type=tf.float32)
    g.case("parse_vector", "ParseTensor", {"serialized": S(protos["float"])}, out_type=tf.float32)


# --- half_sigmoid -------------------------------------------------------------------------------------------


def half_sigmoid(g: Group) -> None:
    """float16 Sigmoid: Eigen's vectorized path (long inputs) and its scalar one (short ones and tails)."""
    rng = np.random.default_rng(16)
    edges = np.array([0, -0.0, 1e-4, -1e-4, 11.0, 12.0, -17.0, -18.0, 65504, -65504, np.inf, -np.inf, np.nan])
    g.case("edges", "Sigmoid", {"x": edges.astype(np.float16)})
    g.case("short", "Sigmoid", {"x": (rng.standard_normal(7) * 3).astype(np.float16)})
    g.case("long", "Sigmoid", {"x": (rng.standard_normal((40, 53)) * 4).astype(np.float16)})


# --- count_sparse -------------------------------------------------------------------------------------------


def count_sparse(g: Group) -> None:
    """The CountSparseOutput ops (``tf.sparse.bincount``): counts per row, sparse; weights, binary output,
    minlength and maxlength, 1-d inputs, and a negative value (refused)."""
    m = np.array([[1, 5, 2, 1], [0, 0, 7, 3], [3, 3, 3, 9]], I64)
    w = np.arange(12, dtype=F32).reshape(3, 4) / 4
    none = np.zeros(0, F32)
    attrs = {"minlength": -1, "maxlength": -1, "binary_output": False}
    g.case("dense_2d", "DenseCountSparseOutput", {"values": m, "weights": none}, **attrs)
    g.case("dense_1d", "DenseCountSparseOutput", {"values": m[0], "weights": none}, **attrs)
    g.case("dense_weights", "DenseCountSparseOutput", {"values": m, "weights": w}, **attrs)
    g.case(
        "dense_binary_min",
        "DenseCountSparseOutput",
        {"values": m.astype(I32), "weights": np.zeros(0, I64)},
        minlength=12,
        maxlength=-1,
        binary_output=True,
    )
    g.case(
        "dense_max",
        "DenseCountSparseOutput",
        {"values": m, "weights": w.astype(F64)},
        minlength=-1,
        maxlength=4,
        binary_output=False,
    )
    g.case("dense_negative", "DenseCountSparseOutput", {"values": -m, "weights": none}, **attrs)
    idx = np.array([[0, 0], [0, 3], [2, 1], [2, 2], [2, 5]], I64)
    vals = np.array([4, 1, 4, 4, 0], I64)
    sp = {"indices": idx, "values": vals, "dense_shape": np.array([4, 6], I64)}
    g.case("sparse_2d", "SparseCountSparseOutput", {**sp, "weights": none}, **attrs)
    g.case(
        "sparse_weights",
        "SparseCountSparseOutput",
        {**sp, "weights": np.array([0.5, 1, 2, 3, 4], F32)},
        **attrs,
    )
    g.case(
        "sparse_1d",
        "SparseCountSparseOutput",
        {"indices": idx[:, 1:], "values": vals, "dense_shape": np.array([6], I64), "weights": none},
        minlength=7,
        maxlength=-1,
        binary_output=True,
    )
    splits = np.array([0, 3, 3, 5], I64)
    g.case(
        "ragged",
        "RaggedCountSparseOutput",
        {"splits": splits, "values": vals, "weights": none},
        **attrs,
    )
    g.case(
        "ragged_weights_max",
        "RaggedCountSparseOutput",
        {"splits": splits, "values": vals.astype(I32), "weights": np.arange(5, dtype=F32)},
        minlength=-1,
        maxlength=4,
        binary_output=False,
    )


# --- sparse_minmax ------------------------------------------------------------------------------------------


def sparse_minmax(g: Group) -> None:
    """SparseSparseMaximum and SparseSparseMinimum: the union of two operands' indices, 0 for the one that
    holds none; empty operands, int64 values, and operands of different shapes (refused)."""
    a_idx = np.array([[0, 0], [0, 3], [1, 1], [2, 2]], I64)
    b_idx = np.array([[0, 1], [0, 3], [2, 0], [2, 2], [2, 3]], I64)
    a = {"a_indices": a_idx, "a_values": np.array([1.5, -2, -0.5, 3], F32), "a_shape": np.array([3, 4], I64)}
    b = {"b_indices": b_idx, "b_values": np.array([-1, 4, 2, 1, -3], F32), "b_shape": np.array([3, 4], I64)}
    for op in ("SparseSparseMaximum", "SparseSparseMinimum"):
        name = op[12:].lower()
        g.case(name, op, {**a, **b})
        g.case(
            f"{name}_empty_b",
            op,
            {**a, "b_indices": np.zeros((0, 2), I64), "b_values": np.zeros(0, F32), "b_shape": b["b_shape"]},
        )
    g.case(
        "maximum_int64",
        "SparseSparseMaximum",
        {**a, "a_values": np.array([5, -7, 0, 2], I64), **b, "b_values": np.array([-1, 9, -4, 2, 3], I64)},
    )
    g.case("maximum_shapes_differ", "SparseSparseMaximum", {**a, **b, "b_shape": np.array([3, 5], I64)})


# --- padded_raw ---------------------------------------------------------------------------------------------


def padded_raw(g: Group) -> None:
    """DecodePaddedRaw (``tf.io.decode_raw`` with ``fixed_length``): strings cut or zero-padded, both byte
    orders, a rank-2 input, and a length not a multiple of the type's size (refused)."""
    s = S("abcdefgh", "xy", "", "0123456789ab")
    g.case("uint8", "DecodePaddedRaw", {"input_bytes": s, "fixed_length": np.int32(6)}, out_type=tf.uint8)
    g.case("int16_le", "DecodePaddedRaw", {"input_bytes": s, "fixed_length": np.int32(6)}, out_type=tf.int16)
    g.case(
        "int32_be",
        "DecodePaddedRaw",
        {"input_bytes": s.reshape(2, 2), "fixed_length": np.int32(8)},
        out_type=tf.int32,
        little_endian=False,
    )
    g.case("float32", "DecodePaddedRaw", {"input_bytes": s, "fixed_length": np.int32(4)}, out_type=tf.float32)
    g.case(
        "not_multiple", "DecodePaddedRaw", {"input_bytes": s, "fixed_length": np.int32(5)}, out_type=tf.int16
    )


# --- gamma --------------------------------------------------------------------------------------------------


def gamma(g: Group) -> None:
    """Igamma, Igammac, Betainc, Zeta and Polygamma in float32 and float64: both sides of the series /
    continued fraction switch, large parameters, and the edges of the domains (0, inf, negatives, NaN)."""
    rng = np.random.default_rng(19)
    for dt in (F32, F64):
        name = np.dtype(dt).name
        big = 1e4 if dt == F64 else 300  # TensorFlow's float32 sums lose 3 digits at 1e4
        a = np.r_[rng.uniform(0.05, 12, 40), [0.5, 3, 3, 100, big, 0, -1, 2, np.nan, 2]].astype(dt)
        x = np.r_[rng.uniform(0, 15, 40), [0.0, 0.0, np.inf, 110, big, 1, 1, -1, 1, np.nan]].astype(dt)
        g.case(f"igamma_{name}", "Igamma", {"a": a, "x": x})
        g.case(f"igammac_{name}", "Igammac", {"a": a, "x": x})
        p = np.r_[rng.uniform(0.1, 20, 30), [1, 0.5, 2, 500, 0, -1, 2, 2]].astype(dt)
        q = np.r_[rng.uniform(0.1, 20, 30), [1, 0.5, 3, 400, 1, 2, 2, 2]].astype(dt)
        t = np.r_[rng.uniform(0, 1, 30), [0.3, 0.999, 0, 0.55, 0.5, 0.5, 1.5, 1]].astype(dt)
        g.case(f"betainc_{name}", "Betainc", {"a": p, "b": q, "x": t})
        s = np.r_[rng.uniform(1.01, 12, 30), [1, 0.5, 2, 3, 2, 3, 2.5, 60]].astype(dt)
        v = np.r_[rng.uniform(0.05, 20, 30), [1, 1, -2, -2, -1.5, -1.5, 0.1, 3]].astype(dt)
        g.case(f"zeta_{name}", "Zeta", {"x": s, "q": v})
        n = np.r_[rng.integers(0, 5, 20), [0.5, -1, 3]].astype(dt)
        y = np.r_[rng.uniform(0.1, 10, 20), [1, 1, -2.5]].astype(dt)
        g.case(f"polygamma_{name}", "Polygamma", {"a": n, "x": y})


# --- fractional_pool ----------------------------------------------------------------------------------------


def fractional_pool(g: Group) -> None:
    """FractionalMaxPool and FractionalAvgPool with fixed seeds (deterministic): pseudo-random and random
    regions, overlapping or not, ratios in (1, 2) and past 2, float64 and int32 inputs."""
    rng = np.random.default_rng(20)
    x = rng.standard_normal((1, 11, 9, 2)).astype(F32)
    for op in ("FractionalMaxPool", "FractionalAvgPool"):
        short = op[10:13].lower()
        for name, ratio, pseudo, overlap, seeds in (
            ("pseudo", [1.0, 1.44, 1.73, 1.0], True, False, (7, 3)),
            ("pseudo_overlap", [1.0, 1.5, 1.5, 1.0], True, True, (87654321, 7)),
            ("random", [1.0, 1.44, 1.73, 1.0], False, False, (1, 2)),
            ("random_overlap_wide", [1.0, 2.6, 2.2, 1.0], False, True, (5, 0)),
            ("pseudo_wide", [1.0, 3.1, 2.5, 1.0], True, False, (0, 9)),
        ):
            g.case(
                f"{short}_{name}",
                op,
                {"value": x},
                pooling_ratio=ratio,
                pseudo_random=pseudo,
                overlapping=overlap,
                deterministic=True,
                seed=seeds[0],
                seed2=seeds[1],
            )
        g.case(
            f"{short}_float64",
            op,
            {"value": x[:1].astype(F64)},
            pooling_ratio=[1.0, 1.3, 1.6, 1.0],
            pseudo_random=True,
            deterministic=True,
            seed=11,
            seed2=12,
        )
    g.case(
        "avg_int32",
        "FractionalAvgPool",
        {"value": (x * 10).astype(I32)},
        pooling_ratio=[1.0, 1.6, 1.6, 1.0],
        overlapping=True,
        deterministic=True,
        seed=4,
        seed2=4,
    )


# --- shuffle ------------------------------------------------------------------------------------------------


def shuffle(g: Group) -> None:
    """StatelessShuffle (``tf.random.experimental.stateless_shuffle``) and seeded RandomShuffle
    (``tf.random.shuffle``, its first run): vectors, matrices (rows moved whole), one row, both algorithm
    ids (Philox and auto-select), and an algorithm TensorFlow refuses."""
    key, counter = np.array([0x1234567890ABCDEF], np.uint64), np.array([5, 2**40 + 3], np.uint64)
    v = np.arange(50, dtype=I64)
    m = np.arange(21, dtype=F32).reshape(7, 3)
    for name, value, alg in (
        ("vector", v, 1),
        ("matrix", m, 3),
        ("one_row", m[:1], 1),
        ("strings", S(*"abcde"), 1),
    ):
        g.case(
            f"stateless_{name}",
            "StatelessShuffle",
            {"value": value, "key": key, "counter": counter, "alg": np.int32(alg)},
        )
    g.case(
        "stateless_bad_alg",
        "StatelessShuffle",
        {"value": v, "key": key, "counter": counter, "alg": np.int32(2)},
    )
    g.case("random_vector", "RandomShuffle", {"value": v}, seed=7, seed2=11)
    g.case("random_matrix", "RandomShuffle", {"value": m}, seed=87654321, seed2=3)


# --- param_truncated ----------------------------------------------------------------------------------------


def param_truncated(g: Group) -> None:
    """StatelessParameterizedTruncatedNormal: each of its three samplers (normals kept, uniforms weighted,
    an exponential proposal), a bound above the mean (flipped), parameters broadcast over batches, float64,
    and the parameters and shapes TensorFlow refuses."""
    seed = np.array([7, 11], I64)

    def case(name: str, shape: list[int], mean: Any, std: Any, lo: Any, hi: Any, dt: Any = F32) -> None:
        g.case(
            name,
            "StatelessParameterizedTruncatedNormal",
            {
                "shape": np.array(shape, I32),
                "seed": seed,
                **{
                    k: np.asarray(v, dt)
                    for k, v in zip(
                        ("means", "stddevs", "minvals", "maxvals"), (mean, std, lo, hi), strict=True
                    )
                },
            },
        )

    case("uniform", [50], 0.0, 1.0, -1.0, 1.0)
    case("randn", [30], 0.5, 2.0, -6.0, 6.0)
    case("exponential", [30], 0.0, 1.0, 2.0, np.inf)
    case("flipped", [20], 5.0, 2.0, -np.inf, 1.0)
    case("batches", [6, 3], [0.0, 1.0, -2.0], [1.0, 0.5, 3.0], [-1.0, 0.0, 1.5], 2.5)
    case("float64", [12], 1.0, 0.3, -0.5, 2.0, F64)
    case("bad_stddev", [4], 0.0, -1.0, -1.0, 1.0)
    case("bad_shape", [4, 2], [0.0, 1.0, 2.0], 1.0, -1.0, 1.0)


# --- jpeg_crop ----------------------------------------------------------------------------------------------


def jpeg_crop(g: Group) -> None:
    """DecodeAndCropJpeg and ExtractJpegShape on JPEGs TensorFlow encoded: RGB without chroma subsampling
    and grayscale (whose cropped decode is the full decode's window), windows at the edges, a window past
    the image and bytes that are no JPEG (refused)."""
    rng = np.random.default_rng(21)
    rgb = rng.integers(0, 256, (20, 24, 3)).astype(np.uint8)
    full = tf.io.encode_jpeg(rgb, quality=85, chroma_downsampling=False).numpy()
    gray = tf.io.encode_jpeg(rgb[..., :1], quality=85).numpy()
    for name, data, ch in (("rgb444", full, 3), ("gray", gray, 1)):
        for w_name, window in (
            ("inner", [3, 5, 9, 11]),
            ("corner", [0, 0, 20, 24]),
            ("edge", [10, 17, 10, 7]),
        ):
            g.case(
                f"crop_{name}_{w_name}",
                "DecodeAndCropJpeg",
                {"contents": np.array(data, object), "crop_window": np.array(window, I32)},
                channels=ch,
            )
        g.case(f"shape_{name}", "ExtractJpegShape", {"contents": np.array(data, object)})
    g.case(
        "crop_outside",
        "DecodeAndCropJpeg",
        {"contents": np.array(full, object), "crop_window": np.array([15, 20, 10, 10], I32)},
    )
    g.case("shape_not_jpeg", "ExtractJpegShape", {"contents": np.array(b"\x89PNG not a jpeg", object)})


# --- set_size -----------------------------------------------------------------------------------------------


def set_size(g: Group) -> None:
    """SetSize (``tf.sets.size``): distinct values per set of a SparseTensor, rank 2 and 3, strings, empty
    sets, and indices out of order (refused when validated)."""
    idx = np.array([[0, 0], [0, 1], [0, 2], [2, 0], [2, 3]], I64)
    g.case(
        "rank2",
        "SetSize",
        {
            "set_indices": idx,
            "set_values": np.array([4, 4, 1, 7, 7], I32),
            "set_shape": np.array([3, 5], I64),
        },
    )
    g.case(
        "rank3_strings",
        "SetSize",
        {
            "set_indices": np.array([[0, 0, 0], [0, 0, 1], [1, 1, 0], [1, 1, 2]], I64),
            "set_values": S("a", "b", "c", "c"),
            "set_shape": np.array([2, 2, 3], I64),
        },
    )
    g.case(
        "unordered",
        "SetSize",
        {
            "set_indices": idx[::-1].copy(),
            "set_values": np.array([4, 4, 1, 7, 7], I32),
            "set_shape": np.array([3, 5], I64),
        },
    )


# --- half_softplus ------------------------------------------------------------------------------------------


def half_softplus(g: Group) -> None:
    """float16 Softplus: log1p(exp(x)) in half steps, and the cut-offs at +-7.008 (Eigen's half epsilon)."""
    rng = np.random.default_rng(18)
    edges = [
        0,
        -0.0,
        7.0,
        7.008,
        7.016,
        -7.0,
        -7.008,
        -7.016,
        11.0,
        -20.0,
        65504,
        -65504,
        np.inf,
        -np.inf,
        np.nan,
    ]
    g.case("edges", "Softplus", {"features": np.array(edges, np.float16)})
    g.case("normal", "Softplus", {"features": (rng.standard_normal((30, 40)) * 4).astype(np.float16)})


# --- half ---------------------------------------------------------------------------------------------------


def half(g: Group) -> None:
    """float16 Softmax, LogSoftmax, Sum and Mean over innermost axes, which Eigen adds in half step by step,
    and Rsqrt, Elu, Selu, which it computes in half steps:
    rows of 1 to 2049 values (leaf sums, packet tails, the split of rows past 1600 values at packet
    boundaries of the flat tensor, which odd row lengths move)."""
    rng = np.random.default_rng(17)
    for n, rows in ((1, 3), (3, 4), (10, 6), (33, 3), (100, 2), (1601, 2), (2049, 1)):
        x = (rng.standard_normal((rows, n)) * 3).astype(np.float16)
        g.case(f"softmax_{n}", "Softmax", {"logits": x})
        if n < 1000:  # (the fixture small)
            g.case(f"log_softmax_{n}", "LogSoftmax", {"logits": x})
        g.case(f"sum_{n}", "Sum", {"input": x, "axis": np.array([1], I32)})
    x = (rng.standard_normal((2, 3, 4, 5)) * 3).astype(np.float16)
    g.case("softmax_rank4", "Softmax", {"logits": x})
    g.case("sum_two_axes", "Sum", {"input": x, "axis": np.array([2, 3], I32)}, keep_dims=True)
    g.case("sum_all", "Sum", {"input": x, "axis": np.array([0, 1, 2, 3], I32)})
    g.case("sum_negative_axis", "Sum", {"input": x, "axis": np.array([-1], I32)})
    for n in (7, 21, 64):  # Rsqrt rounds twice on the tail past the last whole 8-lane packet
        y = (np.abs(rng.standard_normal(n)) * 5 + 0.01).astype(np.float16)
        g.case(f"rsqrt_{n}", "Rsqrt", {"x": y})
    z = (rng.standard_normal(300) * 3).astype(np.float16)
    z[:4] = [0, -0.0, -12, 12]
    g.case("elu", "Elu", {"features": z})
    g.case("selu", "Selu", {"features": z})
    m = (rng.standard_normal((4, 5, 37)) * 3).astype(np.float16)
    g.case("mean_last", "Mean", {"input": m, "axis": np.array([2], I32)})
    g.case("mean_two_axes", "Mean", {"input": m, "axis": np.array([1, 2], I32)}, keep_dims=True)
    g.case(
        "softmax_edges",
        "Softmax",
        {"logits": np.array([[0, 0], [60000, -60000], [np.inf, 1], [np.nan, 1]], np.float16)},
    )


# --- dilation ----------------------------------------------------------------------------------------------


def dilation(g: Group) -> None:
    rng = np.random.default_rng(18)
    x = rng.standard_normal((2, 7, 6, 3)).astype(F32)
    f = rng.standard_normal((3, 2, 3)).astype(F32)
    for padding in ("SAME", "VALID"):
        for strides, rates in (
            ([1, 1, 1, 1], [1, 1, 1, 1]),
            ([1, 2, 3, 1], [1, 1, 1, 1]),
            ([1, 1, 2, 1], [1, 2, 2, 1]),
        ):
            name = f"{padding.lower()}_s{strides[1]}{strides[2]}_r{rates[1]}{rates[2]}"
            g.case(
                name, "Dilation2D", {"input": x, "filter": f}, strides=strides, rates=rates, padding=padding
            )
    odd = x.copy()
    odd[0, 1, 1, 0] = np.nan
    odd[1, 2, 3, 1] = -np.inf
    g.case(
        "nan_inf", "Dilation2D", {"input": odd, "filter": f}, strides=[1] * 4, rates=[1] * 4, padding="SAME"
    )
    g.case(
        "big_rate",
        "Dilation2D",
        {"input": x[:, :3, :3], "filter": f},
        strides=[1, 1, 1, 1],
        rates=[1, 4, 4, 1],
        padding="SAME",
    )
    g.case(
        "int32",
        "Dilation2D",
        {
            "input": rng.integers(-50, 50, (1, 5, 5, 2)).astype(I32),
            "filter": rng.integers(-5, 5, (2, 2, 2)).astype(I32),
        },
        strides=[1] * 4,
        rates=[1] * 4,
        padding="VALID",
    )
    g.case(
        "double",
        "Dilation2D",
        {"input": x.astype(F64), "filter": f.astype(F64)},
        strides=[1, 2, 2, 1],
        rates=[1] * 4,
        padding="SAME",
    )
    g.case(
        "depth_mismatch",
        "Dilation2D",
        {"input": x, "filter": f[:, :, :2]},
        strides=[1] * 4,
        rates=[1] * 4,
        padding="SAME",
    )


# --- linalg_extra ------------------------------------------------------------------------------------------


def linalg_extra(g: Group) -> None:
    rng = np.random.default_rng(19)
    a = rng.standard_normal((2, 2, 3, 3))
    c = a + 1j * rng.standard_normal(a.shape)
    for name, x in (("f32", a.astype(F32)), ("f64", a), ("c64", c.astype(np.complex64)), ("c128", c)):
        g.case(f"lu_{name}", "Lu", {"input": x})
    g.case("lu_i64", "Lu", {"input": a[0, 0]}, output_idx_type=tf.int64)
    g.case("lu_big", "Lu", {"input": rng.standard_normal((20, 20)).astype(F32)})
    g.case("lu_one", "Lu", {"input": np.array([[[2.5]]], F32)})
    g.case("lu_empty", "Lu", {"input": np.zeros((2, 0, 0), F32)})
    g.case("lu_empty_batch", "Lu", {"input": np.zeros((0, 3, 3), F32)})
    g.case("lu_ties", "Lu", {"input": np.array([[1, 2, 3], [-1, 5, 1], [1, 0, 4]], F64)})
    g.case("lu_singular", "Lu", {"input": np.array([[1, 2], [2, 4]], F32)})
    g.case("lu_not_square", "Lu", {"input": np.zeros((3, 2), F32)})
    g.case("lu_vector", "Lu", {"input": np.zeros(3, F32)})

    # TridiagonalSolve: [..., 3, M] diagonals (superdiagonal, diagonal, subdiagonal), [..., M, K] rhs
    d = rng.standard_normal((2, 3, 5))
    d[:, 1] += 4 * np.sign(d[:, 1])
    rhs = rng.standard_normal((2, 5, 2))
    weak = rng.standard_normal((3, 5))  # no diagonal dominance: the two algorithms round differently
    weak_rhs = rng.standard_normal((5, 2))
    needs_pivot = np.array([[1, 1, 1, 0], [0, 1, 1, 2], [0, 1, 1, 1]], F64)  # Thomas meets a zero pivot
    singular = np.array([[1, 0, 0], [1, 1, 0], [0, 1, 0]], F64)  # [[1, 1, 0], [1, 1, 0], [0, 0, 0]]
    cd = d + 1j * rng.standard_normal(d.shape)
    cases: tuple[tuple[str, Any, Any], ...] = (
        ("f64", d, rhs),
        ("f32", d.astype(F32), rhs.astype(F32)),
        ("c128", cd, rhs + 1j),
        ("c64", cd.astype(np.complex64), (rhs - 2j).astype(np.complex64)),
        ("weak", weak, weak_rhs),
        ("needs_pivot", needs_pivot, np.arange(8, dtype=F64).reshape(4, 2)),
        ("singular", singular, np.ones((3, 1))),
        ("one", np.array([[7.0], [2.0], [5.0]]), np.array([[3.0, -1.0]])),
        ("one_zero", np.array([[7.0], [0.0], [5.0]]), np.array([[3.0, -1.0]])),
        ("two", np.array([[1.0, 9.0], [0.5, 2.0], [9.0, 3.0]]), np.array([[1.0], [2.0]])),
        ("empty", np.zeros((3, 0)), np.zeros((0, 2))),
        ("no_rhs", d[0], np.zeros((5, 0))),
        ("four_rows", np.zeros((4, 3)), np.zeros((3, 1))),
        ("mismatch", d[0], np.zeros((4, 1))),
        ("batch_mismatch", d, rhs[:1]),
        ("rank1", np.zeros(3), np.zeros((1, 1))),
    )
    for name, diags, b in cases:
        for pivot in (True, False):
            g.case(
                f"tri_{name}_{int(pivot)}",
                "TridiagonalSolve",
                {"diagonals": diags, "rhs": b},
                partial_pivoting=pivot,
            )
    g.case(
        "tri_perturb",
        "TridiagonalSolve",
        {"diagonals": singular, "rhs": np.ones((3, 1))},
        partial_pivoting=True,
        perturb_singular=True,
    )
    g.case(
        "tri_perturb_regular",
        "TridiagonalSolve",
        {"diagonals": d, "rhs": rhs},
        partial_pivoting=True,
        perturb_singular=True,
    )
    # (perturb_singular without partial_pivoting is refused when the graph is loaded: tested on its own)

    # MatrixSquareRoot: symmetric positive definite, a general matrix with complex eigenvalue pairs
    spd = a @ np.swapaxes(a, -1, -2) + 0.5 * np.eye(3)
    rot = np.array([[1.0, -2.0, 0.5], [2.0, 1.0, 0.0], [0.3, 0.2, 3.0]])
    for name, x in (
        ("spd_f64", spd),
        ("spd_f32", spd.astype(F32)),
        ("general", rot),
        ("upper", np.array([[4.0, 1.0, 2.0], [0.0, 9.0, -3.0], [0.0, 0.0, 1.0]])),
        ("complex", c[0, 0] + 4 * np.eye(3)),
        ("complex64", (c[0, 0] + 4 * np.eye(3)).astype(np.complex64)),
        ("f32_batch", rng.standard_normal((2, 4, 4)).astype(F32) + 3 * np.eye(4, dtype=F32)),
        ("one", np.array([[9.0]], F32)),
        ("empty", np.zeros((2, 0, 0), F32)),
        ("negative", np.array([[-4.0, 0.0], [0.0, 1.0]])),
        # defective: one eigenvector for a repeated eigenvalue
        ("jordan", np.array([[1.0, 1.0], [0.0, 1.0]])),
        ("jordan3", np.array([[4.0, 1.0, 0.0], [0.0, 4.0, 1.0], [0.0, 0.0, 4.0]], F32)),
        ("jordan_batch", np.stack([rot[:2, :2], np.array([[2.0, 1.0], [0.0, 2.0]])])),
        ("not_square", np.zeros((2, 3), F32)),
        ("vector", np.zeros(3, F32)),
    ):
        g.case(f"sqrtm_{name}", "MatrixSquareRoot", {"input": x})

    # MatrixLogarithm (complex types only)
    for name, x in (
        ("c128", (spd[0] + 0.2j * a[0]).astype(np.complex128)),
        ("c64", (spd[0, 0] + 0.1j * a[0, 0]).astype(np.complex64)),
        ("rotation", rot.astype(np.complex128)),
        ("jordan", np.array([[3.0, 1.0, 0.5], [0.0, 3.0, 1.0], [0.0, 0.0, 3.0]], np.complex128)),
        ("empty", np.zeros((0, 0), np.complex64)),
        ("not_square", np.zeros((2, 3), np.complex64)),
    ):
        g.case(f"logm_{name}", "MatrixLogarithm", {"input": x})

    # Eig: eigenvalues in no fixed order, eigenvectors up to a phase: the tests compare them as such
    for name, x, tout in (
        ("f32", a[0].astype(F32), tf.complex64),
        ("f64", a, tf.complex128),
        ("f64_5", rng.standard_normal((5, 5)), tf.complex128),
        ("c64", c[1].astype(np.complex64), tf.complex64),
        ("c128", c[0, 0], tf.complex128),
        ("symmetric", spd[0, 0], tf.complex128),
        ("one", np.array([[3.0]], F32), tf.complex64),
        ("empty", np.zeros((0, 0), F32), tf.complex64),
        ("not_square", np.zeros((2, 3), F32), tf.complex64),
    ):
        for v in (True, False):
            g.case(f"eig_{name}_{int(v)}", "Eig", {"input": x}, Tout=tout, compute_v=v)


# --- random_dists -------------------------------------------------------------------------------------------


def random_dists(g: Group) -> None:
    """Gamma, Poisson and binomial draws of the stateless ops, each sample its own rejection loop."""
    seed = np.array([7, -3], I64)
    alpha = np.array([0.5, 1.0, 2.5, 30.0, 0.01], F32)
    for name, dt in (("f32", F32), ("f64", F64), ("f16", np.float16)):
        g.case(
            f"gamma_{name}",
            "StatelessRandomGammaV2",
            {"shape": np.array([6, 5], I32), "seed": seed, "alpha": alpha.astype(dt)},
        )
    g.case(
        "gamma_matrix_alpha",
        "StatelessRandomGammaV2",
        {
            "shape": np.array([3, 2, 2], I64),
            "seed": np.array([1, 2], I32),
            "alpha": np.array([[0.3, 4], [1, 9]], F64),
        },
    )
    g.case(
        "gamma_scalar_alpha",
        "StatelessRandomGammaV2",
        {"shape": np.array([20], I32), "seed": seed, "alpha": np.array(0.9, F32)},
    )
    g.case(
        "gamma_empty",
        "StatelessRandomGammaV2",
        {"shape": np.array([0, 5], I32), "seed": seed, "alpha": alpha},
    )
    g.case(
        "gamma_bad_shape",
        "StatelessRandomGammaV2",
        {"shape": np.array([6, 4], I32), "seed": seed, "alpha": alpha},
    )
    g.case(
        "gamma_bad_seed",
        "StatelessRandomGammaV2",
        {"shape": np.array([5], I32), "seed": np.array([1, 2, 3], I64), "alpha": alpha},
    )
    for alg in (1, 3):
        g.case(
            f"gamma_v3_{alg}",
            "StatelessRandomGammaV3",
            {
                "shape": np.array([4, 5], I32),
                "key": np.array([12345], np.uint64),
                "counter": np.array([2**40 + 3, 9], np.uint64),
                "alg": np.array(alg, I32),
                "alpha": alpha,
            },
        )
    g.case(
        "gamma_v3_bad_alg",
        "StatelessRandomGammaV3",
        {
            "shape": np.array([5], I32),
            "key": np.array([1], np.uint64),
            "counter": np.array([0, 0], np.uint64),
            "alg": np.array(2, I32),
            "alpha": alpha,
        },
    )
    lam = np.array([0.5, 3.0, 9.99, 10.0, 25.0, 1000.0, 0.0], F32)
    for name, rate, out in (
        ("f32", lam, tf.float32),
        ("f64_i64", lam.astype(F64), tf.int64),
        ("f32_i32", lam, tf.int32),
        ("f16", lam.astype(np.float16), tf.float16),
        ("i32_f64", np.array([0, 1, 5, 12, 300], I32), tf.float64),
    ):
        g.case(
            f"poisson_{name}",
            "StatelessRandomPoisson",
            {"shape": np.array([4, rate.size], I32), "seed": seed, "lam": rate},
            dtype=out,
        )
    g.case(
        "poisson_scalar_lam",
        "StatelessRandomPoisson",
        {"shape": np.array([3, 4], I32), "seed": np.array([5, 6], I32), "lam": np.array(42.5, F64)},
        dtype=tf.float64,
    )
    g.case(
        "poisson_bad_shape",
        "StatelessRandomPoisson",
        {"shape": np.array([4, 3], I32), "seed": seed, "lam": lam},
        dtype=tf.float32,
    )
    counts = np.array([0, 5, 20, 100, 1000, 40, 7, 3], F32)
    probs = np.array([0.3, 0.0, 0.6, 0.02, 0.5, 0.95, 1.0, np.nan], F32)
    for name, c, p, out in (
        ("f32", counts, probs, tf.float32),
        ("f64_i32", counts.astype(F64), probs.astype(F64), tf.int32),
        ("f32_i64", counts, probs, tf.int64),
        ("f16", counts.astype(np.float16), probs.astype(np.float16), tf.float16),
    ):
        g.case(
            f"binomial_{name}",
            "StatelessRandomBinomial",
            {"shape": np.array([3, 8], I32), "seed": seed, "counts": c, "probs": p},
            dtype=out,
        )
    g.case(
        "binomial_broadcast",
        "StatelessRandomBinomial",
        {
            "shape": np.array([2, 3, 4], I32),
            "seed": np.array([-1, 99], I64),
            "counts": np.array([[10.0], [50.0], [400.0]], F64),
            "probs": np.array([0.1, 0.45, 0.55, 0.9], F64),
        },
        dtype=tf.float64,
    )
    g.case(
        "binomial_bad_broadcast",
        "StatelessRandomBinomial",
        {"shape": np.array([3], I32), "seed": seed, "counts": counts[:3], "probs": probs[:2]},
        dtype=tf.float32,
    )
    g.case(
        "binomial_bad_shape",
        "StatelessRandomBinomial",
        {"shape": np.array([8, 3], I32), "seed": seed, "counts": counts, "probs": probs},
        dtype=tf.float32,
    )


# --- special ------------------------------------------------------------------------------------------------


def special(g: Group) -> None:
    """Bessel functions and Cephes' integrals on each branch of their fits, their edges, and beyond."""
    x = np.array(
        [-np.inf, -3e9, -20, -5.5, -1, -0.5, -0.0, 0, 1e-7, 1e-3, 0.3, 0.5, 0.9999, 1, 1.5, 1.6, 1.9999, 2,
         2.5, 3.2, 3.3, 4.9, 5, 5.1, 6.2, 6.3, 7.99, 8, 8.01, 12, 17, 33, 63, 65, 100, 700, 36975, 1e10,
         np.inf, np.nan]
    )  # fmt: skip
    ops = ("BesselI0", "BesselI0e", "BesselI1", "BesselI1e", "BesselK0", "BesselK0e", "BesselK1",
           "BesselK1e", "BesselJ0", "BesselJ1", "BesselY0", "BesselY1", "Dawsn", "Expint", "FresnelCos",
           "FresnelSin", "Spence")  # fmt: skip
    for op in ops:
        for name, dt in (("f32", F32), ("f64", F64)):
            g.case(f"{op}_{name}", op, {"x": x.astype(dt)})
    g.case("BesselJ0_f16", "BesselJ0", {"x": x.astype(np.float16)})
    g.case("BesselI1e_matrix", "BesselI1e", {"x": x[:36].reshape(6, 6).astype(F32)})


# --- strings_extra ------------------------------------------------------------------------------------------


def strings_extra(g: Group) -> None:
    """UnicodeTranscode, DecodeCompressed and DecodeJSONExample."""
    import gzip
    import zlib

    texts = S("hello", "", "日本語 ü", "a\x01b", "x\xe6\x97y", "\xed\xa0\x80z", "\xff")
    for inp in ("UTF-8", "ISO-8859-1", "US-ASCII"):
        for out in ("UTF-8", "UTF-16-BE", "UTF-32-BE"):
            name = f"{inp}_{out}".replace("-", "").lower()
            g.case(
                f"transcode_{name}",
                "UnicodeTranscode",
                {"input": texts.reshape(7, 1) if out == "UTF-8" else texts},
                input_encoding=inp,
                output_encoding=out,
                errors="replace",
                replacement_char=0xFFFD,
            )
    utf16 = S("héllo".encode("utf-16-be"), "\U0001f600".encode("utf-16-le"), b"\xd8\x00a", b"a")
    for inp in ("UTF-16-BE", "UTF-16LE", "utf-32-be"):
        g.case(
            f"transcode_from_{inp.replace('-', '').lower()}",
            "UnicodeTranscode",
            {"input": utf16 if "16" in inp else S("é".encode("utf-32-be"), b"\x00\x11\x00\x00")},
            input_encoding=inp,
            output_encoding="UTF-8",
            errors="replace",
            replacement_char=ord("?"),
        )
    for policy in ("replace", "ignore", "strict"):
        for controls in (False, True):
            g.case(
                f"transcode_{policy}_{int(controls)}",
                "UnicodeTranscode",
                {"input": texts if policy != "strict" else S("ok", "a\x01b")},
                input_encoding="UTF-8",
                output_encoding="UTF-8",
                errors=policy,
                replacement_char=ord("*"),
                replace_control_characters=controls,
            )
    g.case(
        "transcode_strict_malformed",
        "UnicodeTranscode",
        {"input": S("ok", "x\xe6\x97y")},
        input_encoding="UTF-8",
        output_encoding="UTF-16-BE",
        errors="strict",
        replacement_char=0xFFFD,
    )
    g.case(
        "transcode_scalar",
        "UnicodeTranscode",
        {"input": np.array("ça".encode("latin-1"), object)},
        input_encoding="latin1",
        output_encoding="UTF-8",
        errors="replace",
        replacement_char=0xFFFD,
    )

    payload = [b"", b"abc" * 50, bytes(range(256)), "日本".encode()]
    for kind, pack in (
        ("ZLIB", zlib.compress),
        ("GZIP", lambda b: gzip.compress(b, mtime=0)),
        ("NONE", lambda b: b),
        ("", lambda b: b),
    ):
        packed = S(*(pack(p) for p in payload)).reshape(2, 2)
        g.case(
            f"decompress_{kind.lower() or 'empty'}",
            "DecodeCompressed",
            {"bytes": packed},
            compression_type=kind,
        )
    g.case(
        "decompress_raw_deflate",
        "DecodeCompressed",
        {"bytes": S(zlib.compress(b"abc")[2:-4])},
        compression_type="ZLIB",
    )
    g.case("decompress_lowercase", "DecodeCompressed", {"bytes": S(b"x")}, compression_type="zlib")
    g.case("decompress_garbage", "DecodeCompressed", {"bytes": S(b"not zlib")}, compression_type="ZLIB")
    g.case(
        "decompress_truncated",
        "DecodeCompressed",
        {"bytes": S(zlib.compress(b"abcdef" * 9)[:-6])},
        compression_type="ZLIB",
    )
    g.case(
        "decompress_gzip_as_zlib",
        "DecodeCompressed",
        {"bytes": S(gzip.compress(b"abc", mtime=0))},
        compression_type="ZLIB",
    )
    g.case(
        "decompress_scalar",
        "DecodeCompressed",
        {"bytes": np.array(zlib.compress(b"one"), object)},
        compression_type="ZLIB",
    )

    examples = S(
        '{"features": {"feature": {"age": {"int64List": {"value": ["30", 4]}}, '
        '"name": {"bytesList": {"value": ["aGk=", ""]}}, "w": {"floatList": {"value": [0.5, -1e30, 3]}}}}}',
        "{}",
        '{"features": {}}',
        '{"features": {"feature": {"z": {"int64List": {}}, "a": {"floatList": {"value": []}}, "m": {}}}}',
    )
    g.case("json_examples", "DecodeJSONExample", {"json_examples": examples})
    g.case("json_matrix", "DecodeJSONExample", {"json_examples": examples.reshape(2, 2)})
    g.case("json_bad_syntax", "DecodeJSONExample", {"json_examples": S('{"features": ')})
    g.case("json_unknown_field", "DecodeJSONExample", {"json_examples": S('{"feature": {}}')})
    g.case(
        "json_wrong_type",
        "DecodeJSONExample",
        {"json_examples": S('{"features": {"feature": {"a": {"int64List": {"value": ["x"]}}}}}')},
    )


GROUPS: dict[str, Callable[[Group], None]] = {
    "cross": cross,
    "sparse": sparse,
    "ragged": ragged,
    "sets": sets,
    "csv": csv,
    "segment_join": segment_join,
    "full_int": full_int,
    "sequence_features": sequence_features,
    "serialized_tensors": serialized_tensors,
    "half_sigmoid": half_sigmoid,
    "half": half,
    "half_softplus": half_softplus,
    "count_sparse": count_sparse,
    "sparse_minmax": sparse_minmax,
    "padded_raw": padded_raw,
    "gamma": gamma,
    "fractional_pool": fractional_pool,
    "shuffle": shuffle,
    "param_truncated": param_truncated,
    "jpeg_crop": jpeg_crop,
    "set_size": set_size,
    "dilation": dilation,
    "linalg_extra": linalg_extra,
    "random_dists": random_dists,
    "special": special,
    "strings_extra": strings_extra,
}


def main(groups: dict[str, Callable[[Group], None]] = GROUPS) -> None:
    """Writes the groups named on the command line (all of ``groups`` without a name)."""
    for name in sys.argv[1:] or list(groups):
        g = Group(name)
        groups[name](g)
        g.write()


if __name__ == "__main__":
    main()
