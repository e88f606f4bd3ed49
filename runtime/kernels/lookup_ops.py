"""Lookup tables: HashTableV2, MutableHashTableV2 and MutableDenseHashTableV2, filled by
LookupTableImportV2, LookupTableInsertV2, InitializeTableV2 or InitializeTableFromTextFileV2, emptied by
LookupTableRemoveV2, read by LookupTableFindV2, LookupTableSizeV2 and LookupTableExportV2.

What Keras' StringLookup and IntegerLookup layers, feature columns with a vocabulary and TF Transform
leave in a SavedModel: the init op fills the table (from constants, or from a vocabulary file among the
assets), the serving signature finds keys in it. A table lives in the session's ``ResourceContainer`` as
variables do, under its own namespace, keyed by ``(container, shared_name)`` (the node's name when
shared_name is empty); the handle op outputs a scalar object array holding a ``TableHandle``.

A find is vectorized: numeric keys by a binary search over the table's sorted keys (built once per change
of contents), strings by one dict lookup per key. A dense table (``tf.lookup.experimental.DenseHashTable``)
is TensorFlow's open addressing repeated bucket for bucket (``DenseTable``), as its export and checkpoints
hold the buckets themselves.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from poolserve.runtime.errors import (
    FailedPreconditionError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    UnimplementedError,
)
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

    def write(self, op: str, keys: Any, values: Any) -> None:
        if keys.shape != values.shape:
            raise InvalidArgumentError(
                f"Expected shape {_shape_str(keys.shape)} for value, got {_shape_str(values.shape)}"
            )
        if op == "LookupTableInsertV2":
            self.insert(keys, values)
        elif op != "InitializeTableV2" or not self.initialized:  # an init op run again changes nothing
            self.replace(keys, values)

    def remove(self, keys: Any) -> None:
        if not self.handle.mutable:
            raise UnimplementedError("Remove not supported by InitializableLookupTable implementations")
        with self.lock:
            data = dict(self._data)
            for k in _py(keys):
                data.pop(k, None)
            self._data = data
            self._view = None

    def lookup(self, keys: Any, default: Any) -> Any:
        if not self.initialized:
            raise FailedPreconditionError("Table not initialized.")
        if default.size != 1:
            raise InvalidArgumentError(
                f"Expected a scalar default value, got shape {_shape_str(default.shape)}"
            )
        return self.find(keys, default.item())

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


_U64_MASK = (1 << 64) - 1


def _key_hashes(keys: Any) -> list[int]:
    """TensorFlow's dense-table hash of each row of ``keys`` ([n, key size]): an integer is its own hash (as
    uint64), a string its Hash64; the elements of a vector key are chained by Hash64Combine."""
    from poolserve.runtime.kernels.string_ops import hash64

    n, size = keys.shape
    if keys.dtype.kind == "O":
        columns = [hash64([bytes(b) for b in keys[:, j].tolist()]) for j in range(size)]
    else:
        columns = [keys[:, j].astype(np.uint64) for j in range(size)]
    if size == 1:
        return [int(h) for h in columns[0].tolist()]
    out = [0] * n
    for column in columns:
        for i, h in enumerate(column.tolist()):
            a = out[i]
            out[i] = a ^ ((int(h) + 0x9E3779B97F4A7800 + (a << 10) + (a >> 4)) & _U64_MASK)
    return out


class DenseTable:
    """A MutableDenseHashTableV2: TensorFlow's open addressing with quadratic probing over a power-of-two
    number of buckets, the key buckets holding ``empty_key`` where free and ``deleted_key`` where removed.
    An insert first grows the table (doubling, every entry re-inserted in bucket order) while its entries
    plus all the keys inserted would pass ``max_load_factor`` of the buckets; it then takes the first free
    or removed bucket on the key's probe sequence, unless it meets the key first. Keys are rows of
    ``[n] + key shape`` tensors; the buckets are exported as ``[buckets, key size]`` and ``[buckets, value
    size]`` matrices, which is also what an import (a checkpoint's restore) takes."""

    def __init__(
        self,
        handle: TableHandle,
        value_shape: tuple[int, ...],
        empty: Any,
        deleted: Any,
        buckets: int,
        max_load: float,
    ) -> None:
        self.handle = handle
        self.initialized = True
        self.lock = threading.Lock()
        if not 0 < max_load < 1:
            raise InvalidArgumentError(f"max_load_factor must be between 0 and 1, got: {max_load:g}")
        if len(value_shape) > 1:
            raise InvalidArgumentError(
                f"Empty value must be a scalar or a vector, got shape {_shape_str(value_shape)}"
            )
        if empty.ndim > 1:
            raise InvalidArgumentError(
                f"Empty key must be a scalar or a vector, got shape {_shape_str(empty.shape)}"
            )
        if deleted.shape != empty.shape:
            raise InvalidArgumentError(
                "Empty and deleted keys must have same shape, got shapes: "
                f"{_shape_str(empty.shape)} and {_shape_str(deleted.shape)}"
            )
        self.key_shape = empty.shape
        self.value_shape = value_shape
        self._key_size = empty.size
        self._value_size = int(np.prod(value_shape))
        self._empty = tuple(_py(empty))
        self._deleted = tuple(_py(deleted))
        if self._empty == self._deleted:
            raise InvalidArgumentError("Empty and deleted keys cannot be equal")
        self._max_load = np.float32(max_load)  # TensorFlow compares in float
        self._allocate(buckets)

    def _allocate(self, buckets: int) -> None:
        if buckets < 4 or buckets & (buckets - 1):
            raise InvalidArgumentError(
                f"Number of buckets must be at least 4 and a power of 2, got: {buckets}"
            )
        self._keys: list[tuple[Any, ...]] = [self._empty] * buckets
        self._values = np.zeros((buckets, self._value_size), self.handle.value_dtype)
        self._count = 0

    def _check_key_shape(self, keys: Any) -> None:
        if keys.shape[max(keys.ndim - len(self.key_shape), 0) :] != self.key_shape:
            raise InvalidArgumentError(
                f"Input key shape {_shape_str(keys.shape)} must end with the table's key shape "
                f"{_shape_str(self.key_shape)}"
            )

    def _rows(self, keys: Any) -> tuple[list[tuple[Any, ...]], list[int]]:
        """The keys as rows of [n, key size] (n their first dimension: a single vector key is refused, as
        TensorFlow refuses it) and their hashes."""
        self._check_key_shape(keys)
        n = 1 if keys.ndim == 0 else keys.shape[0]
        if keys.size != n * self._key_size:
            raise InvalidArgumentError(
                f"Expected key shape {_shape_str((n, *self.key_shape))} got {_shape_str(keys.shape)}"
            )
        matrix = keys.reshape(n, self._key_size)
        return [tuple(r) for r in matrix.tolist()], _key_hashes(matrix)

    def _refuse_reserved(self, key: tuple[Any, ...]) -> None:
        if key == self._empty:
            raise InvalidArgumentError("Using the empty_key as a table key is not allowed")
        if key == self._deleted:
            raise InvalidArgumentError("Using the deleted_key as a table key is not allowed")

    def _probe(self, h: int) -> Iterator[int]:
        mask = len(self._keys) - 1
        at, probes = h & mask, 0
        while probes < len(self._keys):
            yield at
            probes += 1
            at = (at + probes) & mask  # quadratic probing
        raise InternalError("Internal error in MutableDenseHashTable")

    def _insert_rows(
        self, rows: list[tuple[Any, ...]], hashes: list[int], values: Any, skip_reserved: bool
    ) -> None:
        keys = self._keys
        for i, (key, h) in enumerate(zip(rows, hashes, strict=True)):
            if key in (self._empty, self._deleted):
                if skip_reserved:
                    continue
                self._refuse_reserved(key)
            for at in self._probe(h):
                if keys[at] == key:
                    self._values[at] = values[i]
                    break
                if keys[at] in (self._empty, self._deleted):
                    self._count += 1
                    keys[at] = key
                    self._values[at] = values[i]
                    break

    def write(self, op: str, keys: Any, values: Any) -> None:
        """An insert, or an import (LookupTableImportV2: the buckets, as ``export`` gives them)."""
        self._check_key_shape(keys)
        imported = op != "LookupTableInsertV2"
        key_dims = 1 if imported else len(self.key_shape)  # the buckets hold keys and values as vectors
        value_shape = (self.value_shape or (1,)) if imported else self.value_shape
        expected = (*keys.shape[: max(keys.ndim - key_dims, 0)], *value_shape)
        if values.shape != expected:
            raise InvalidArgumentError(
                f"Expected shape {_shape_str(expected)} for value, got {_shape_str(values.shape)}"
            )
        if imported:
            with self.lock:
                self._import(keys, values)
            return
        rows, hashes = self._rows(keys)
        with self.lock:
            pending = self._count + len(rows)
            buckets = len(self._keys)
            if pending > np.float32(buckets) * self._max_load:
                while pending > np.float32(buckets) * self._max_load:
                    buckets <<= 1
                old_keys, old_values = self._keys, self._values
                self._allocate(buckets)
                old = _array([k for key in old_keys for k in key], self.handle.key_dtype)
                old_hashes = _key_hashes(old.reshape(len(old_keys), self._key_size))
                self._insert_rows(old_keys, old_hashes, old_values, skip_reserved=True)
            self._insert_rows(rows, hashes, values.reshape(len(rows), self._value_size), skip_reserved=False)

    def _import(self, keys: Any, values: Any) -> None:
        n = keys.shape[0] if keys.ndim else 1
        self._keys = [tuple(r) for r in keys.reshape(n, self._key_size).tolist()]
        self._values = np.array(values, dtype=self.handle.value_dtype).reshape(n, self._value_size)
        self._count = sum(k not in (self._empty, self._deleted) for k in self._keys)

    def replace(self, keys: Any, values: Any) -> None:
        with self.lock:
            self._import(keys, values)

    def remove(self, keys: Any) -> None:
        rows, hashes = self._rows(keys)
        with self.lock:
            table = self._keys
            for key, h in zip(rows, hashes, strict=True):
                self._refuse_reserved(key)
                for at in self._probe(h):
                    if table[at] == key:
                        self._count -= 1
                        table[at] = self._deleted
                        break
                    if table[at] == self._empty:
                        break

    def lookup(self, keys: Any, default: Any) -> Any:
        self._check_key_shape(keys)
        full = (*keys.shape[: keys.ndim - len(self.key_shape)], *self.value_shape)
        if default.shape not in (self.value_shape, full):
            raise InvalidArgumentError(
                f"Expected shape {_shape_str(self.value_shape)} or {_shape_str(full)} for default value, got "
                f"{_shape_str(default.shape)}"
            )
        rows, hashes = self._rows(keys)
        fill = default.reshape(-1)[: self._value_size]  # TensorFlow reads the first value of a full default
        out = np.empty((len(rows), self._value_size), self.handle.value_dtype)
        with self.lock:
            table, values = self._keys, self._values
            for i, (key, h) in enumerate(zip(rows, hashes, strict=True)):
                self._refuse_reserved(key)
                for at in self._probe(h):
                    if table[at] == key:
                        out[i] = values[at]
                        break
                    if table[at] == self._empty:
                        out[i] = fill
                        break
        return out.reshape(full)

    def size(self) -> int:
        return self._count

    def export(self) -> tuple[np.ndarray, np.ndarray]:
        with self.lock:
            n = len(self._keys)
            flat = [k for key in self._keys for k in key]
            keys = _array(flat, self.handle.key_dtype).reshape(n, self._key_size)
            return keys, self._values.copy()


def _py(values: Any) -> list[Any]:
    return np.asarray(values).ravel().tolist()


def _objects(items: list[Any]) -> np.ndarray:
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


def _table_handle(node: Node, mutable: bool) -> TableHandle:
    """The handle a table op's attrs name (its container, shared name and dtypes)."""
    return TableHandle(
        container=node.attr_str("container", ""),
        name=node.attr_str("shared_name", "") or node.name,
        key_dtype=node.attr_dtype("key_dtype"),
        value_dtype=node.attr_dtype("value_dtype"),
        mutable=mutable,
    )


def _handle_tensor(handle: TableHandle) -> np.ndarray:
    """The table op's output: a read-only 0-d resource tensor holding its handle, the same every step."""
    out = np.empty((), dtype=object)
    out[()] = handle
    out.flags.writeable = False
    return out


def _handle_factory(mutable: bool) -> Any:
    def factory(node: Node) -> Compute:
        handle = _table_handle(node, mutable)
        outputs = (_handle_tensor(handle),)

        def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
            tables = ctx.resources.values
            if handle.key not in tables:  # made on the first run, as TensorFlow's kernel does
                tables.setdefault(handle.key, Table(handle))
            return outputs

        return compute

    return factory


kernel("HashTableV2", stateful=True)(_handle_factory(mutable=False))
kernel("MutableHashTableV2", stateful=True)(_handle_factory(mutable=True))


@kernel("MutableDenseHashTableV2", stateful=True)
def mutable_dense_hash_table_v2(node: Node) -> Compute:
    handle = _table_handle(node, mutable=True)
    value_shape = node.attr_shape("value_shape", ()) or ()
    buckets = node.attr_int("initial_num_buckets", 131072)
    max_load = node.attr_float("max_load_factor", 0.8)
    outputs = (_handle_tensor(handle),)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        tables = ctx.resources.values
        if handle.key not in tables:  # made on the first run, from that run's empty and deleted keys
            empty, deleted = inputs
            if empty.dtype != handle.key_dtype or deleted.dtype != handle.key_dtype:
                raise InvalidArgumentError(
                    f"empty_key and deleted_key must be {handle.key_dtype}, got {empty.dtype} and "
                    f"{deleted.dtype}"
                )
            table = DenseTable(handle, value_shape, empty, deleted, buckets, max_load)
            tables.setdefault(handle.key, table)
        return outputs

    return compute


def _table(node: Node, ctx: OpContext, value: Any) -> Table | DenseTable:
    h = value.item() if isinstance(value, np.ndarray) and value.shape == () else value
    if not isinstance(h, TableHandle):
        raise InvalidArgumentError(f"{node.op} expects a lookup table handle, got {h!r}")
    table = ctx.resources.values.get(h.key)
    if not isinstance(table, (Table, DenseTable)):
        raise NotFoundError(
            f"Resource {h.container or 'localhost'}/{h.name} (a lookup table) does not exist."
        )
    return table


def _check_types(node: Node, table: Table | DenseTable, keys: Any, values: Any | None) -> None:
    h = table.handle
    if keys.dtype != h.key_dtype or (values is not None and values.dtype != h.value_dtype):
        got = f"{keys.dtype}" + (f", {values.dtype}" if values is not None else "")
        raise InvalidArgumentError(
            f"Conflicting key/value dtypes for the table: the table holds {h.key_dtype} keys and "
            f"{h.value_dtype} values, got {got}"
        )


@kernel("LookupTableImportV2", "InitializeTableV2", "LookupTableInsertV2", stateful=True, outputs=0)
def lookup_table_write(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        table = _table(node, ctx, inputs[0])
        keys, values = inputs[1], inputs[2]
        _check_types(node, table, keys, values)
        table.write(node.op, keys, values)
        return ()

    return compute


@kernel("LookupTableRemoveV2", stateful=True, outputs=0)
def lookup_table_remove_v2(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        table = _table(node, ctx, inputs[0])
        _check_types(node, table, inputs[1], None)
        table.remove(inputs[1])
        return ()

    return compute


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
        return (table.lookup(keys, default),)

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
