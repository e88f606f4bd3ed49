"""The embedding-lookup pass of the graph optimizer (runtime/gather_fusion.py): Keras 3's negative-index wrap
before a GatherV2 joins the GatherV2, with the same results and errors."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from support import TRACED, rewrite_config, run_traced

from poolserve.proto import config_pb2
from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.graph import load_graph_def
from poolserve.runtime.session import Session

F32 = np.float32
I32 = np.int32
WRAP_OPS = ("Less", "AddV2", "SelectV2")
OFF = rewrite_config(disable_meta_optimizer=True)
REALISTIC = Path(__file__).parent / "fixtures" / "models" / "realistic"


def keras_take(
    b: GraphBuilder, table: str, ids: str, n: int, prefix: str, zero: int = 0, index_type: type = I32
) -> str:
    """``keras.ops.take(table, ids, axis=0)`` as Keras 3 freezes it: negative ids count from ``n``."""
    t = {"T": index_type}
    less = b.op("Less", [ids, b.constant(np.array(zero, index_type))], t, name=f"{prefix}/Less")
    add = b.op("AddV2", [ids, b.constant(np.array(n, index_type))], t, name=f"{prefix}/add")
    select = b.op("SelectV2", [less, add, ids], t, name=f"{prefix}/SelectV2")
    attrs = {"Tparams": F32, "Tindices": index_type, "Taxis": I32, "batch_dims": 0}
    gather: str = b.op(
        "GatherV2", [table, select, b.constant(np.array(0, I32))], attrs, name=f"{prefix}/GatherV2"
    )
    return gather


def embedding_graph(
    zero: int = 0, index_type: type = I32, fed_table: bool = False
) -> tuple[GraphBuilder, str, str, str]:
    table_value = np.arange(20, dtype=F32).reshape(5, 4)
    b = GraphBuilder()
    ids = b.placeholder("ids", index_type, (None, 3))
    table = b.placeholder("table", F32, (None, 4)) if fed_table else b.constant(table_value, name="table")
    out = b.op("Relu", [keras_take(b, table, ids, 5, "embed", zero, index_type)], {"T": F32}, name="out")
    return b, ids, table, out


@pytest.mark.parametrize("index_type", [I32, np.int64])
def test_keras_take_runs_as_one_gather(index_type: type) -> None:
    b, ids, _, out = embedding_graph(index_type=index_type)
    feed: dict[str, np.ndarray] = {ids: np.array([[0, 4, -1], [-5, 2, -3]], index_type)}
    (got,), ops, nodes = run_traced(b, [out], feed)
    (want,), ops_off, _ = run_traced(b, [out], feed, OFF)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got[0, 2], np.arange(16, 20, dtype=F32))  # -1 is the last row
    gather = nodes["embed/GatherV2"]
    assert gather.op == "GatherV2" and list(gather.input)[1] == "ids"
    assert gather.attr["_wrap_negative_indices"].i == 5
    assert all(ops[op] == 0 for op in WRAP_OPS) and all(ops_off[op] == 1 for op in WRAP_OPS)


@pytest.mark.parametrize("bad", [5, -6, 2**31 - 1, -(2**31)])
def test_an_index_out_of_range_gets_the_same_error(bad: int) -> None:
    b, ids, _, out = embedding_graph()
    feed = {ids: np.array([[0, 1, 2], [3, bad, 4]], I32)}
    messages = []
    for cfg in (None, OFF):
        with pytest.raises(InvalidArgumentError) as info:
            run_traced(b, [out], feed, cfg)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    # TensorFlow's GatherV2 names the wrapped value: -6 + 5 = -1
    assert f"indices[1,1] = {bad + 5 if bad < 0 else bad} is not in [0, 5)" in messages[0]


def test_a_fed_table_of_another_size_wraps_as_the_graph_did() -> None:
    # the wrap's constant says 5 rows; a table of 7 fed in its place still wraps by 5, as the graph computes
    b, ids, table, out = embedding_graph(fed_table=True)
    feed: dict[str, np.ndarray] = {
        ids: np.array([[-1, 6, -5]], I32),
        table: np.arange(28, dtype=F32).reshape(7, 4),
    }
    (got,), ops, _ = run_traced(b, [out], feed)
    (want,), _, _ = run_traced(b, [out], feed, OFF)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got[0, 0], np.arange(16, 20, dtype=F32))  # -1 + 5 = row 4
    assert ops["SelectV2"] == 0
    feed[ids] = np.array([[-6, 0, 0]], I32)  # -6 + 5 = -1: refused in both
    for cfg in (None, OFF):
        with pytest.raises(InvalidArgumentError, match=r"indices\[0,0\] = -1 is not in \[0, 7\)"):
            run_traced(b, [out], feed, cfg)


def test_a_batched_lookup_wraps_as_the_graph_did() -> None:
    # GatherV2 with batch_dims = 1 (one table row set per example): the wrap joins it too
    b = GraphBuilder()
    ids = b.placeholder("ids", I32, (None, 3))
    tables = b.placeholder("tables", F32, (None, 5, 2))
    t = {"T": I32}
    less = b.op("Less", [ids, b.constant(np.array(0, I32))], t, name="embed/Less")
    add = b.op("AddV2", [ids, b.constant(np.array(5, I32))], t, name="embed/add")
    select = b.op("SelectV2", [less, add, ids], t, name="embed/SelectV2")
    attrs = {"Tparams": F32, "Tindices": I32, "Taxis": I32, "batch_dims": 1}
    out = b.op("GatherV2", [tables, select, b.constant(np.array(1, I32))], attrs, name="embed/GatherV2")
    feed = {ids: np.array([[0, -1, 4], [-5, 2, -2]], I32), tables: np.arange(20, dtype=F32).reshape(2, 5, 2)}
    (got,), ops, nodes = run_traced(b, [out], feed)
    (want,), _, _ = run_traced(b, [out], feed, OFF)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got[1, 0], [10, 11])  # -5 is row 0 of the second example's table
    assert ops["SelectV2"] == 0 and nodes["embed/GatherV2"].attr["_wrap_negative_indices"].i == 5


@pytest.mark.parametrize("case", ["fetched", "not zero", "remapping off"])
def test_the_wrap_is_kept_when_it_must_be(case: str) -> None:
    b, ids, _, out = embedding_graph(zero=1 if case == "not zero" else 0)
    fetches = [out, "embed/SelectV2:0"] if case == "fetched" else [out]
    cfg = rewrite_config(remapping=config_pb2.RewriterConfig.OFF) if case == "remapping off" else None
    feed = {ids: np.array([[1, -1, 3]], I32)}
    got, ops, nodes = run_traced(b, fetches, feed, cfg)
    want, _, _ = run_traced(b, fetches, feed, OFF)
    for g, e in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, e)
    assert ops["SelectV2"] == 1 and "_wrap_negative_indices" not in nodes["embed/GatherV2"].attr


def test_wide_and_deep_fixture_looks_up_its_tables_in_one_node_each() -> None:
    # the realistic Keras 3 export: eight embedding columns, each a GatherV2 behind Less, AddV2, SelectV2
    with np.load(REALISTIC / "wide_and_deep.npz") as data:
        feeds = {k[3:]: data[k] for k in data.files if k.startswith("in:")}
        expected = {k[4:]: data[k] for k in data.files if k.startswith("out:")}
    md = config_pb2.RunMetadata()
    with Session(load_graph_def(REALISTIC / "wide_and_deep.pb")) as s:
        got = s.run(list(expected), feeds, options=TRACED, run_metadata=md)
    ops = Counter(n.op for n in md.partition_graphs[0].node)
    assert ops["GatherV2"] == 8 and ops["SelectV2"] == ops["Less"] == 0
    for g, (name, e) in zip(got, expected.items(), strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5, err_msg=name)
