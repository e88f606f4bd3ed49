"""Helpers shared by the tests: run one op through a real graph, compare arrays."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from runtime.builder import GraphBuilder
from runtime.evaluate import evaluate
from runtime.graph import Graph


def run_op(
    op: str,
    inputs: Sequence[Any],
    attrs: Mapping[str, Any] | None = None,
    num_outputs: int = 1,
    feed: bool = False,
) -> Any:
    """Builds a graph with one ``op`` node over the given inputs and evaluates it.

    Inputs become Const nodes (read-only arrays, so a kernel that writes into its inputs fails), or
    Placeholders fed at run time when ``feed`` is set. Returns one array, or a list when
    ``num_outputs != 1``.
    """
    b = GraphBuilder()
    names, feeds = [], {}
    for i, value in enumerate(inputs):
        arr = np.asarray(value) if not isinstance(value, np.ndarray) else value
        if feed:
            t = b.placeholder(f"in{i}", arr.dtype, arr.shape)
            feeds[t] = arr
        else:
            t = b.constant(arr, dtype=arr.dtype, name=f"in{i}")
        names.append(t)
    attrs = dict(attrs or {})
    if inputs and "T" not in attrs:  # as TensorFlow's graphs always carry it
        attrs["T"] = np.asarray(inputs[0]).dtype
    out = b.op(op, names, attrs, name="op", num_outputs=num_outputs)
    fetches = [out] if num_outputs == 1 else list(out)
    results = evaluate(Graph(b.graph_def), fetches, feeds)
    return results[0] if num_outputs == 1 else results


def assert_close(actual: Any, expected: Any, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Same dtype, same shape, values within tolerance."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    if actual.dtype.kind in "fc":
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)
    else:
        np.testing.assert_array_equal(actual, expected)


# --- a test-only kernel: sleeps (releasing the GIL, like a BLAS call), counts its runs ------------------

import threading  # noqa: E402
import time  # noqa: E402

from runtime.kernels.registry import KERNELS, kernel  # noqa: E402

RUNS: dict[str, int] = {}
_runs_lock = threading.Lock()

if "TestSleep" not in KERNELS:

    @kernel("TestSleep", expensive=True)
    def _test_sleep(node: Any) -> Any:
        seconds = node.attr_float("seconds", 0.0)

        def compute(ctx: Any, inputs: list[Any]) -> tuple[Any, ...]:
            with _runs_lock:
                RUNS[node.name] = RUNS.get(node.name, 0) + 1
            if seconds:
                time.sleep(seconds)
            return (inputs[0] if inputs else np.zeros((), np.float32),)

        return compute


def sleep_op(b: GraphBuilder, x: str | None, seconds: float, name: str) -> str:
    """A TestSleep node: passes ``x`` on after sleeping; RUNS[name] counts its executions."""
    RUNS.pop(name, None)
    return str(b.op("TestSleep", [x] if x else [], {"seconds": float(seconds)}, name=name))
