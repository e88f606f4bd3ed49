"""Fetch structures: nested lists, tuples, dicts and namedtuples of tensor or operation names, flattened for
a step and rebuilt around its results in the caller's shape."""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping
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


def as_output(value: Any) -> Any:
    """Fetched values are the caller's to keep: fresh writable arrays, never views of graph constants."""
    if isinstance(value, np.ndarray):
        return value if value.flags.writeable else value.copy()
    if isinstance(value, np.generic):
        return np.asarray(value)
    if isinstance(value, UninitializedValue):
        value._fail()
    return value
