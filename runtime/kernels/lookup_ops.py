"""Lookup tables: HashTableV2 and MutableHashTableV2, filled by LookupTableImportV2, LookupTableInsertV2,
InitializeTableV2 or InitializeTableFromTextFileV2, read by LookupTableFindV2, LookupTableSizeV2 and
LookupTableExportV2.

What Keras' StringLookup and IntegerLookup layers, feature columns with a vocabulary and TF Transform
leave in a SavedModel: the init op fills the table (from constants, or from a vocabulary file among the
assets), the serving signature finds keys in it. A table lives in the session's ``ResourceContainer`` as
variables do, under its own namespace, keyed by ``(container, shared_name)`` (the node's name when
shared_name is empty); the handle op outputs a scalar object array holding a ``TableHandle``.

A find is vectorized: numeric keys by a binary search over the table's sorted keys (built once per change
of contents), strings by one dict lookup per key.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from poolserve.runtime.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError
from poolserve.runtime.kernels._common import _shape_str
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node

_TABLES = "lookup table:"  # prefixes the container in the ResourceContainer: tables and variables apart


@dataclass(frozen=True, slots=True)
class TableHandle:
    """What a DT_RESOURCE tensor made by HashTableV2 or MutableHashTableV2 holds."""

    container: str
    name: str
    key_dtype: np.dtype[Any]
    value_dtype: np.dtype[Any]
    mutable: bool

    @property
    def key(self) -> tuple[str, str]:
        return (_TABLES + self.container, self.name)


class Table:
    """A table's contents. Writers hold the lock; a find reads one consistent snapshot (``_view``)."""

    def __init__(self, handle: TableHandle) -> None:
        self.handle = handle
        self.initialized = handle.mutable  # a mutable table is usable empty
        self.lock = threading.Lock()
        self._data: dict[Any, Any] = {}
        self._view: tuple[np.ndarray, np.ndarray] | None = None

    def replace(self, keys: Any, values: Any) -> None:
        with self.lock:
            self._data = dict(zip(_py(keys), _py(values), strict=True))
            self._view = None
            self.initialized = True

    def insert(self, keys: Any, values: Any) -> None:
        with self.lock:
            data = dict(self._data)
            data.update(zip(_py(keys), _py(values), strict=True))
            self._data = data
            self._view = None
            self.initialized = True

    def size(self) -> int:
        return len(self._data)

    def export(self) -> tuple[np.ndarray, np.ndarray]:
        data = self._data
        keys = np.array(list(data), dtype=self.handle.key_dtype).reshape(len(data))
        values = np.array(list(data.values()), dtype=self.handle.value_dtype).reshape(len(data))
        return keys, values

    def find(self, keys: Any, default: Any) -> Any:
        h = self.handle
        if h.key_dtype.kind == "O":
            data = self._data
            get = data.get
            flat = [get(k, default) for k in keys.ravel().tolist()]
            out = np.array(flat, dtype=h.value_dtype) if h.value_dtype.kind != "O" else _objects(flat)
            return out.reshape(keys.shape)
        view = self._view
        if view is None:
            with self.lock:
                k, v = self.export()
                order = np.argsort(k, kind="stable")
                view = self._view = (k[order], v[order])
        sorted_keys, sorted_values = view
        out = np.full(keys.shape, default, dtype=h.value_dtype)
        if sorted_keys.size:
            at = np.searchsorted(sorted_keys, keys)
            at[at == sorted_keys.size] = 0
            hit = sorted_keys[at] == keys
            out[hit] = sorted_values[at[hit]]
        return out


def _py(values: Any) -> list[Any]:
    return np.asarray(values).ravel().tolist()


def _objects(items: list[Any]) -> np.ndarray:
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


def _handle_factory(mutable: bool) -> Any:
    def factory(node: Node) -> Compute:
        handle = TableHandle(
            container=node.attr_str("container", ""),
            name=node.attr_str("shared_name", "") or node.name,
            key_dtype=node.attr_dtype("key_dtype"),
            value_dtype=node.attr_dtype("value_dtype"),
            mutable=mutable,
        )
        out = np.empty((), dtype=object)
        out[()] = handle
        out.flags.writeable = False
        outputs = (out,)

        def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
            tables = ctx.resources.values
            if handle.key not in tables:  # made on the first run, as TensorFlow's kernel does
                tables.setdefault(handle.key, Table(handle))
            return outputs

        return compute

    return factory


kernel("HashTableV2", stateful=True)(_handle_factory(mutable=False))
kernel("MutableHashTableV2", stateful=True)(_handle_factory(mutable=True))


def _table(node: Node, ctx: OpContext, value: Any) -> Table:
    h = value.item() if isinstance(value, np.ndarray) and value.shape == () else value
    if not isinstance(h, TableHandle):
        raise InvalidArgumentError(f"{node.op} expects a lookup table handle, got {h!r}")
    table = ctx.resources.values.get(h.key)
    if not isinstance(table, Table):
        raise NotFoundError(
            f"Resource {h.container or 'localhost'}/{h.name} (a lookup table) does not exist."
        )
    return table


