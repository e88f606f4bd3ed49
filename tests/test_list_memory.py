"""A TensorList's elements count in the step's live bytes, its memory limit and its peak (step_memory.py),
whether the list is built in the step itself or inside a v1 loop frame."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

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
    """A v1 while loop (Enter, Merge, Switch, NextIteration, Exit) over ``i < n``: each iteration sets
    ``x * 2`` (a new 100 KiB tensor) at index i of a list; the loop's list feeds the fetched length."""
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (N,))
    n = b.placeholder("n", np.int32, ())
    frame = {"frame_name": "loop", "parallel_iterations": 10}
    i_in = b.op("Enter", [b.constant(np.int32(0))], {"T": np.int32, **frame}, name="enter_i")
    l_in = b.op("Enter", [_reserve(b, n)], {"T": np.dtype(object), **frame}, name="enter_l")
    const = {**frame, "is_constant": True}
    n_in = b.op("Enter", [n], {"T": np.int32, **const}, name="enter_n")
    x_in = b.op("Enter", [x], {"T": np.float32, **const}, name="enter_x")
    i_m = b.op("Merge", [i_in, "next_i"], {"T": np.int32, "N": 2}, name="merge_i", num_outputs=2)[0]
    l_m = b.op("Merge", [l_in, "next_l"], {"N": 2}, name="merge_l", num_outputs=2)[0]
    cond = b.op("LoopCond", [b.op("Less", [i_m, n_in], {"T": np.int32})], name="cond")
    i_f, i_t = b.op("Switch", [i_m, cond], {"T": np.int32}, name="switch_i", num_outputs=2)
    l_f, l_t = b.op("Switch", [l_m, cond], {}, name="switch_l", num_outputs=2)
    i = b.op("Identity", [i_t], {"T": np.int32}, name="i")
    item = b.mul(x_in, b.constant(np.float32(2.0)), name="item")
    b.op("NextIteration", [_set(b, l_t, i, item)], {}, name="next_l")
    b.op("NextIteration", [b.op("AddV2", [i, b.constant(np.int32(1))], {"T": np.int32})], name="next_i")
    b.op("Exit", [i_f], {"T": np.int32}, name="exit_i")
    return b.graph_def, _length(b, b.op("Exit", [l_f], {}, name="exit_l"))


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
