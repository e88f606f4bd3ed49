"""A TensorList's elements count in the step's live bytes, its memory limit and its peak (step_memory.py),
whether the list is built in the step itself or inside a v1 loop frame."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from support import v1_while

from poolserve import RunMetadata, RunOptions, Session
from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.errors import ResourceExhaustedError
from poolserve.runtime.metadata import step_peak_bytes

FULL_TRACE = 3
KIB = 1024
N = 100 * KIB // 4  # floats per element: 100 KiB


def _reserve(b: GraphBuilder, n: str, name: str = "list") -> str:
    return str(
        b.op(
            "TensorListReserve",
            [b.constant(np.asarray([N], np.int32)), n],
            {"element_dtype": np.float32, "shape_type": np.int32},
            name=name,
        )
    )


def _set(b: GraphBuilder, lst: str, i: str, item: str, name: str = "set") -> str:
    return str(b.op("TensorListSetItem", [lst, i, item], {"element_dtype": np.float32}, name=name))


def _length(b: GraphBuilder, lst: str) -> str:
    return str(b.op("TensorListLength", [lst], name="length"))


def straight_graph(items: int) -> Any:
    """``items`` new 100 KiB tensors (x * k), each set into the list, whose length is fetched."""
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (N,))
    lst = _reserve(b, b.constant(np.int32(items)))
    for k in range(items):
        item = b.mul(x, b.constant(np.float32(k + 1)), name=f"item{k}")
        lst = _set(b, lst, b.constant(np.int32(k)), item, name=f"set{k}")
    return b.graph_def, _length(b, lst)


def loop_graph() -> Any:
    """A v1 while loop over ``i < n``: each iteration sets ``x * 2`` (a new 100 KiB tensor) at index i of a
    list; the loop's list feeds the fetched length."""
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (N,))
    n = b.placeholder("n", np.int32, ())

    def body(i: str, lists: list[str], xs: list[str]) -> list[str]:
        return [_set(b, lists[0], i, b.mul(xs[0], b.constant(np.float32(2.0)), name="item"))]

    (lst,) = v1_while(b, n, [(_reserve(b, n), np.dtype(object))], [(x, np.float32)], body)
    return b.graph_def, _length(b, lst)


def _peak(sess: Session, out: str, feeds: dict[str, Any]) -> int:
    meta = RunMetadata()
    sess.run(out, feeds, options=RunOptions(trace_level=FULL_TRACE), run_metadata=meta)
    return step_peak_bytes(meta.step_stats)


def test_list_elements_count_in_the_peak_and_the_limit() -> None:
    graph_def, out = straight_graph(5)
    x = np.ones(N, np.float32)
    with Session(graph_def) as sess:
        assert sess.run(out, {"x:0": x}) == 5
        # the list holds all five items at the end: 500 KiB, and the next item is made while it holds four
        peak = _peak(sess, out, {"x:0": x})
        assert 500 * KIB <= peak <= 600 * KIB + 64
    with Session(graph_def, memory_limit_bytes=450 * KIB) as sess:
        with pytest.raises(ResourceExhaustedError, match="over the session's memory limit") as e:
            sess.run(out, {"x:0": x})
        assert e.value.node_name in {"item4", "set4", "item3", "set3"}


def test_list_elements_made_in_a_v1_loop_count_until_the_list_is_dropped() -> None:
    graph_def, out = loop_graph()
    x = np.ones(N, np.float32)
    with Session(graph_def) as sess:
        assert sess.run(out, {"x:0": x, "n:0": np.int32(8)}) == 8
        # eight 100 KiB elements held by the loop's list at its end, counted once each
        peak = _peak(sess, out, {"x:0": x, "n:0": np.int32(8)})
        assert 800 * KIB <= peak <= 900 * KIB + 64
        # the elements were freed with the list: a second step starts from nothing
        assert _peak(sess, out, {"x:0": x, "n:0": np.int32(2)}) <= 300 * KIB + 64
    with Session(graph_def, memory_limit_bytes=500 * KIB) as sess:
        assert sess.run(out, {"x:0": x, "n:0": np.int32(3)}) == 3
        with pytest.raises(ResourceExhaustedError, match="over the session's memory limit"):
            sess.run(out, {"x:0": x, "n:0": np.int32(8)})
