"""Fetch structures: nested lists, tuples, dicts and namedtuples of tensor or operation names, flattened for
a step and rebuilt around its results in the caller's shape."""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from poolserve.runtime.kernels.state_ops import UninitializedValue
from poolserve.runtime.types import Fetches


class FetchMapper:
    """Flattens a nested fetch structure into names and rebuilds the results in the same structure."""

    def __init__(self, fetches: Fetches) -> None:
        self.names: list[str] = []
        self._build = self._walk(fetches)

    def _walk(self, f: Any) -> Callable[[list[Any]], Any]:
        if isinstance(f, str):
            i = len(self.names)
            self.names.append(f)
            return lambda values: values[i]
        if isinstance(f, Mapping):
            keys = list(f.keys())
            builders = [self._walk(f[k]) for k in keys]
            return _mapping_builder(f, keys, builders)
        if isinstance(f, tuple) and hasattr(f, "_fields"):  # namedtuple
            builders = [self._walk(x) for x in f]
            nt = type(f)
            return lambda values: nt(*(b(values) for b in builders))
        if isinstance(f, (list, tuple)):
            builders = [self._walk(x) for x in f]
            seq = type(f)
            return lambda values: seq(b(values) for b in builders)
        raise TypeError(
            f"Fetch argument {f!r} has invalid type {type(f).__name__}: a fetch must be a tensor or "
            "operation name, or a list, tuple, dict or namedtuple of them"
        )

    def build(self, values: list[Any]) -> Any:
        return self._build(values)


def _mapping_builder(
    f: Mapping[Any, Any], keys: list[Any], builders: list[Callable[[list[Any]], Any]]
) -> Callable[[list[Any]], Any]:
    """Rebuilds a mapping of the caller's type where it can be made from pairs (dict, OrderedDict, a
    defaultdict with its factory, as TensorFlow does); any other Mapping comes back as a dict. Decided
    here, before the step runs, so that a step never fails after its work is done."""
    kind: Any = type(f) if isinstance(f, dict) else dict
    if isinstance(f, collections.defaultdict):
        factory = f.default_factory
        return lambda values: kind(factory, zip(keys, (b(values) for b in builders), strict=True))
    try:
        kind(zip(keys, keys, strict=True))
    except Exception:
        kind = dict
    return lambda values: kind(zip(keys, (b(values) for b in builders), strict=True))


def is_op_name(name: str) -> bool:
    """A fetch without ':port' names an operation: it is run and its result is None, as in TensorFlow."""
    _, sep, port = name.rpartition(":")
    return not (sep and port.isdigit())


def as_output(value: Any, values: Sequence[Any] = (), fed: int = 0) -> Any:
    """A computed value as ``Session.run`` returns it, as TensorFlow's does: a 0-d one as a numpy scalar
    (``np.float32(6.0)``; ``bytes`` for a string), any other as an array the caller may keep and write: never
    a view of a graph constant, nor of an array the caller fed (``values[:fed]``, the step's feeds), which
    an Identity, a Reshape or a Squeeze of a feed would be."""
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            item = value[()]
            # a resource or a TensorList (a Python object in a 0-d array) stays an array
            return item if value.dtype.kind != "O" or isinstance(item, bytes) else value
        if not value.flags.writeable or (fed and _shares_a_feed(value, values, fed)):
            return value.copy()
        return value
    if isinstance(value, UninitializedValue):
        value._fail()
    return value


def _shares_a_feed(value: np.ndarray[Any, Any], values: Sequence[Any], fed: int) -> bool:
    """Whether ``value`` is one of ``values[:fed]`` or, being a view (only views can be), shares memory
    with one: the memory check only for results that do not own their memory, which few do."""
    view = value.base is not None
    for i in range(fed):
        feed = values[i]
        if feed is value or (view and np.may_share_memory(value, feed)):
            return True
    return False


def outputs(values: Sequence[Any], slots: Sequence[int | None], fed: int) -> list[Any]:
    """A step's results: its ``values`` (by slot, its ``fed`` feeds first) at ``slots`` (None: an operation
    it ran, whose result is None), each ``as_output``, except that a fed tensor fetched is the value fed, as
    TensorFlow returns it (a 0-d array stays one)."""
    return [None if s is None else values[s] if s < fed else as_output(values[s], values, fed) for s in slots]
