"""Evaluate a graph once on the calling thread: no session, no constant folding, no cache.

What the kernel and graph tests use; it runs the executor's own plan and step code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from poolserve.runtime.executor import Plan, run_plan_inline
from poolserve.runtime.graph import Graph, prepare_feed
from poolserve.runtime.kernels.registry import ResourceContainer


def evaluate(
    graph: Graph,
    fetches: Sequence[str],
    feed_dict: Mapping[str, Any] | None = None,
    targets: Sequence[str] = (),
    resources: ResourceContainer | None = None,
) -> list[Any]:
    """Computes the fetched tensors ("node:port") given feeds; runs ``targets`` for their effects."""
    feeds = {}
    for name, value in (feed_dict or {}).items():
        tid = graph.tensor(name)
        feeds[tid] = prepare_feed(graph, tid, value)
    plan = Plan(graph, list(feeds), [graph.tensor(name) for name in fetches], list(targets))
    return run_plan_inline(plan, list(feeds.values()), resources)
