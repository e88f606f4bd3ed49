"""MutableDenseHashTableV2 with LookupTableInsertV2, FindV2, RemoveV2, SizeV2, ExportV2 and ImportV2
(runtime/kernels/lookup_ops.py) against TensorFlow 2.21 (tools/make_dense_table_fixture.py): four tables
(int64, string and int32-pair keys; scalar and vector values) driven through the same script of steps, each
step's outputs (the exported buckets included, bucket for bucket) or TensorFlow's error."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support import _unstore

from poolserve import Session, load_saved_model
from poolserve.runtime.errors import InvalidArgumentError, OpError
from poolserve.runtime.graph import load_graph_def

FOLDER = Path(__file__).parent / "fixtures" / "kernels"
SAVED = Path(__file__).parent / "fixtures" / "saved_models"


def test_a_dense_hash_table_saved_model_matches_tensorflow() -> None:
    with np.load(SAVED / "tf2_dense_table.npz") as data:
        recorded = {k: data[k] for k in data.files}
    model = load_saved_model(SAVED / "tf2_dense_table")  # its checkpoint restores the buckets
    try:
        got = model.run({"x": recorded["in:x"]})
    finally:
        model.close()
    assert sorted(got) == ["size", "values"]
    for key in got:
        want = recorded[f"out:{key}"]
        assert np.asarray(got[key]).dtype == want.dtype
        np.testing.assert_array_equal(got[key], want)


def test_a_script_of_steps_matches_tensorflow_step_by_step() -> None:
    steps = json.loads((FOLDER / "dense_table.json").read_text())
    with np.load(FOLDER / "dense_table.npz") as data:
        arrays = {k: _unstore(data[k]) for k in data.files}
    checked = 0
    with Session(load_graph_def(FOLDER / "dense_table.pb")) as sess:
        for step in steps:
            i = step["index"]
            feeds = {k: arrays[f"{i}/in/{k}"] for k in step["feeds"]}
            where = f"step {i} ({step['node']})"
            if "error" in step:
                cls, message = step["error"]
                with pytest.raises(OpError) as info:
                    sess.run(step["fetches"] or step["node"], feeds)
                assert type(info.value).__name__ == cls, where
                assert message in str(info.value), f"{where}: {info.value}"
                continue
            got = sess.run(step["fetches"], feeds) if step["fetches"] else sess.run(step["node"], feeds)
            for k, g in zip(step["fetches"], got or [], strict=True):
                want = arrays[f"{i}/out/{k}"]
                g = np.asarray(g)
                assert (g.dtype, g.shape) == (want.dtype, want.shape), where
                assert g.tolist() == want.tolist(), f"{where} {k}"
            checked += 1
    assert checked > 100


def test_tables_refuse_what_tensorflow_refuses_at_creation() -> None:
    from poolserve.runtime.builder import GraphBuilder

    for empty, deleted, attrs, message in (
        (-1, -1, {}, "Empty and deleted keys cannot be equal"),
        (-1, -2, {"initial_num_buckets": 6}, "Number of buckets must be at least 4 and a power of 2, got: 6"),
        (-1, -2, {"max_load_factor": 1.5}, "max_load_factor must be between 0 and 1"),
    ):
        b = GraphBuilder()
        table = b.op(
            "MutableDenseHashTableV2",
            [b.constant(np.int64(empty), dtype=np.int64), b.constant(np.int64(deleted), dtype=np.int64)],
            {"key_dtype": np.int64, "value_dtype": np.float32, **attrs},
            name="table",
        )
        b.op("LookupTableSizeV2", [table], name="size")
        with Session(b.graph_def) as sess, pytest.raises(InvalidArgumentError, match=message):
            sess.run("size:0")
