"""Debug watches (``RunOptions.debug_options``): DebugIdentity dumps of watched tensors to file:// URLs."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from poolserve.proto import config_pb2, debug_pb2
from poolserve.runtime.errors import FailedPreconditionError, InvalidArgumentError, UnimplementedError
from poolserve.runtime.kernels.registry import Compute, OpContext
from poolserve.runtime.node import Node


def watch_summary(options: config_pb2.RunOptions | None) -> str:
    if options is None or not options.HasField("debug_options"):
        return ""
    parts = []
    for w in options.debug_options.debug_tensor_watch_opts:
        parts.append(f"{w.node_name}:{w.output_slot}:{','.join(w.debug_ops)}:{','.join(w.debug_urls)}")
    return ";".join(sorted(parts))


def debug_wrapper(
    debug_options: debug_pb2.DebugOptions,
) -> Callable[[Node, Compute], Compute]:
    """Wraps watched nodes' kernels so their outputs are dumped as .npy files under file:// debug URLs."""
    watches: dict[str, list[debug_pb2.DebugTensorWatch]] = {}
    for w in debug_options.debug_tensor_watch_opts:
        if w.output_slot < 0:
            raise InvalidArgumentError(
                f"Debug watch of node '{w.node_name}': output_slot must be 0 or more, got {w.output_slot}"
            )
        for op in w.debug_ops or ["DebugIdentity"]:
            if op != "DebugIdentity":
                raise UnimplementedError(f"Debug op '{op}' is not supported (only DebugIdentity)")
        for url in w.debug_urls:
            if not url.startswith("file://"):
                raise UnimplementedError(f"Debug URL '{url}' is not supported (only file://)")
        watches.setdefault(w.node_name, []).append(w)

    def wrap(node: Node, compute: Compute) -> Compute:
        mine = watches.get(node.name)
        if not mine:
            return compute

        def watched(ctx: OpContext, inputs: list[Any]) -> Sequence[Any]:
            outs = compute(ctx, inputs)
            stamp = time.time_ns() // 1000
            for w in mine:
                if w.output_slot >= len(outs):
                    continue
                for url in w.debug_urls:
                    root = Path(url[len("file://") :])
                    path = root / f"{node.name}_{w.output_slot}_DebugIdentity_{stamp}.npy"
                    try:
                        path.parent.mkdir(parents=True, exist_ok=True)
                        np.save(path, np.asarray(outs[w.output_slot]), allow_pickle=False)
                    except OSError as e:
                        raise FailedPreconditionError(
                            f"Cannot write the debug dump of {node.name}:{w.output_slot} to {url}: {e}"
                        ) from None
            return outs

        return watched

    return wrap
