"""How a lone step of a plan runs: through the executor, or as a straight loop on its caller's thread.

A step whose nodes are all cheap already runs as a straight loop (``Session._on_caller_only``). One with
expensive nodes goes to the executor, which hands expensive nodes that are ready together to the inter-op
pool's threads. That pays when they are long and the cores are free: two towers of three 512x512 products,
one BLAS thread, ran in 8.8 ms through the executor against 17.1 ms in one loop. It costs when they are
short, or when BLAS already takes both cores: BERT-tiny's query, key and value products (0.92x in one loop
at two BLAS threads, 0.97x at one), the residual CNN's projection beside its main path (0.95-0.96x), the
towers at two BLAS threads (0.86x). No rule on the graph alone says which (the same graph changes side
with the thread count), so each plan measures: its lone steps (no other step of the session running)
take both ways in turns until each has ``FIRST`` of them (besides its first, which warms caches and
allocations and is not counted), then the way whose recent steps' shortest wall time is lower (a step
slowed by something else, the garbage collector or another process, says nothing of its way; the first
steps of a plan run slower while caches warm, and their median chose the wrong way for BERT-tiny). The
other way runs again now and then, so a change (another batch size, the machine's load) is seen: every
``CLOSE_EVERY``-th lone step while the two are within ``CLOSE`` of each other (a wrong choice costs little
there), every ``FAR_EVERY``-th when they are not (each such step costs that much more).

Steps that are not lone keep the executor: with other steps running, its inter-op pool bounds how many
kernels run at once, where a loop per caller would not.
"""

from __future__ import annotations

import threading

FIRST = 4  # lone steps each way before choosing
KEPT = 8  # recent wall times kept per way
CLOSE = 1.1  # ratio of the shortest times under which the two ways count as close
CLOSE_EVERY = 16
FAR_EVERY = 256

_EXECUTOR, _LOOP = 0, 1


class StepWay:
    """One plan's record of its lone steps' wall times, each way, and the choice made from them."""

    __slots__ = ("_lock", "_next", "_seen", "_steps", "_times")

    def __init__(self) -> None:
        self._times: tuple[list[float], list[float]] = ([], [])
        self._seen = [0, 0]  # lone steps taken each way, the uncounted first included
        self._steps = 0  # lone steps chosen for so far
        self._next = _EXECUTOR  # the way chosen for the next one
        self._lock = threading.Lock()  # callers on several threads may be lone in turn

    def loop(self) -> bool:
        """Whether the next lone step runs as a straight loop (else through the executor)."""
        with self._lock:
            self._steps += 1
            return self._next == _LOOP

    def learn(self, loop: bool, seconds: float) -> None:
        """Records a lone step's wall time, taken the way ``loop`` says, and chooses the next step's way."""
        with self._lock:
            way = _LOOP if loop else _EXECUTOR
            seen = self._seen
            seen[way] += 1
            if seen[way] > 1:
                times = self._times[way]
                times.append(seconds)
                if len(times) > KEPT:
                    del times[0]
            executor, straight = self._times
            if len(executor) < FIRST or len(straight) < FIRST:  # in turns, the executor first
                self._next = _LOOP if seen[_LOOP] < seen[_EXECUTOR] else _EXECUTOR
                return
            a, b = min(executor), min(straight)
            best = _LOOP if b <= a else _EXECUTOR
            every = CLOSE_EVERY if max(a, b) < CLOSE * min(a, b) else FAR_EVERY
            self._next = 1 - best if self._steps % every == 0 else best

    def fastest(self) -> tuple[float, float] | None:
        """The shortest of the recent lone steps' wall times through the executor and as a loop, once both
        ways have ``FIRST`` of them."""
        with self._lock:
            executor, straight = self._times
            if len(executor) < FIRST or len(straight) < FIRST:
                return None
            return min(executor), min(straight)
