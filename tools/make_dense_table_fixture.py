"""Generates ``tests/fixtures/kernels/dense_table.{pb,json,npz}`` (dev only): MutableDenseHashTableV2 tables
driven through a script of steps, and what TensorFlow answered to each.

    /opt/tfenv/bin/python tools/make_dense_table_fixture.py

The GraphDef holds four tables (int64 -> float32, int64 -> int64[2], string -> int64, int32[2] -> float64)
created with 8 buckets, so inserts regrow them, and for each table LookupTableInsertV2, LookupTableFindV2,
LookupTableRemoveV2, LookupTableSizeV2, LookupTableExportV2 and LookupTableImportV2 nodes over Placeholders.
The script (a fixed seed) inserts, finds, removes and exports random keys, many of them colliding in the
buckets, and tries what TensorFlow refuses (the empty and deleted keys as keys, keys of the wrong shape or
type, a value of the wrong shape). ``dense_table.json`` lists the steps: the node run, the feeds, the
fetches and TensorFlow's error class and message; ``dense_table.npz`` holds the arrays fed and fetched.

It also writes ``tests/fixtures/saved_models/tf2_dense_table`` (``tf.lookup.experimental.DenseHashTable`` in
a ``tf.Module``: filled and thinned when made, restored from its checkpoint by a LookupTableImportV2) and
``tf2_dense_table.npz``, what its serving signature answered. Test: tests/test_kernels_dense_table.py.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
from make_op_case_fixtures import store

OUT_DIR = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "kernels"
SAVED_DIR = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "saved_models"
tf1 = tf.compat.v1

# name: key dtype, key shape, value dtype, value shape, empty key, deleted key
TABLES: dict[str, tuple[Any, tuple[int, ...], Any, tuple[int, ...], Any, Any]] = {
    "i64_f32": (np.int64, (), np.float32, (), np.int64(-1), np.int64(-2)),
    "i64_vec": (np.int64, (), np.int64, (2,), np.int64(-99), np.int64(2**62)),
    "str_i64": (object, (), np.int64, (), np.array(b"", object), np.array(b"<deleted>", object)),
    "pair_f64": (np.int32, (2,), np.float64, (), np.array([-9, -9], np.int32), np.array([-8, -8], np.int32)),
}


def tf_dtype(dtype: Any) -> Any:
    return tf.string if dtype is object else tf.as_dtype(dtype)


def build() -> tf.Graph:
    graph = tf.Graph()
    with graph.as_default():
        for name, (kd, _, vd, vs, empty, deleted) in TABLES.items():
            table = tf.raw_ops.MutableDenseHashTableV2(
                empty_key=tf.constant(empty, tf_dtype(kd)),
                deleted_key=tf.constant(deleted, tf_dtype(kd)),
                value_dtype=tf_dtype(vd),
                value_shape=list(vs),
                initial_num_buckets=8,
                max_load_factor=0.5,
                shared_name=name,
                name=name,
            )

            def ph(what: str, dtype: Any, table_name: str = name) -> Any:
                return tf1.placeholder(tf_dtype(dtype), None, name=f"{table_name}_{what}")

            keys, values, default = ph("keys", kd), ph("values", vd), ph("default", vd)
            tf.raw_ops.LookupTableInsertV2(
                table_handle=table, keys=keys, values=values, name=f"{name}_insert"
            )
            tf.raw_ops.LookupTableFindV2(
                table_handle=table, keys=keys, default_value=default, name=f"{name}_find"
            )
            tf.raw_ops.LookupTableRemoveV2(table_handle=table, keys=keys, name=f"{name}_remove")
            tf.raw_ops.LookupTableSizeV2(table_handle=table, name=f"{name}_size")
            tf.raw_ops.LookupTableExportV2(
                table_handle=table, Tkeys=tf_dtype(kd), Tvalues=tf_dtype(vd), name=f"{name}_export"
            )
            tf.raw_ops.LookupTableImportV2(
                table_handle=table, keys=keys, values=values, name=f"{name}_import"
            )
    return graph


def make_keys(name: str, rng: np.random.Generator, n: int) -> np.ndarray:
    kd, ks = TABLES[name][:2]
    if kd is object:
        return np.array([f"w{i}".encode() for i in rng.integers(0, 40, n)], object)
    if ks:
        return rng.integers(-3, 4, (n, *ks)).astype(kd)
    # multiples of 8 collide in 8 buckets; negatives hash as huge unsigned numbers
    return (rng.integers(-6, 40, n) * rng.choice([1, 8, 16], n)).astype(kd)


def make_values(name: str, rng: np.random.Generator, n: int) -> np.ndarray:
    vd, vs = TABLES[name][2:4]
    return rng.integers(-100, 100, (n, *vs)).astype(vd)


def script(rng: np.random.Generator) -> list[tuple[str, str, dict[str, np.ndarray]]]:
    """(table, node suffix, feeds by placeholder suffix)."""
    steps: list[tuple[str, str, dict[str, np.ndarray]]] = []
    for name in TABLES:
        empty, deleted = TABLES[name][4], TABLES[name][5]
        vd, vs = TABLES[name][2:4]
        default = np.full(vs, -7, vd)
        steps.append((name, "size", {}))
        steps.append((name, "find", {"keys": make_keys(name, rng, 3), "default": default}))
        for _ in range(14):
            n = int(rng.integers(1, 9))
            keys = make_keys(name, rng, n)
            kind = rng.choice(["insert", "insert", "find", "remove", "size"])
            if kind == "insert":
                steps.append((name, "insert", {"keys": keys, "values": make_values(name, rng, n)}))
            elif kind == "find":
                steps.append((name, "find", {"keys": keys, "default": default}))
            elif kind == "remove":
                steps.append((name, "remove", {"keys": keys}))
            else:
                steps.append((name, "size", {}))
            steps.append((name, "find", {"keys": make_keys(name, rng, 12), "default": default}))
        steps.append((name, "export", {}))
        steps.append((name, "size", {}))
        # refused
        one_key = np.asarray(empty).reshape(1, *TABLES[name][1])
        steps.append((name, "insert", {"keys": one_key, "values": make_values(name, rng, 1)}))
        steps.append(
            (name, "find", {"keys": np.asarray(deleted).reshape(1, *TABLES[name][1]), "default": default})
        )
        steps.append((name, "remove", {"keys": one_key}))
        steps.append((name, "insert", {"keys": make_keys(name, rng, 2), "values": make_values(name, rng, 3)}))
        steps.append(
            (
                name,
                "find",
                {
                    "keys": make_keys(name, rng, 4).reshape(2, 2, -1).squeeze(-1)
                    if not TABLES[name][1]
                    else make_keys(name, rng, 4)[:, :1],
                    "default": default,
                },
            )
        )
        steps.append((name, "find", {"keys": make_keys(name, rng, 2), "default": np.full((5, *vs), 1, vd)}))
        steps.append((name, "find", {"keys": make_keys(name, rng, 2), "default": np.full((2, *vs), 1, vd)}))
        # a scalar key
        steps.append((name, "find", {"keys": make_keys(name, rng, 1)[0], "default": default}))
    # import what was exported: the buckets as they are
    return steps


class DenseModule(tf.Module):
    def __init__(self) -> None:
        self.table = tf.lookup.experimental.DenseHashTable(
            key_dtype=tf.int64,
            value_dtype=tf.float32,
            default_value=-1.0,
            empty_key=-1,
            deleted_key=-2,
            initial_num_buckets=16,
        )
        self.table.insert(tf.range(0, 120, 7, dtype=tf.int64), tf.range(0.5, 18.0, 1.0))
        self.table.remove(tf.constant([14, 35, 1000], tf.int64))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int64)])
    def serve(self, x: Any) -> Any:
        return {"values": self.table.lookup(x), "size": self.table.size()}


def saved_model() -> None:
    path = SAVED_DIR / "tf2_dense_table"
    shutil.rmtree(path, ignore_errors=True)
    module = DenseModule()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    x = np.arange(-3, 130, 5, dtype=np.int64)
    out = tf.saved_model.load(str(path)).signatures["serving_default"](x=tf.constant(x))
    np.savez(
        SAVED_DIR / "tf2_dense_table.npz", **{"in:x": x}, **{f"out:{k}": v.numpy() for k, v in out.items()}
    )


def main() -> None:
    saved_model()
    rng = np.random.default_rng(31)
    graph = build()
    steps = script(rng)
    arrays: dict[str, np.ndarray] = {}
    meta: list[dict[str, Any]] = []
    with tf1.Session(graph=graph) as sess:
        for i, (name, what, feeds) in enumerate(steps):
            node = graph.get_operation_by_name(f"{name}_{what}")
            fetches = [t.name for t in node.outputs] if node.outputs else [node.name]
            feed_dict = {f"{name}_{k}:0": v for k, v in feeds.items()}
            step: dict[str, Any] = {
                "index": str(i),
                "node": node.name,
                "feeds": sorted(feed_dict),
                "fetches": [t.name for t in node.outputs],
            }
            for k, v in feed_dict.items():
                arrays[f"{i}/in/{k}"] = store(np.array(v))
            try:
                out = sess.run(fetches, feed_dict)
            except tf.errors.OpError as e:
                lines = [x for x in e.message.split("\n\t [[")[0].splitlines() if x.strip()]
                step["error"] = [type(e).__name__, lines[-1]]
            else:
                for k, v in zip(step["fetches"], out if node.outputs else [], strict=False):
                    arrays[f"{i}/out/{k}"] = store(np.array(v))  # a copy: see below
                if what == "export":  # import the exported buckets back: the next steps see them
                    # TensorFlow hands out its bucket tensors and, imported, writes into the arrays fed:
                    # copies, or later steps would change what is recorded here
                    keys, values = np.array(out[0]), np.array(out[1])
                    meta.append(step)
                    step = {
                        "index": f"{i}i",
                        "node": f"{name}_import",
                        "feeds": [f"{name}_keys:0", f"{name}_values:0"],
                        "fetches": [],
                    }
                    arrays[f"{i}i/in/{name}_keys:0"] = store(keys.copy())
                    arrays[f"{i}i/in/{name}_values:0"] = store(values.copy())
                    sess.run(f"{name}_import", {f"{name}_keys:0": keys, f"{name}_values:0": values})
            meta.append(step)
    (OUT_DIR / "dense_table.pb").write_bytes(graph.as_graph_def().SerializeToString(deterministic=True))
    np.savez_compressed(OUT_DIR / "dense_table.npz", **arrays)
    (OUT_DIR / "dense_table.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"{len(meta)} steps, {sum('error' in m for m in meta)} refused")


if __name__ == "__main__":
    main()
