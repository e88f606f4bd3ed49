"""Partial runs (``Session.partial_run_setup`` and ``partial_run``): one step fed and fetched over several
calls. Each call runs only the nodes its fetches need that have not run yet, and keeps what they computed
for the calls after it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.executor import ConstantFolder, Plan
from poolserve.runtime.fetches import FetchMapper, as_output, is_op_name
from poolserve.runtime.graph import Graph, prepare_feed
from poolserve.runtime.types import Feeds, Fetches, TensorId

# runs a plan with these feed values and returns every tensor it computed
RunPlan = Callable[[Plan, list[Any]], dict[TensorId, Any]]


class _PartialRun:
    def __init__(self, feeds: set[TensorId], fetches: set[TensorId], targets: set[str]) -> None:
        self.feeds = feeds
        self.fetches = fetches
        self.targets = targets
        self.values: dict[TensorId, Any] = {}
        self.fetched: set[TensorId] = set()
        self.ran: set[str] = set()


class PartialRuns:
    """A session's open partial runs, by handle. A run is dropped once all it declared was fetched."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, _PartialRun] = {}
        self._ids = 0

    def setup(self, graph: Graph, fetches: Fetches, feeds: Sequence[str] | None) -> str:
        mapper = FetchMapper(fetches)
        fetch_names = set()
        targets = set()
        for name in mapper.names:
            if is_op_name(name):
                graph.fetch_node(name)
                targets.add(name)
            else:
                fetch_names.add(graph.fetch_tensor(name))
        feed_ids = {graph.feed_tensor(f) for f in feeds or ()}
        with self._lock:
            self._ids += 1
            handle = f"partial_run_{self._ids}"
            self._runs[handle] = _PartialRun(feed_ids, fetch_names, targets)
        return handle

    def run(
        self,
        graph: Graph,
        folder: ConstantFolder,
        handle: str,
        fetches: Fetches,
        feed_dict: Feeds | None,
        run_plan: RunPlan,
    ) -> Any:
        state = self._runs.get(handle)
        if state is None:
            raise InvalidArgumentError(
                f"The partial run handle '{handle}' is not valid: call partial_run_setup first"
            )
        mapper = FetchMapper(fetches)
        wanted: list[TensorId] = []
        targets: list[str] = []
        for name in mapper.names:
            if is_op_name(name):
                if name not in state.targets:
                    raise InvalidArgumentError(f"Target '{name}' was not declared in partial_run_setup")
                targets.append(name)
                continue
            tid = graph.fetch_tensor(name)
            if tid not in state.fetches:
                raise InvalidArgumentError(f"Fetch '{name}' was not declared in partial_run_setup")
            if tid in state.fetched:
                raise InvalidArgumentError(f"Tensor '{name}' has already been fetched in this partial run")
            wanted.append(tid)
        new_values: dict[TensorId, Any] = {}
        for name, value in (feed_dict or {}).items():
            tid = graph.feed_tensor(name)
            if tid not in state.feeds:
                raise InvalidArgumentError(f"Tensor '{name}' was not declared as a feed in partial_run_setup")
            if tid in state.values:
                raise InvalidArgumentError(f"Tensor '{name}' has already been fed in this partial run")
            new_values[tid] = prepare_feed(graph, tid, value)
        values = {**state.values, **new_values}
        todo = sorted({t for t in wanted if t not in values})
        fresh_targets = sorted({t for t in targets if t not in state.ran})
        if todo or fresh_targets:
            known = sorted(values)
            plan = Plan(graph, known, todo, fresh_targets, folder=folder)
            missing = {
                f"{n}:{p}"
                for pn in plan.nodes
                for n, p in pn.node.inputs
                if (n, p) in state.feeds and (n, p) not in values
            }
            if missing:
                raise InvalidArgumentError(
                    f"Partial run: the fetches need feed(s) not given yet: {', '.join(sorted(missing))}"
                )
            values.update(run_plan(plan, [values[t] for t in known]))
            state.ran.update(pn.name for pn in plan.nodes)
            state.ran.update(fresh_targets)
        state.values = values  # only once the whole call has succeeded
        state.fetched.update(wanted)
        results: list[Any] = []
        feeds = [value for tid, value in state.values.items() if tid in state.feeds]
        for name in mapper.names:
            if is_op_name(name):
                results.append(None)
                continue
            fetched = graph.tensor(name)
            value = state.values[fetched]
            # a fed tensor fetched is the value fed, as TensorFlow returns it
            results.append(value if fetched in state.feeds else as_output(value, feeds, len(feeds)))
        if state.fetched >= state.fetches and state.targets <= state.ran:
            with self._lock:
                self._runs.pop(handle, None)
        return mapper.build(results)
