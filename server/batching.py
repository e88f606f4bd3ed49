"""Dynamic batching: concurrent requests to one model run as one step.

The data path: a request's feeds, already arrays keyed by graph tensor, join its model's ``Batcher``
under a key (feed tensors, fetches, pool flag, and each feed's dtype and shape past dimension 0: only
alike requests can be concatenated). When a batch forms, its members' feeds are concatenated along
dimension 0, run as one ``Session.arun``, and the outputs are split back by rows.

A batch forms as soon as its queue holds ``max_batch_size`` rows, or a preferred size, and otherwise:

- ``max_queue_delay_us = "auto"`` (the default): when fewer than ``max_concurrent_batches`` of the
  model's batches are running, one event loop iteration after the first member joined (so that requests
  the loop read together batch together; only while the model's requests overlap, see
  ``Batcher._company_wait``), else when one ends. Requests that arrive while the model computes wait for
  it, so batches grow with the load and a lone request does not wait for company (a probe now and then
  while requests come back to back yields two loop iterations, and waits up to ``PROBE_WAIT_S`` only while
  other requests are in the server);
- a number: when the oldest member has waited that long (Triton's ``max_queue_delay_microseconds``).

Members are taken by priority, then arrival. One whose deadline passed while it waited is answered
DeadlineExceededError and left out; one whose client went away is dropped (before the step) or its rows
discarded (after it). The batch runs under the highest member priority and the earliest deadline. If a
batch fails for another reason, or an output does not have one row per input row, its members run alone,
so that each gets its own answer and no rows cross between requests.

An output is split by rows only once it is known to have a batch dimension: its static shape says dimension
0 is unknown, or it had as many rows as its step's input at two different row counts (lone steps count).
One that had another size, or is a scalar, or whose static dimension 0 is known, makes every request that
fetches it run alone: a [10] bias fetched by ten one-row requests batched together has ten rows too, and
was handed out one value per request.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from poolserve.proto import config_pb2
from poolserve.runtime.deadline import Deadline
from poolserve.runtime.errors import CancelledError, DeadlineExceededError, OpError
from poolserve.runtime.session import Session
from poolserve.runtime.signature import tensor_spec
from poolserve.runtime.types import Array

_batch_ids = itertools.count(1)


@dataclass(frozen=True)
class BatchInfo:
    """The step a member ran in: for its trace and the metrics."""

    batch_id: int
    rows: int  # of the whole batch
    members: int
    queued_at: float  # time.monotonic() when the member joined the queue
    started_at: float  # when the batch step started


@dataclass
class _Member:
    feeds: list[Array]
    rows: int
    deadline: Deadline | None
    priority: int
    traced: bool
    arrived: float
    future: asyncio.Future[tuple[list[Any], BatchInfo, config_pb2.RunMetadata | None]]
    seq: int


@dataclass
class _Queue:
    feed_names: tuple[str, ...]
    fetches: tuple[str, ...]
    use_pool: bool
    members: list[_Member] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None

    @property
    def rows(self) -> int:
        return sum(m.rows for m in self.members if not m.future.done())


Key = tuple[tuple[str, ...], tuple[str, ...], bool, tuple[tuple[str, tuple[int, ...]], ...]]

# With "auto", a request that finds the model idle yields one loop iteration for company only if, within this
# many seconds, a request of this model arrived while another was in flight (see Batcher._company_wait).
COMPANY_WINDOW_S = 1.0
# Without such company, a request that came within BACK_TO_BACK_S of the model's last answer holds the model
# for PROBE_WAIT_S once every PROBE_EVERY_S, to let the loop read what waits (Batcher._company_wait): requests
# that each ran their step on the loop from start to end never overlapped, so after a quiet spell a burst
# stayed one request a batch. The example cnn at 32 clients, after one client alone: 1.0 rows a batch over
# native JSON and gRPC, at about half the throughput of the same load on a fresh server (28-30 and 16 rows).
BACK_TO_BACK_S = 2e-3
PROBE_EVERY_S = 0.25
PROBE_WAIT_S = 1e-3
# A probe first yields this many loop iterations: the requests whose bytes waited in their sockets are read
# in the first and reach the model in the next ones. Then, if nothing joined and no other request is in the
# server (``Batcher.busy``), no company is coming and it stops: a client alone no longer pays PROBE_WAIT_S.
PROBE_ITERATIONS = 2


class Batcher:
    """One model's batches (see the module docstring). Used from the event loop only."""

    def __init__(
        self,
        model: str,
        session: Session,
        max_batch_size: int,
        max_queue_delay_us: int | Literal["auto"] = "auto",
        preferred_batch_sizes: Sequence[int] = (),
        max_concurrent_batches: int = 1,
        observe: Callable[[int, float], None] | None = None,
        shapes: Mapping[str, tuple[int, ...] | None] | None = None,
    ) -> None:
        self.model = model
        self.session = session
        # static shapes of the model's outputs by graph tensor, as its signatures declare them (a SavedModel's
        # SignatureDef knows them where the graph's nodes do not)
        self.shapes = dict(shapes or {})
        self.max_batch_size = max_batch_size
        self.delay = None if max_queue_delay_us == "auto" else max_queue_delay_us / 1e6
        self.preferred = frozenset(preferred_batch_sizes)
        self.max_concurrent = max_concurrent_batches
        self.observe = observe  # (batch rows, a member's queue seconds), for the metrics
        # whether a request other than the caller is in the server (the service sets it): a probe that finds
        # nobody stops early; None (no server around), it waits its whole PROBE_WAIT_S
        self.busy: Callable[[], bool] | None = None
        # (batch rows, seconds) of every step that ended well, for the statistics (ModelStats.executed)
        self.executed: Callable[[int, float], None] | None = None
        self.running = 0
        self._queues: dict[Key, _Queue] = {}
        self._seq = itertools.count()
        self._alone: set[Key] = set()  # signatures whose outputs cannot be split by rows
        self._in_flight = 0  # requests inside run(), or running alone (claim_alone)
        self._overlap_at = -math.inf  # when a request last arrived while another was in flight
        self._last_end = -math.inf  # when a request last left run() or ended alone
        self._probed_at = -math.inf  # when a lone request last waited PROBE_WAIT_S for company
        # per fetched tensor: known to have a batch dimension (split by rows), known not to (run alone), or
        # the row count of the one step so far where it had one row per input row
        self._aligned: set[str] = set()
        self._unaligned: set[str] = set()
        self._rows_seen: dict[str, int] = {}

    def batchable(self, feeds: dict[str, Array]) -> int:
        """The rows of a request that can join a batch, or 0 (it runs alone): every feed an array with
        the same dimension 0, no more rows than ``max_batch_size``."""
        rows = -1
        for value in feeds.values():
            if not isinstance(value, np.ndarray) or value.ndim == 0:
                return 0
            if rows < 0:
                rows = value.shape[0]
            elif value.shape[0] != rows:
                return 0
        return rows if 0 < rows <= self.max_batch_size else 0

    def claim_alone(self, rows: int) -> BatchInfo | None:
        """With ``auto``, a request of ``rows`` that would run at once and alone in ``run`` (the model idle,
        nobody waiting, no company lately and no probe due): it takes the model's batch slot and the caller
        runs its step as an unbatched request, then calls ``end_alone``. None: it goes through ``run``.

        Why: through ``run``'s member, future and batch options a lone example mlp request cost ~72k more
        instructions than unbatched (882k against 810k, callgrind, in process), 224 against 178 us p50."""
        if self.delay is not None or self.running >= self.max_concurrent or self._queues or self._full(rows):
            return None
        now = time.monotonic()
        if self._company_wait(now, probing=False) is not None:
            return None  # it waits for company in run()
        self.running += 1
        self._in_flight += 1  # a request arriving meanwhile counts it as company, and queues
        return BatchInfo(next(_batch_ids), rows, 1, now, now)

    def end_alone(self, info: BatchInfo) -> None:
        """The request ``claim_alone`` let run alone has its answer (or failed): the slot is given back, and
        the requests that queued meanwhile start."""
        self._in_flight -= 1
        self._last_end = time.monotonic()
        self._release()
        if self.observe is not None:
            self.observe(info.rows, 0.0)

    def learn(self, fetches: Sequence[str], rows: int, values: Sequence[Any]) -> None:
        """What a step of ``rows`` input rows gave for ``fetches`` says about their batch dimension (see
        the module docstring); called for every step of a request that could have been batched (lone ones
        by the service). Costs a set lookup per fetch once they are known."""
        aligned = self._aligned
        for name, value in zip(fetches, values, strict=True):
            if name in aligned or name in self._unaligned:
                continue
            if not isinstance(value, np.ndarray) or value.ndim == 0 or value.shape[0] != rows:
                self._unaligned.add(name)
                continue
            seen = self._rows_seen.get(name)
            if seen is None:
                seen = self._rows_seen[name] = self._static_rows(name, rows)
            if seen != rows:
                aligned.add(name)
                del self._rows_seen[name]

    def _static_rows(self, name: str, rows: int) -> int:
        """The row count to remember for ``name``'s first step: -1 (no real count, so the next step of any
        size settles it) when its static shape says dimension 0 is unknown, else ``rows``."""
        shape = self.shapes.get(name)
        if shape is None:
            try:
                shape = tensor_spec(self.session.graph, name).shape
            except OpError:
                return rows
        return -1 if shape and shape[0] == -1 else rows

    def _splits(self, fetches: Sequence[str]) -> bool:
        """Whether a batch's outputs can be split back by rows: every fetch known to have a batch
        dimension."""
        return all(name in self._aligned for name in fetches)

    async def run(
        self,
        feeds: dict[str, Array],
        fetches: list[str],
        rows: int,
        use_pool: bool,
        deadline: Deadline | None,
        priority: int,
        traced: bool,
    ) -> tuple[list[Any], BatchInfo, config_pb2.RunMetadata | None] | None:
        """Runs a request as a member of a batch: its outputs (in ``fetches`` order), the batch it ran in,
        and the batch's RunMetadata when traced. None: this signature cannot be batched, run it alone. A
        request ``claim_alone`` would let run at once goes through this too, as a batch of one started on
        the next loop iteration."""
        if self._unaligned and not self._unaligned.isdisjoint(fetches):
            return None  # an output without a batch dimension: rows could not be split back
        names = tuple(sorted(feeds))
        arrays = [feeds[n] for n in names]
        key: Key = (names, tuple(fetches), use_pool, tuple((a.dtype.str, a.shape[1:]) for a in arrays))
        if key in self._alone:
            return None
        loop = asyncio.get_running_loop()
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = _Queue(names, tuple(fetches), use_pool)
        now = time.monotonic()
        member = _Member(arrays, rows, deadline, priority, traced, now, loop.create_future(), next(self._seq))
        queue.members.append(member)
        if self._in_flight:
            self._overlap_at = now
        self._in_flight += 1
        try:
            if (
                self.delay is None
                and self.running < self.max_concurrent
                and len(self._queues) == 1
                and len(queue.members) == 1
                and not self._full(rows)
            ):
                wait = self._company_wait(now, probing=True)
                if wait is not None:
                    return await self._lone(key, queue, member, wait)
            self._consider(key, queue)
            # cancelled (the client went away, or the deadline passed while it waited for a batch): the
            # member is dropped, or its rows discarded
            return await self._await_member(member)
        finally:
            self._in_flight -= 1
            self._last_end = time.monotonic()

    def _company_wait(self, now: float, probing: bool) -> float | None:
        """How long a request that finds the model idle and nobody waiting holds it for company (``_lone``):
        0, one loop iteration (the requests the loop has already read), when requests of this model
        overlapped within ``COMPANY_WINDOW_S``; ``PROBE_WAIT_S`` when a probe is due; else None, and it runs
        at once (``claim_alone``), so a client alone gets no added wait.

        A probe: a request that runs its step on the loop holds the loop until its answer, so the next
        request is read only after it, and requests coming back to back (``BACK_TO_BACK_S``) never overlap
        however many clients send them. Once every ``PROBE_EVERY_S`` one of them waits, the loop reads what
        waits meanwhile, and a client alone pays that wait. ``probing``: a probe due is taken now."""
        if now - self._overlap_at < COMPANY_WINDOW_S:
            return 0.0
        if now - self._last_end < BACK_TO_BACK_S and now - self._probed_at >= PROBE_EVERY_S:
            if probing:
                self._probed_at = now
            return PROBE_WAIT_S
        return None

    async def _lone(
        self, key: Key, queue: _Queue, member: _Member, wait: float
    ) -> tuple[list[Any], BatchInfo, config_pb2.RunMetadata | None]:
        """With ``auto``, a request that finds the model idle and nobody waiting, and waits for company
        (``_company_wait``): it holds the model's batch slot for ``wait`` seconds (requests the loop reads
        meanwhile join it), then, if still alone, runs its step in its own task. A batch of one through the
        batch's task cost a lone client two more task hand-offs and ``wait_for``'s task: 0.2-0.4 ms a
        request (example mlp, MobileNetV2)."""
        self.running += 1
        released = False
        try:
            await self._hold(queue, member, wait)
            if queue.members != [member] or len(self._queues) != 1:  # company came: batch as usual
                self._release()
                released = True
                return await self._await_member(member)
            queue.members.clear()
            self._queues.pop(key, None)
            info = BatchInfo(next(_batch_ids), member.rows, 1, member.arrived, time.monotonic())
            values, metadata = await self._step(queue, [member])
            self.learn(queue.fetches, member.rows, values)
            if self.observe is not None:
                self.observe(member.rows, info.started_at - member.arrived)
            return values, info, metadata
        finally:
            if not released:
                if not member.future.done():  # cancelled while it held the slot: no batch for it
                    member.future.cancel()
                self._release()

    async def _hold(self, queue: _Queue, member: _Member, wait: float) -> None:
        """Waits up to ``wait`` seconds for company (one loop iteration for 0). A probe (``wait`` > 0) first
        yields ``PROBE_ITERATIONS`` iterations, and stops there when nothing joined and nobody else is in the
        server: the 1 ms it waited whole cost a client alone that millisecond once every ``PROBE_EVERY_S``
        (a tenth of a lone client's requests at 40 a second). Requests still on their way (other requests
        in flight: a body being read or decoded) get the rest of ``wait``."""
        if wait <= 0.0:
            await asyncio.sleep(0)
            return
        end = time.monotonic() + wait
        for _ in range(PROBE_ITERATIONS):
            await asyncio.sleep(0)
            if queue.members != [member] or len(self._queues) != 1:
                return
        if self.busy is not None and not self.busy():
            return
        left = end - time.monotonic()
        if left > 0.0:
            await asyncio.sleep(left)

    async def _await_member(
        self, member: _Member
    ) -> tuple[list[Any], BatchInfo, config_pb2.RunMetadata | None]:
        deadline = member.deadline
        if deadline is None:
            return await member.future
        try:
            # a timeout of the task, not wait_for: wait_for's own future and callbacks cost each member
            # ~10 us of the loop
            async with asyncio.timeout(max(0.0, deadline.remaining_ms()) / 1000.0):
                return await member.future
        except TimeoutError:
            raise deadline.step_error() from None

    # --- forming batches ---------------------------------------------------------------------------------

    def _full(self, rows: int) -> bool:
        """A batch of ``rows`` starts at once: it is as large as allowed, or of a preferred size."""
        return rows >= self.max_batch_size or rows in self.preferred

    def _consider(self, key: Key, queue: _Queue) -> None:
        rows = queue.rows
        if self._full(rows):
            self._flush(key, queue)
        elif self.delay is None:
            if self.running < self.max_concurrent:
                # the batch's members are chosen one loop iteration later, not now: requests the loop has
                # already read (their tasks are ready in this iteration) join this batch instead of
                # waiting for the next one; a lone request loses one iteration (microseconds)
                self.running += 1
                asyncio.get_running_loop().call_soon(self._release)
        elif queue.timer is None and queue.members:
            loop = asyncio.get_running_loop()
            wait = max(0.0, queue.members[0].arrived + self.delay - time.monotonic())
            queue.timer = loop.call_later(wait, self._flush, key, queue)

    def _flush(self, key: Key, queue: _Queue) -> None:
        """Starts one batch of the queue's first members (by priority, then arrival)."""
        if queue.timer is not None:
            queue.timer.cancel()
            queue.timer = None
        waiting: list[_Member] = []
        for m in queue.members:
            if m.future.done():
                continue
            if m.deadline is not None and m.deadline.remaining_ms() <= 0:
                m.future.set_exception(
                    DeadlineExceededError(
                        f"Deadline exceeded ({m.deadline.timeout_ms} ms) while waiting to be batched"
                    )
                )
                continue
            waiting.append(m)
        waiting.sort(key=lambda m: (-m.priority, m.seq))
        taken: list[_Member] = []
        rows = 0
        for m in waiting:
            if rows + m.rows > self.max_batch_size:
                break
            taken.append(m)
            rows += m.rows
        chosen = {id(m) for m in taken}
        queue.members = [m for m in waiting if id(m) not in chosen]
        if not queue.members:
            self._queues.pop(key, None)
        if not taken:
            return
        self.running += 1
        task = asyncio.ensure_future(self._run_batch(key, queue, taken, rows))
        task.add_done_callback(self._batch_done)  # also when cancelled before it started
        abandoned = functools.partial(_drop_if_abandoned, task, taken)
        for m in taken:
            m.future.add_done_callback(abandoned)

    def _batch_done(self, task: asyncio.Task[None]) -> None:
        self._release()

    def _release(self) -> None:
        """A batch ended, or a slot held for one loop iteration is given back: with ``auto``, the next
        batches start, the queue with the oldest member first."""
        self.running -= 1
        while self.delay is None and self.running < self.max_concurrent:
            ready = [(q.members[0].seq, k, q) for k, q in self._queues.items() if q.members]
            if not ready:
                return
            _, key, queue = min(ready, key=lambda r: r[0])
            self._flush(key, queue)

    # --- running them ------------------------------------------------------------------------------------

    async def _run_batch(self, key: Key, queue: _Queue, members: list[_Member], rows: int) -> None:
        info = BatchInfo(next(_batch_ids), rows, len(members), 0.0, time.monotonic())
        try:
            values, metadata = await self._step(queue, members)
        except asyncio.CancelledError:
            for m in members:
                if not m.future.done():
                    m.future.set_exception(CancelledError("Run call was cancelled"))
            return
        except OpError as e:
            if len(members) > 1 and not isinstance(e, (DeadlineExceededError, CancelledError)):
                await self._alone_each(queue, members, info)  # each member gets its own answer
                return
            for m in members:
                if not m.future.done():
                    m.future.set_exception(e)
            return
        self.learn(queue.fetches, rows, values)
        if len(members) > 1 and not self._splits(queue.fetches):
            if not self._unaligned.isdisjoint(queue.fetches):
                self._alone.add(key)
            # else not known yet (this step is the first that tells): the members run alone this once
            await self._alone_each(queue, members, info)
            return
        start = 0
        for m in members:
            end = start + m.rows
            if not m.future.done():
                part = values if len(members) == 1 else [v[start:end] for v in values]
                member_info = BatchInfo(info.batch_id, rows, len(members), m.arrived, info.started_at)
                m.future.set_result((part, member_info, metadata))
                if self.observe is not None:
                    self.observe(rows, info.started_at - m.arrived)
            start = end

    async def _step(
        self, queue: _Queue, members: list[_Member]
    ) -> tuple[list[Any], config_pb2.RunMetadata | None]:
        started = time.monotonic()
        if len(members) == 1:
            feeds = dict(zip(queue.feed_names, members[0].feeds, strict=True))
        else:
            feeds = {
                name: np.concatenate([m.feeds[i] for m in members]) for i, name in enumerate(queue.feed_names)
            }
        deadlines = [m.deadline for m in members if m.deadline is not None]
        deadline = min(deadlines, key=lambda d: d.at) if deadlines else None
        options = config_pb2.RunOptions()
        if deadline is not None:
            options.timeout_in_ms = deadline.timeout_ms
        options.experimental.use_run_handler_pool = queue.use_pool
        options.experimental.run_handler_pool_options.priority = max(m.priority for m in members)
        metadata: config_pb2.RunMetadata | None = None
        if any(m.traced for m in members):
            options.trace_level = config_pb2.RunOptions.FULL_TRACE
            metadata = config_pb2.RunMetadata()
        values = await self.session.arun(list(queue.fetches), feeds, options, metadata, deadline=deadline)
        if self.executed is not None:
            self.executed(sum(m.rows for m in members), time.monotonic() - started)
        return list(values), metadata

    async def _alone_each(self, queue: _Queue, members: list[_Member], info: BatchInfo) -> None:
        for m in members:
            if m.future.done():
                continue
            try:
                values, metadata = await self._step(queue, [m])
            except OpError as e:
                if not m.future.done():
                    m.future.set_exception(e)
                continue
            self.learn(queue.fetches, m.rows, values)
            if not m.future.done():
                alone = BatchInfo(info.batch_id, m.rows, 1, m.arrived, info.started_at)
                m.future.set_result((values, alone, metadata))
                if self.observe is not None:
                    self.observe(m.rows, info.started_at - m.arrived)


def _drop_if_abandoned(task: asyncio.Task[None], members: list[_Member], _: object) -> None:
    """Every member's client went away before the batch ended: the step is cancelled."""
    if not task.done() and all(m.future.cancelled() for m in members):
        task.cancel()
