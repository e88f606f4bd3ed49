"""Lookup tables. Expected values are TensorFlow 2.21's: the SavedModel fixture tf2_lookup
(tools/make_lookup_fixture.py) holds Keras' StringLookup and IntegerLookup layers and what TensorFlow
computed with them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from poolserve import GraphBuilder, Session, load_saved_model
from poolserve.runtime.errors import FailedPreconditionError, NotFoundError, UnimplementedError
from poolserve.runtime.graph import Graph

FIXTURES = Path(__file__).parent / "fixtures" / "saved_models"
STRING = np.dtype(object)


def strings(*words: str) -> Any:
    out = np.empty(len(words), dtype=object)
    out[:] = [w.encode() for w in words]
    return out


def table_graph(
    key_dtype: Any, value_dtype: Any, keys: Any, values: Any, default: Any
) -> tuple[Graph, dict[str, str]]:
    b = GraphBuilder()
    attrs = {"key_dtype": key_dtype, "value_dtype": value_dtype, "shared_name": "t"}
    table = b.op("HashTableV2", [], attrs, name="table")
    k, v = b.constant(keys, dtype=key_dtype), b.constant(values, dtype=value_dtype)
    b.op(
        "LookupTableImportV2",
        [table, k, v],
        {"Tin": key_dtype, "Tout": value_dtype},
        name="init",
        num_outputs=0,
    )
    x = b.placeholder("x", key_dtype, None)
    d = b.constant(np.asarray(default), dtype=value_dtype)
    find = b.op("LookupTableFindV2", [table, x, d], {"Tin": key_dtype, "Tout": value_dtype}, name="find")
    size = b.op("LookupTableSizeV2", [table], name="size")
    exported = b.op(
        "LookupTableExportV2",
        [table],
        {"Tkeys": key_dtype, "Tvalues": value_dtype},
        name="export",
        num_outputs=2,
    )
    return Graph(b.graph_def), {"find": find, "size": size, "keys": exported[0], "values": exported[1]}


def test_string_keys_find_their_values_and_the_default_for_the_rest():
    graph, t = table_graph(STRING, np.int64, strings("cat", "dog"), np.array([1, 2]), -1)
    with Session(graph) as sess:
        with pytest.raises(FailedPreconditionError, match="Table not initialized"):
            sess.run(t["find"], {"x:0": strings("cat")})
        sess.run("init")
        out = sess.run(t["find"], {"x:0": strings("dog", "", "cat", "Cat").reshape(2, 2)})
        np.testing.assert_array_equal(out, [[2, -1], [1, -1]])
        assert out.dtype == np.int64
        assert sess.run(t["size"]) == 2
        keys, values = sess.run([t["keys"], t["values"]])
        assert dict(zip(keys.tolist(), values.tolist(), strict=True)) == {b"cat": 1, b"dog": 2}


def test_numeric_keys_are_found_by_binary_search():
    keys = np.array([40, -3, 7, 11], np.int64)
    graph, t = table_graph(np.int64, np.float32, keys, np.array([0.5, 1.5, 2.5, 3.5]), 9.0)
    with Session(graph) as sess:
        sess.run("init")
        out = sess.run(t["find"], {"x:0": np.array([[7, 8, 40], [-3, 41, -4]], np.int64)})
        np.testing.assert_array_equal(out, np.array([[2.5, 9, 0.5], [1.5, 9, 9]], np.float32))


def test_a_vocabulary_file_fills_a_table(tmp_path: Path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("cat\t10\ndog\t20\nbird\t30\n")
    b = GraphBuilder()
    table = b.op("HashTableV2", [], {"key_dtype": STRING, "value_dtype": np.int64}, name="table")
    name = b.placeholder("filename", STRING, ())
    b.op(
        "InitializeTableFromTextFileV2",
        [table, name],
        {"key_index": 0, "value_index": -1, "vocab_size": 2, "delimiter": "\t", "offset": 5},
        name="init",
        num_outputs=0,
    )
    x = b.placeholder("x", STRING, None)
    d = b.constant(np.int64(-1), dtype=np.int64)
    find = b.op("LookupTableFindV2", [table, x, d], {"Tin": STRING, "Tout": np.int64}, name="find")
    with Session(Graph(b.graph_def)) as sess:
        with pytest.raises(NotFoundError, match="could not read the vocabulary file"):
            sess.run("init", {"filename:0": np.array(str(tmp_path / "none.txt").encode(), dtype=object)})
        sess.run("init", {"filename:0": np.array(str(vocab).encode(), dtype=object)})
        # the first column is the key, the line number (plus offset) the value; vocab_size stops at 2 lines
        np.testing.assert_array_equal(sess.run(find, {"x:0": strings("dog", "cat", "bird")}), [6, 5, -1])


def test_keras_lookup_layers_in_a_saved_model_match_tensorflow():
    with np.load(FIXTURES / "tf2_lookup.npz") as data:
        recorded = {k: data[k] for k in data.files}
    inputs = {"words": recorded["in:words"].astype(object), "ids": recorded["in:ids"]}
    model = load_saved_model(FIXTURES / "tf2_lookup")
    try:
        got = model.run(inputs)
    finally:
        model.close()
    want = {k.split(":", 1)[1]: v for k, v in recorded.items() if k.startswith("out:")}
    assert sorted(got) == sorted(want) == ["file_ids", "id_ids", "multi_hot", "word_ids"]
    for key, value in want.items():
        assert got[key].dtype == value.dtype, key
        np.testing.assert_array_equal(got[key], value, err_msg=key)


def test_remove_drops_keys_of_a_mutable_table_and_is_refused_by_an_initialized_one():
    b = GraphBuilder()
    attrs = {"key_dtype": np.int64, "value_dtype": np.float32}
    mutable = b.op("MutableHashTableV2", [], attrs, name="mutable")
    b.op("HashTableV2", [], attrs, name="fixed")
    keys = b.constant(np.array([1, 2, 3], np.int64), dtype=np.int64)
    values = b.constant(np.array([1, 2, 3], np.float32), dtype=np.float32)
    for table in ("mutable", "fixed"):
        op = "LookupTableInsertV2" if table == "mutable" else "LookupTableImportV2"
        b.op(
            op,
            [table, keys, values],
            {"Tin": np.int64, "Tout": np.float32},
            name=f"{table}_fill",
            num_outputs=0,
        )
        gone = b.constant(np.array([[1], [7]], np.int64), dtype=np.int64)
        b.op("LookupTableRemoveV2", [table, gone], {"Tin": np.int64}, name=f"{table}_remove", num_outputs=0)
    size = b.op("LookupTableSizeV2", [mutable], name="size")
    with Session(Graph(b.graph_def)) as sess:
        sess.run(["mutable_fill", "fixed_fill"])
        sess.run("mutable_remove")
        assert sess.run(size) == 2  # as TensorFlow 2.21: keys of any shape, missing ones ignored
        with pytest.raises(UnimplementedError, match="Remove not supported by InitializableLookupTable"):
            sess.run("fixed_remove")
