"""A step's memory by live bytes, as TensorFlow's allocator counts it: the session's memory limit, the OOM
report and the peak in RunMetadata.

A node's outputs are allocated when it runs; a tensor is freed when the last node reading it has run,
unless it is fetched (the caller takes it). ``live`` is what is allocated and not freed now, ``peak`` its
highest value in the step. A node's inputs are freed only after its outputs are allocated, as in
TensorFlow, where the kernel holds its inputs while it computes: a chain of 2 MB ops has at most 4 MB live.
Feeds and constants belong to the caller and the plan, not to the step, and are not counted.

Only steps with a memory limit or tracing make one of these; others pay nothing for it.

A function body (a branch of If, a While's cond and body, a call inlining did not reach) runs as a nested
step whose ``StepMemory`` has the calling step's as ``parent``: its tensors count in the root step's
``live``, ``peak`` and limit while they are alive, as TensorFlow's allocator sees them, and what is still
live when the body finishes (its results) is released by ``release()``, because the calling kernel's
outputs are counted again as the caller's.

A TensorList (a 0-d object array holding one, ``runtime/kernels/list_ops.py``) holds element arrays that
lists derived from it share. Its elements count by identity, once each however many lists hold them, from
the first output list that holds them until Python frees them (a weak reference's callback), as TensorFlow's
allocator counts the buffers a list's tensors share; a tensor read back out of a list (``TensorListGetItem``)
is that element and is not counted again. An item is counted twice only while both the node output it was
and a list hold it (until that output's last reader has run): a bound that errs high by one element.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

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


def list_elements(value: Any) -> list[Any] | None:
    """The element arrays of a TensorList value (a 0-d object array holding one), else None."""
    if type(value) is np.ndarray and value.dtype.kind == "O" and value.ndim == 0:
        elements = getattr(value[()], "elements", None)
        if isinstance(elements, list):
            return elements
    return None


class StepMemory:
    """Live bytes of one step (see the module docstring). Thread-safe: nodes of a step run in parallel."""

    __slots__ = (
        "allocated",
        "elements",
        "limit",
        "live",
        "lock",
        "own",
        "peak",
        "released",
        "root",
        "sizes",
        "uses",
    )

    def __init__(self, plan: Plan, limit: int | None, parent: StepMemory | None = None) -> None:
        # the step whose counters (live, peak, allocated) and limit every nested step shares
        self.root: StepMemory = self if parent is None else parent.root
        self.limit: int | None = limit if parent is None else self.root.limit
        self.live = 0
        self.peak = 0
        self.allocated = 0  # every byte the step's nodes produced, freed or not
        self.own = 0  # this step's share of the root's live bytes (all of them for the root)
        uses = plan.slot_uses
        if uses is None:
            uses = plan.slot_uses = slot_uses(plan)
        self.uses = uses.copy()
        self.sizes: dict[int, int] = {}  # slot -> bytes, for live tensors
        self.lock: threading.Lock = threading.Lock() if parent is None else self.root.lock
        # list elements counted in the root's live bytes: id -> weak reference (the root's, shared)
        self.elements: dict[int, weakref.ref[Any]] = {} if parent is None else self.root.elements
        # bytes of counted list elements Python has freed since, taken off ``live`` under the lock: a
        # weak reference's callback may run on any thread, even one holding the lock, so it only appends
        self.released: list[int] = [] if parent is None else self.root.released

    def _sizes(self, outs: Sequence[Any]) -> tuple[list[int], list[tuple[Any, int]]]:
        """Bytes of each output, and the list elements (with their bytes) that no counted list held
        before (under the lock)."""
        elements = self.elements
        sizes = []
        new: list[tuple[Any, int]] = []
        for o in outs:
            items = list_elements(o)
            if items is None:
                # an element read back out of a list is already counted
                sizes.append(0 if elements and id(o) in elements else int(getattr(o, "nbytes", 0)))
                continue
            sizes.append(int(o.nbytes))
            seen = set()
            for a in items:
                if a is not None and id(a) not in elements and id(a) not in seen:
                    seen.add(id(a))
                    new.append((a, int(getattr(a, "nbytes", 0))))
        return sizes, new

    def _join(self, new: list[tuple[Any, int]]) -> int:
        """Counts these list elements until Python frees them; their bytes (under the lock)."""
        elements = self.elements
        joined = 0
        for a, n in new:
            try:
                elements[id(a)] = weakref.ref(a, _forget(elements, self.released, id(a), n))
            except TypeError:  # not weakly referenceable: left uncounted
                continue
            joined += n
        return joined

    def _drain(self) -> None:
        released = self.released
        root = self.root
        while released:
            root.live -= released.pop()

    def allocate(
        self, node: PlanNode, outs: Sequence[Any], donated: Sequence[Any] | None = None
    ) -> tuple[ResourceExhaustedError | None, int]:
        """Counts a node's outputs, then frees the inputs it was the last to read. Returns the OOM error
        when the outputs do not fit under the limit (they are not counted then), and the live bytes once
        they were allocated (before the inputs were freed). ``donated``: the node's inputs when it may
        have written an output into one (``runtime/inplace.py``): such an output took no new bytes."""
        uses = self.uses
        root = self.root
        with self.lock:
            self._drain()
            sizes, new = self._sizes(outs)
            size = sum(sizes)
            reused = self._reused(node, outs, sizes, donated) if donated is not None else 0
            live = root.live + size - reused + sum(n for _, n in new)
            if self.limit is not None and live > self.limit:
                return self._oom(node, outs, live), live
            joined = self._join(new)
            freed = 0
            root.allocated += size - reused + joined
            if root is not self:
                self.allocated += size - reused + joined
            if live > root.peak:
                root.peak = live
            b = node.out_base
            for n in sizes:
                if n:
                    if uses[b] == 0:  # nothing reads it and it is not fetched: freed at once
                        freed += n
                    else:
                        self.sizes[b] = n
                b += 1
            for s in node.in_slots:
                left = uses[s] - 1
                if left >= 0:
                    uses[s] = left
                    if left == 0:
                        freed += self.sizes.pop(s, 0)
            root.live = live + reused - freed
            if root is not self:
                self.own += size - freed
        return None, live

    def _reused(self, node: PlanNode, outs: Sequence[Any], sizes: list[int], donated: Sequence[Any]) -> int:
        """Bytes of outputs that are a live input's buffer written in place (under the lock)."""
        reused = 0
        for o, n in zip(outs, sizes, strict=True):
            for s, a in zip(node.in_slots, donated, strict=True):
                if o is a and s in self.sizes:
                    reused += n
                    break
        return reused

    def release(self) -> None:
        """A nested step's end: what it still holds (its results) leaves the root's live bytes."""
        if self.root is self:
            return
        with self.lock:
            self.root.live -= self.own
            self.own = 0
            self.sizes.clear()

    def transient(self, node: PlanNode, outs: Sequence[Any]) -> tuple[ResourceExhaustedError | None, int]:
        """Counts outputs made inside a loop frame for the limit and the peak, then lets them go: the
        frame's iteration holds them, and they are dropped with it."""
        root = self.root
        with self.lock:
            self._drain()
            sizes, new = self._sizes(outs)
            live = root.live + sum(sizes) + sum(n for _, n in new)
            if self.limit is not None and live > self.limit:
                return self._oom(node, outs, live), live
            joined = self._join(new)
            root.allocated += sum(sizes) + joined
            if root is not self:
                self.allocated += sum(sizes) + joined
            if live > root.peak:
                root.peak = live
            # list elements stay counted until Python frees them (the iteration's lists hold them)
            root.live += joined
        return None, live

    def hold(self, delta: int) -> None:
        """Tensors a kernel keeps between the nested steps it runs (a While's loop variables) join the root's
        live bytes (``delta`` > 0) or leave them (< 0). Their size was checked against the limit when the
        body made them."""
        root = self.root
        with self.lock:
            root.live += delta
            if root.live > root.peak:
                root.peak = root.live

    def in_use(self) -> int:
        """The root step's live bytes now."""
        with self.lock:
            self._drain()
        return self.root.live

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


def _forget(elements: dict[int, weakref.ref[Any]], released: list[int], key: int, size: int) -> Any:
    """The callback for a counted list element's weak reference: Python freed it."""

    def gone(ref: weakref.ref[Any]) -> None:
        if elements.get(key) is ref:
            del elements[key]
        released.append(size)

    return gone
