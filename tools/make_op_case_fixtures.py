"""Generates single-op fixtures under ``tests/fixtures/kernels/cases`` (dev only): for each group, one
GraphDef holding one ``tf.raw_ops`` node per case over Placeholders, and what TensorFlow computed for it.

    /opt/tfenv/bin/python tools/make_op_case_fixtures.py [group ...]

Writes ``<group>.pb``, ``<group>.npz`` (``<case>/in/<tensor>`` fed, ``<case>/out/<tensor>`` fetched) and
``<group>.json`` (per case: its feeds, its fetches, and TensorFlow's error class and message when it refused
the inputs). Placeholders have unknown shapes, so inputs TensorFlow's shape functions would refuse reach the
kernel. Strings are stored as numpy bytes arrays (``S``). Groups: ``cross`` (SparseCross, SparseCrossHashed,
SparseCrossV2, Fingerprint), ``sparse`` (sparse reductions, SparseAdd, SparseConcat, SparseSlice,
SparseSoftmax), ``ragged`` (RaggedRange, RaggedGather, RaggedTensorToSparse), ``sets`` (set operations,
UnravelIndex, AdjustHue, AdjustSaturation). Tests: tests/test_kernels_<group>_cases.py.
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
                t = tf1.placeholder(dtype, shape=None, name=f"{case}_in{len(feeds)}")
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
                    arrays[f"{case}/in/{k}"] = store(v)
                try:
                    outs = sess.run(meta["fetches"], feeds)
                except tf.errors.OpError as e:
                    meta["error"] = [type(e).__name__, e.message.split("\n\t [[")[0].splitlines()[-1]]
                    continue
                for k, v in zip(meta["fetches"], outs, strict=True):
                    arrays[f"{case}/out/{k}"] = store(np.asarray(v))
        graph_def = self.graph.as_graph_def()
        OUT_DIR.mkdir(parents=True, exist_ok=True)
        (OUT_DIR / f"{self.name}.pb").write_bytes(graph_def.SerializeToString(deterministic=True))
        np.savez_compressed(OUT_DIR / f"{self.name}.npz", **arrays)
        (OUT_DIR / f"{self.name}.json").write_text(json.dumps(self.cases, indent=1, sort_keys=True) + "\n")
        errors = sum("error" in m for m in self.cases.values())
        print(f"{self.name}: {len(self.cases)} cases, {errors} refused")


def store(arr: np.ndarray) -> np.ndarray:
    if arr.dtype == object:
        out = np.array([bytes(x) for x in arr.ravel().tolist()], dtype="S")
        assert all(not x.endswith(b"\0") for x in out.tolist()), "numpy S arrays drop trailing NULs"
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


GROUPS: dict[str, Callable[[Group], None]] = {"cross": cross}


def main() -> None:
    for name in sys.argv[1:] or list(GROUPS):
        g = Group(name)
        GROUPS[name](g)
        g.write()


if __name__ == "__main__":
    main()
