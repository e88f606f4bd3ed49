"""What a session's calls resolve to, compiled once per graph: a ``Plan`` per (feeds, fetches, targets,
debug watches), and for flat fetch lists (what servers send) the whole call signature, so that a repeated
call only checks its fed values. A session makes a new ``Calls`` when its graph is extended."""

from __future__ import annotations

import threading
from typing import Any

from poolserve.proto import config_pb2
from poolserve.runtime import optimizer
from poolserve.runtime.debug import debug_wrapper, watch_summary
from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.executor import ConstantFolder, Plan
from poolserve.runtime.fetches import FetchMapper, is_op_name
from poolserve.runtime.graph import Graph, prepare_feed
from poolserve.runtime.types import Feeds, Fetches, TensorId

# Resolved call signatures kept per graph; past this many (a client inventing fetch lists) start over.
_MAX_SIGNATURES = 1024


class Signature:
    """What a call resolved: the plan, the feeds in plan order, and how to shape the results: per name of
    the mapper, the index of its value among the plan's fetches and the step's slot holding it (None for an
    operation run)."""

    __slots__ = ("fetch_index", "mapper", "out_slots", "plan")

    def __init__(self, plan: Plan, mapper: FetchMapper, fetch_index: list[int | None]) -> None:
        self.plan = plan
        self.mapper = mapper
        self.fetch_index = fetch_index
        self.out_slots = [None if i is None else plan.fetch_slots[i] for i in fetch_index]


class Calls:
    """The plans and call signatures of one graph (see the module docstring)."""

    def __init__(self, graph: Graph, folder: ConstantFolder, config: config_pb2.ConfigProto) -> None:
        self.graph = graph
        self.folder = folder
        self._config = config
        self.plans: dict[str, Plan] = {}
        self.signatures: dict[tuple[Any, ...], tuple[Signature, list[TensorId]]] = {}
        self._lock = threading.Lock()

    def plan(
        self,
        feed_ids: list[TensorId],
        fetch_ids: list[TensorId],
        targets: list[str],
        options: config_pb2.RunOptions | None,
        partial: bool = False,
    ) -> Plan:
        watches = watch_summary(options)
        feeds = [f"{n}:{p}" for n, p in feed_ids]
        fetches = [f"{n}:{p}" for n, p in fetch_ids]
        key = f"{','.join(feeds)}->{','.join(fetches)}/{','.join(targets)}/{int(partial)}/{watches}"
        plan = self.plans.get(key)
        if plan is not None:
            return plan
        sorted_key = (
            f"{','.join(sorted(feeds))}->{','.join(sorted(fetches))}/{','.join(sorted(targets))}/"
            f"{int(partial)}/{watches}"
        )
        with self._lock:
            plan = self.plans.get(sorted_key)
            if plan is None:
                wrap = debug_wrapper(options.debug_options) if watches and options is not None else None
                plan = Plan(
                    self.graph,
                    sorted(feed_ids),
                    sorted(fetch_ids),
                    sorted(targets),
                    folder=self.folder,
                    wrap=wrap,
                )
                rewrites = optimizer.passes(self._config)
                if rewrites is not None and wrap is None:  # debug watches see the graph as written
                    plan = optimizer.optimize(plan, self.folder, rewrites)
                self.plans[sorted_key] = plan
            self.plans[key] = plan
        return plan

    def resolve(
        self, fetches: Fetches, feed_dict: Feeds | None, options: config_pb2.RunOptions | None
    ) -> tuple[Signature, list[Any]]:
        """The call's signature and its feeds in plan order. Flat fetch lists (what servers send) are
        resolved once per (fetches, feed names, watches); later calls only check the fed values."""
        feed_names = tuple(feed_dict) if feed_dict else ()
        key: tuple[Any, ...] | None = None
        if isinstance(fetches, str) or (
            type(fetches) in (list, tuple) and all(isinstance(f, str) for f in fetches)
        ):
            key = (type(fetches), fetches if isinstance(fetches, str) else tuple(fetches), feed_names)
            key += (watch_summary(options),)
            cached = self.signatures.get(key)
            if cached is not None:
                sig, feed_ids = cached
                graph = self.graph
                feeds = feed_dict or {}
                by_id = {
                    t: prepare_feed(graph, t, feeds[n]) for n, t in zip(feed_names, feed_ids, strict=True)
                }
                return sig, [by_id[t] for t in sig.plan.feeds]
        sig, feed_values = self._resolve_uncached(fetches, feed_dict, options)
        if key is not None:
            if len(self.signatures) >= _MAX_SIGNATURES:
                self.signatures.clear()
            graph = self.graph
            self.signatures[key] = (sig, [graph.tensor(n) for n in feed_names])
        return sig, [feed_values[t] for t in sig.plan.feeds]

    def _resolve_uncached(
        self, fetches: Fetches, feed_dict: Feeds | None, options: config_pb2.RunOptions | None
    ) -> tuple[Signature, dict[TensorId, Any]]:
        graph = self.graph
        feed_values: dict[TensorId, Any] = {}
        for name, value in (feed_dict or {}).items():
            tid = graph.feed_tensor(name)
            if tid in feed_values:
                raise InvalidArgumentError(f"Tensor '{name}' is fed twice")
            feed_values[tid] = prepare_feed(graph, tid, value)
        return self.bind(fetches, list(feed_values), options), feed_values

    def bind(
        self, fetches: Fetches, feed_ids: list[TensorId], options: config_pb2.RunOptions | None
    ) -> Signature:
        """The signature of fetching ``fetches`` with these tensors fed (their plan, compiled once)."""
        graph = self.graph
        mapper = FetchMapper(fetches)
        fetch_ids: list[TensorId] = []
        targets: list[str] = []
        fetch_index: list[int | None] = []
        seen: dict[TensorId, int] = {}
        for name in mapper.names:
            if is_op_name(name):
                graph.fetch_node(name)
                if name not in targets:
                    targets.append(name)
                fetch_index.append(None)
                continue
            tid = graph.fetch_tensor(name)
            if tid not in seen:
                seen[tid] = len(fetch_ids)
                fetch_ids.append(tid)
            fetch_index.append(seen[tid])
        plan = self.plan(feed_ids, fetch_ids, targets, options)
        # results come back in plan order: map the caller's unique fetches onto it
        position = {t: i for i, t in enumerate(plan.fetches)}
        order = [position[t] for t in fetch_ids]
        return Signature(plan, mapper, [None if i is None else order[i] for i in fetch_index])
