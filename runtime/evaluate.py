"""A minimal sequential evaluator: runs the pruned graph in topological order on the calling thread.

It is the reference the executor is checked against, and what the kernel and graph tests use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from runtime.errors import InternalError, InvalidArgumentError, OpError, ResourceExhaustedError
from runtime.graph import Graph, prepare_feed
from runtime.kernels.registry import OpContext, ResourceContainer
from runtime.node import Node


def kernel_error(node: Node, err: Exception) -> OpError:
    """Turns a failure inside a kernel into an OpError that names the node, as TensorFlow does."""
    suffix = f"\n\t [[{{{{node {node.name}}}}}]]"
    if isinstance(err, OpError):
        if err.node_name is None or err.node_name == node.name:
            if not err.message.endswith(suffix):
                err.message += suffix
            err.node_name = node.name
        return err
    if isinstance(err, MemoryError):
        return ResourceExhaustedError(f"OOM when allocating an output of {node.op}{suffix}", node.name)
    if isinstance(err, (ValueError, TypeError, IndexError, KeyError, ZeroDivisionError, FloatingPointError)):
        return InvalidArgumentError(f"{node.op} failed: {err}{suffix}", node.name)
    return InternalError(f"{node.op} failed: {type(err).__name__}: {err}{suffix}", node.name)


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
    fetch_ids = [graph.tensor(name) for name in fetches]
    values: dict[tuple[str, int], Any] = dict(feeds)
    ctx = OpContext(resources)
    with np.errstate(all="ignore"):
        for node in graph.prune(fetch_ids, targets, feeds):
            inputs = [values[i] for i in node.inputs]
            try:
                outputs = graph.kernels[node.name](ctx, inputs)
            except Exception as e:
                raise kernel_error(node, e) from None
            for port, out in enumerate(outputs):
                if (node.name, port) not in feeds:
                    values[(node.name, port)] = out
    return [values[f] for f in fetch_ids]
