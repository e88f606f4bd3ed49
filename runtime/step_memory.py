"""A step's memory by live bytes, as TensorFlow's allocator counts it: the session's memory limit, the OOM
report and the peak in RunMetadata.

A node's outputs are allocated when it runs; a tensor is freed when the last node reading it has run,
unless it is fetched (the caller takes it). ``live`` is what is allocated and not freed now, ``peak`` its
highest value in the step. A node's inputs are freed only after its outputs are allocated, as in
TensorFlow, where the kernel holds its inputs while it computes: a chain of 2 MB ops has at most 4 MB live.
Feeds and constants belong to the caller and the plan, not to the step, and are not counted.

Only steps with a memory limit or tracing make one of these; others pay nothing for it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from poolserve.runtime.errors import ResourceExhaustedError

if TYPE_CHECKING:
    from poolserve.runtime.executor import Plan, PlanNode

DEVICE = "/job:localhost/replica:0/task:0/device:CPU:0"


def slot_uses(plan: Plan) -> list[int]:
    """Per value slot of the plan: how many node inputs read it; -1 for slots never freed (feeds,
    constants, fetched tensors)."""
    uses = [0] * len(plan.template)
    for pn in plan.nodes:
        for s in pn.in_slots:
            uses[s] += 1
    for s in range(len(plan.template)):
        if s < len(plan.feeds) or plan.template[s] is not None:
            uses[s] = -1
    for s in plan.fetch_slots:
        uses[s] = -1
    return uses


class StepMemory:
    """Live bytes of one step (see the module docstring). Thread-safe: nodes of a step run in parallel."""

    __slots__ = ("allocated", "limit", "live", "lock", "peak", "sizes", "uses")

    def __init__(self, plan: Plan, limit: int | None) -> None:
        self.limit = limit
        self.live = 0
        self.peak = 0
        self.allocated = 0  # every byte the step's nodes produced, freed or not
        uses = plan.slot_uses
        if uses is None:
            uses = plan.slot_uses = slot_uses(plan)
        self.uses = uses.copy()
        self.sizes: dict[int, int] = {}  # slot -> bytes, for live tensors
        self.lock = threading.Lock()

    def allocate(self, node: PlanNode, outs: Sequence[Any]) -> tuple[ResourceExhaustedError | None, int]:
        """Counts a node's outputs, then frees the inputs it was the last to read. Returns the OOM error
        when the outputs do not fit under the limit (they are not counted then), and the live bytes once
        they were allocated (before the inputs were freed)."""
        sizes = [int(getattr(o, "nbytes", 0)) for o in outs]
        size = sum(sizes)
        uses = self.uses
        with self.lock:
            live = self.live + size
            if self.limit is not None and live > self.limit:
                return self._oom(node, outs, live), live
            self.live = live
            self.allocated += size
            if live > self.peak:
                self.peak = live
            b = node.out_base
            for n in sizes:
                if n:
                    if uses[b] == 0:  # nothing reads it and it is not fetched: freed at once
                        self.live -= n
                    else:
                        self.sizes[b] = n
                b += 1
            for s in node.in_slots:
                left = uses[s] - 1
                if left >= 0:
                    uses[s] = left
                    if left == 0:
                        self.live -= self.sizes.pop(s, 0)
        return None, live

    def transient(self, node: PlanNode, outs: Sequence[Any]) -> tuple[ResourceExhaustedError | None, int]:
        """Counts outputs made inside a loop frame for the limit and the peak, then lets them go: the
        frame's iteration holds them, and they are dropped with it."""
        size = sum(int(getattr(o, "nbytes", 0)) for o in outs)
        with self.lock:
            live = self.live + size
            if self.limit is not None and live > self.limit:
                return self._oom(node, outs, live), live
            self.allocated += size
            if live > self.peak:
                self.peak = live
        return None, live

    def _oom(self, node: PlanNode, outs: Sequence[Any], live: int) -> ResourceExhaustedError:
        shape = ",".join(str(d) for d in getattr(outs[0], "shape", ())) if outs else ""
        dtype = getattr(outs[0], "dtype", "") if outs else ""
        return ResourceExhaustedError(
            f"OOM when allocating tensor with shape[{shape}] and type {dtype} on {DEVICE} by allocator cpu: "
            f"the step's live tensors would take {live} bytes, over the session's memory limit of "
            f"{self.limit} bytes\n\t [[{{{{node {node.name}}}}}]]",
            node.name,
        )

    def live_slots(self) -> dict[int, int]:
        with self.lock:
            return dict(self.sizes)
