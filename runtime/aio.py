"""The asyncio side of ``Session.arun``: results come back to the event loop through one inbox per loop, and a
step's deadline is a timer of that loop."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import weakref
from typing import Any

from poolserve.runtime.deadline import Deadline
from poolserve.runtime.errors import OpError
from poolserve.runtime.executor import Step

# seconds past its deadline at which ``arun`` answers DeadlineExceededError even if the step still runs
BACKSTOP_S = 0.05


class Inbox:
    """Steps' results on their way to one event loop. A busy loop gets many per turn: the first result
    wakes it (``call_soon_threadsafe``, a write to its self-pipe), later ones only join the queue until
    it is drained, so the threads that finish steps make fewer system calls and give up the GIL less."""

    __slots__ = ("_items", "_loop", "_scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._items: collections.deque[tuple[asyncio.Future[Any], Any, OpError | None]] = collections.deque()
        self._scheduled = False

    def post(self, future: asyncio.Future[Any], result: Any, error: OpError | None) -> None:
        self._items.append((future, result, error))  # deque.append and the flag are atomic under the GIL
        if not self._scheduled:
            self._scheduled = True
            # a cancelled caller's loop may be gone by the time the step stops: nobody waits then
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        self._scheduled = False  # first: a result posted from now on schedules another drain
        items = self._items
        while items:
            _settle(*items.popleft())


_inboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Inbox] = weakref.WeakKeyDictionary()


def inbox(loop: asyncio.AbstractEventLoop) -> Inbox:
    inbox = _inboxes.get(loop)
    if inbox is None:
        inbox = _inboxes[loop] = Inbox(loop)
    return inbox


def deadline_passed(
    future: asyncio.Future[Any], step: Step, deadline: Deadline, timers: list[asyncio.TimerHandle]
) -> None:
    """Cancels the step; if it has not stopped a little later (one long kernel cannot notice), answers."""
    if not future.done():
        step.cancel(deadline.step_error())
        loop = future.get_loop()
        timers.append(loop.call_later(BACKSTOP_S, _give_up, future, deadline))


def _give_up(future: asyncio.Future[Any], deadline: Deadline) -> None:
    if not future.done():
        future.set_exception(deadline.step_error())


def _settle(future: asyncio.Future[Any], result: Any, error: OpError | None) -> None:
    if future.done():  # the awaiting task was cancelled meanwhile
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