def _check_types(node: Node, table: Table, keys: Any, values: Any | None) -> None:
    h = table.handle
    if keys.dtype != h.key_dtype or (values is not None and values.dtype != h.value_dtype):
        got = f"{keys.dtype}" + (f", {values.dtype}" if values is not None else "")
        raise InvalidArgumentError(
            f"Conflicting key/value dtypes for the table: the table holds {h.key_dtype} keys and "
            f"{h.value_dtype} values, got {got}"
        )


def _filler(replace: bool) -> Any:
    def factory(node: Node) -> Compute:
        def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
            table = _table(node, ctx, inputs[0])
            keys, values = inputs[1], inputs[2]
            _check_types(node, table, keys, values)
            if keys.shape != values.shape:
                raise InvalidArgumentError(
                    f"Expected shape {_shape_str(keys.shape)} for value, got {_shape_str(values.shape)}"
                )
            if node.op == "InitializeTableV2" and table.initialized:
                return ()  # the init op run again: the table keeps what it holds
            if replace:
                table.replace(keys, values)
            else:
                table.insert(keys, values)
            return ()

        return compute

    return factory


kernel("LookupTableImportV2", stateful=True, outputs=0)(_filler(replace=True))
kernel("InitializeTableV2", stateful=True, outputs=0)(_filler(replace=True))
kernel("LookupTableInsertV2", stateful=True, outputs=0)(_filler(replace=False))

_WHOLE_LINE = -2
_LINE_NUMBER = -1


@kernel("InitializeTableFromTextFileV2", stateful=True, outputs=0, blocking=True)
def initialize_table_from_text_file_v2(node: Node) -> Compute:
    key_index = node.attr_int("key_index")
    value_index = node.attr_int("value_index")
    vocab_size = node.attr_int("vocab_size", -1)
    delimiter = node.attr_str("delimiter", "\t")
    offset = node.attr_int("offset", 0)
    for name, index in (("key_index", key_index), ("value_index", value_index)):
        if index < _WHOLE_LINE:
            raise InvalidArgumentError(
                f"Node '{node.name}': attr '{name}' must be -2, -1 or a column, got {index}"
            )

    def column(line: str, number: int, index: int, dtype: np.dtype[Any], path: str) -> Any:
        if index == _LINE_NUMBER:
            return number + offset
        text = line if index == _WHOLE_LINE else _field(line, index, number, path)
        if dtype.kind == "O":
            return text.encode()
        try:
            return dtype.type(text)
        except ValueError:
            raise InvalidArgumentError(
                f"Field {text!r} in line {number} of {path} is not a valid {dtype}"
            ) from None

    def _field(line: str, index: int, number: int, path: str) -> str:
        fields = line.split(delimiter)
        if index >= len(fields):
            raise InvalidArgumentError(
                f"Invalid number of columns in {path} line {number} ({line!r}): expected at least "
                f"{index + 1}, got {len(fields)}"
            )
        return fields[index]

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        table = _table(node, ctx, inputs[0])
        if table.initialized:
            return ()
        name = inputs[1].item() if inputs[1].size == 1 else None
        if not isinstance(name, (bytes, str)):
            raise InvalidArgumentError("filename must be a scalar string")
        path = name.decode() if isinstance(name, bytes) else name
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except OSError as e:
            raise NotFoundError(f"{path}: could not read the vocabulary file ({e.strerror})") from None
        if vocab_size >= 0:
            if len(lines) < vocab_size:
                raise InvalidArgumentError(
                    f"Invalid vocab_size in {path}: expected {vocab_size} lines, the file has {len(lines)}"
                )
            lines = lines[:vocab_size]
        h = table.handle
        keys = [column(line, i, key_index, h.key_dtype, path) for i, line in enumerate(lines)]
        values = [column(line, i, value_index, h.value_dtype, path) for i, line in enumerate(lines)]
        if len(set(keys)) != len(keys):
            raise FailedPreconditionError(f"HashTable has different value for same key in {path}")
        table.replace(_array(keys, h.key_dtype), _array(values, h.value_dtype))
        return ()

    return compute


def _array(items: list[Any], dtype: np.dtype[Any]) -> np.ndarray:
    return _objects(items) if dtype.kind == "O" else np.array(items, dtype=dtype)


@kernel("LookupTableFindV2", stateful=True)
def lookup_table_find_v2(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        table = _table(node, ctx, inputs[0])
        keys, default = inputs[1], inputs[2]
        _check_types(node, table, keys, None)
        if not table.initialized:
            raise FailedPreconditionError("Table not initialized.")
        if default.size != 1:
            raise InvalidArgumentError(
                f"Expected a scalar default value, got shape {_shape_str(default.shape)}"
            )
        return (table.find(keys, default.item()),)

    return compute


@kernel("LookupTableSizeV2", stateful=True)
def lookup_table_size_v2(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return (np.asarray(_table(node, ctx, inputs[0]).size(), dtype=np.int64),)

    return compute


@kernel("LookupTableExportV2", stateful=True, outputs=2)
def lookup_table_export_v2(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return _table(node, ctx, inputs[0]).export()

    return compute
