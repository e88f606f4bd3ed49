"""tf.Example parsing: ``ParseExampleV2``, what a classify or regress signature (and TF Serving's Classify,
Regress and MultiInference) feeds its serialized Examples through, and TF1's ``ParseExample`` (each key a
scalar input: TF 1.x serving_input_receiver_fns) and ``ParseSingleExample`` (keys as attrs), which parse the
same way.

- Dense features (``tf.io.FixedLenFeature`` of a fully defined shape): a missing feature takes its default
  or is an error when it has none; a feature of the wrong size is an error naming the key and the example.
  Dense features of variable length (``FixedLenSequenceFeature``, a leading -1 in ``dense_shapes``) are
  padded with their default to the longest example.
- Sparse features (``tf.io.VarLenFeature``): a SparseTensor's three parts, as TensorFlow makes them: the
  indices ``[n, rank + 1]`` (example, then position), the values in example order, and the dense shape
  (the batch, then the longest feature's length). A missing feature has no values.
- Ragged features (``tf.io.RaggedFeature`` without partitions): the values in example order and the row
  splits (``[0, ...]``, one more than the examples; empty for a scalar input), int32 or int64.

A feature of the wrong kind is an error naming the key and the example, in TensorFlow's words. The input
is one serialized Example (a scalar) or a vector of them.

Beside them: DecodeRaw, DecodeCSV, SerializeTensor and ParseTensor, DecodeCompressed (ZLIB and GZIP
strings inflated) and DecodeJSONExample (Examples in protobuf's JSON mapping, serialized).
"""

from __future__ import annotations

import base64
import itertools
import json
import math
import re
import struct
import zlib
from typing import Any

import numpy as np
from google.protobuf import json_format
from google.protobuf.message import DecodeError

from poolserve.proto import example_pb2, tensor_pb2, types_pb2
from poolserve.runtime import dtypes
from poolserve.runtime.errors import DataLossError, InvalidArgumentError, UnimplementedError
from poolserve.runtime.kernels._common import _each
from poolserve.runtime.kernels._common import _shape_str as _shape_text
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.kernels.string_ops import number_parser
from poolserve.runtime.node import Node
from poolserve.runtime.tensor import from_ndarray, shape_from_proto, to_ndarray

# the Feature field each dense dtype reads
_KIND: dict[int, str] = {
    types_pb2.DT_FLOAT: "float_list",
    types_pb2.DT_INT64: "int64_list",
    types_pb2.DT_STRING: "bytes_list",
}
_KIND_NAME = {"float_list": "float", "int64_list": "int64", "bytes_list": "string"}


def _outputs(node: Node) -> int:
    ragged = len(node.attr_types("ragged_value_types", []))
    return 3 * node.attr_int("num_sparse", 0) + len(node.attr_types("Tdense", [])) + 2 * ragged


def _dense_shapes(node: Node) -> list[tuple[int, ...]]:
    if "dense_shapes" not in node.attrs:
        return []
    shapes = []
    for proto in node.attrs["dense_shapes"].list.shape:
        shape = shape_from_proto(proto)
        if shape is None or any(d < 0 for d in shape[1:]):
            raise UnimplementedError(
                f"Node '{node.name}' (ParseExampleV2): dense features of unknown shape, or of variable "
                "length in other than their first dimension, are not supported",
                node.name,
            )
        shapes.append(shape)
    return shapes


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


_EMPTY = np.zeros(0, dtype=np.int64)


def _varying(node: Node, examples: list[Any], key: str, code: int) -> list[np.ndarray]:
    """Each example's values of a sparse or ragged feature (none when it is missing)."""
    kind = _KIND[code]
    np_dtype = dtypes.as_numpy_dtype(code)
    rows = []
    for i, example in enumerate(examples):
        feature = example.features.feature.get(key)
        given = feature.WhichOneof("kind") if feature is not None else None
        if given is None:
            rows.append(np.zeros(0, dtype=np_dtype))
            continue
        if given != kind:
            raise InvalidArgumentError(
                f"Name: <unknown>, Key: {key}, Index: {i}.  Data types don't match. Expected type: "
                f"{_KIND_NAME[kind]}, Actual type: {_KIND_NAME[given]}",
                node.name,
            )
        values = getattr(feature, kind).value
        row = np.empty(len(values), dtype=np_dtype)
        row[:] = list(values)
        rows.append(row)
    return rows


def _concat(rows: list[np.ndarray], code: int) -> np.ndarray:
    return np.concatenate(rows) if rows else np.zeros(0, dtype=dtypes.as_numpy_dtype(code))


def _sequence(
    node: Node, examples: list[Any], key: str, code: int, block: tuple[int, ...], default: Any, batch: Any
) -> np.ndarray:
    """A ``FixedLenSequenceFeature``: each example's values in blocks of ``block``, padded with the default
    to the most blocks any example has; a missing feature has none."""
    stride = math.prod(block)
    kind = _KIND[code]
    np_dtype = dtypes.as_numpy_dtype(code)
    rows: list[list[Any]] = []
    for i, example in enumerate(examples):
        feature = example.features.feature.get(key)
        given = feature.WhichOneof("kind") if feature is not None else None
        if given is None:
            rows.append([])
            continue
        if given != kind:
            raise InvalidArgumentError(
                f"Name: <unknown>, Key: {key}, Index: {i}.  Data types don't match. Data type: "
                f"{_KIND_NAME[given]} but expected type: {_KIND_NAME[kind]}",
                node.name,
            )
        row = list(getattr(feature, kind).value)
        if stride == 0 or len(row) % stride:
            raise InvalidArgumentError(
                f"Name: <unknown>, Key: {key}, Index: {i}.  Number of {_KIND_NAME[kind]} values is not a "
                f"multiple of stride length. Saw {len(row)} values but output shape is: "
                f"[{','.join(['?', *map(str, block)])}]",
                node.name,
            )
        rows.append(row)
    longest = max((len(r) // stride for r in rows), default=0) if stride else 0
    fill = default.astype(np_dtype).ravel()[0] if default.size else np.zeros((), np_dtype)[()]
    values = np.full((len(rows), longest * stride), fill, dtype=np_dtype)
    for i, row in enumerate(rows):
        values[i, : len(row)] = row
    return values.reshape(*batch, longest, *block)


Parse = Any  # (serialized, sparse keys, dense keys, ragged keys, dense defaults) -> outputs


def _parser(node: Node, num_sparse: int, ragged: bool) -> Parse:
    """The parse of one ParseExample node, its attrs read and checked once: a function of the serialized
    Examples and the keys and defaults (inputs in ParseExampleV2, inputs or attrs in the v1 ops)."""
    types = node.attr_types("Tdense", [])
    shapes = _dense_shapes(node)
    if len(shapes) != len(types):
        raise InvalidArgumentError(
            f"Node '{node.name}': {len(types)} Tdense but {len(shapes)} dense_shapes", node.name
        )
    sparse_types = node.attr_types("sparse_types", [])
    ragged_types = node.attr_types("ragged_value_types", []) if ragged else []
    split_types = node.attr_types("ragged_split_types", []) if ragged else []
    if len(sparse_types) != num_sparse or len(split_types) != len(ragged_types):
        raise InvalidArgumentError(
            f"Node '{node.name}': {num_sparse} num_sparse but {len(sparse_types)} sparse_types, "
            f"{len(ragged_types)} ragged_value_types but {len(split_types)} ragged_split_types",
            node.name,
        )
    for t in (*types, *sparse_types, *ragged_types):
        if t not in _KIND:
            raise InvalidArgumentError(f"Node '{node.name}': dtype {dtypes.name(t)} is not parseable")
    for t in split_types:
        if t not in (types_pb2.DT_INT32, types_pb2.DT_INT64):
            raise InvalidArgumentError(
                f"Node '{node.name}': ragged split dtype {dtypes.name(t)} is not int32/int64"
            )

    def keys(value: Any, count: int, what: str) -> list[str]:
        got = [_text(k) for k in np.asarray(value).ravel().tolist()]
        if len(got) != count:
            raise InvalidArgumentError(
                f"Node '{node.name}': {len(got)} {what} but {count} expected", node.name
            )
        return got

    def parse(
        serialized: Any, sparse_in: Any, dense_in: Any, ragged_in: Any, defaults: list[Any]
    ) -> tuple[Any, ...]:
        serialized = np.asarray(serialized)
        if serialized.ndim > 1:
            raise InvalidArgumentError(
                f"Expected serialized to be a scalar or vector, got shape: {list(serialized.shape)}",
                node.name,
            )
        sparse_keys = keys(sparse_in, num_sparse, "sparse_keys")
        dense_keys = keys(dense_in, len(types), "dense_keys")
        ragged_keys = keys(ragged_in, len(ragged_types), "ragged_keys")
        defaults = [np.asarray(d) for d in defaults]
        flat = serialized.ravel().tolist()
        examples = []
        for i, data in enumerate(flat):
            try:
                examples.append(example_pb2.Example.FromString(data))
            except DecodeError:
                raise InvalidArgumentError(
                    f"Could not parse example input {i} (node '{node.name}'): not a serialized tf.Example",
                    node.name,
                ) from None
        out = []
        for key, code, shape, default in zip(dense_keys, types, shapes, defaults, strict=True):
            if shape and shape[0] < 0:
                out.append(_sequence(node, examples, key, code, shape[1:], default, serialized.shape))
                continue
            count = math.prod(shape)
            kind = _KIND[code]
            np_dtype = dtypes.as_numpy_dtype(code)
            values = np.empty((len(examples), count), dtype=np_dtype)
            for i, example in enumerate(examples):
                feature = example.features.feature.get(key)
                if feature is None or feature.WhichOneof("kind") is None:
                    if default.size == 0:
                        raise InvalidArgumentError(
                            f"Name: <unknown>, Feature: {key} (data type: {_KIND_NAME[kind]}) is required "
                            f"but could not be found (example {i})",
                            node.name,
                        )
                    values[i] = np.broadcast_to(default.astype(np_dtype), shape).ravel()
                    continue
                given = feature.WhichOneof("kind")
                if given != kind:
                    raise InvalidArgumentError(
                        f"Name: <unknown>, Key: {key}, Index: {i}.  Data types don't match. Data type: "
                        f"{_KIND_NAME[given]} but expected type: {_KIND_NAME[kind]}",
                        node.name,
                    )
                got = getattr(feature, kind).value
                if len(got) != count:
                    raise InvalidArgumentError(
                        f"Name: <unknown>, Key: {key}, Index: {i}.  Number of {_KIND_NAME[kind]} values != "
                        f"expected.  values size: {len(got)} but output shape: {list(shape)}",
                        node.name,
                    )
                values[i] = list(got)
            out.append(values.reshape(serialized.shape + shape))
        scalar = serialized.ndim == 0
        indices, sparse_values, sparse_shapes = [], [], []
        for key, code in zip(sparse_keys, sparse_types, strict=True):
            rows = _varying(node, examples, key, code)
            lengths = np.array([len(r) for r in rows], dtype=np.int64)
            position = np.concatenate([np.arange(n, dtype=np.int64) for n in lengths]) if rows else _EMPTY
            longest = int(lengths.max()) if rows else 0
            if scalar:
                indices.append(position.reshape(-1, 1))
                sparse_shapes.append(np.array([longest], dtype=np.int64))
            else:
                owner = np.repeat(np.arange(len(rows), dtype=np.int64), lengths)
                indices.append(np.stack([owner, position], axis=1).reshape(-1, 2))
                sparse_shapes.append(np.array([len(rows), longest], dtype=np.int64))
            sparse_values.append(_concat(rows, code))
        ragged_values, splits = [], []
        for key, code, split in zip(ragged_keys, ragged_types, split_types, strict=True):
            rows = _varying(node, examples, key, code)
            ragged_values.append(_concat(rows, code))
            ends = np.cumsum([len(r) for r in rows], dtype=np.int64)
            row_splits = _EMPTY if scalar else np.concatenate([_EMPTY[:0], [0], ends])
            splits.append(row_splits.astype(dtypes.as_numpy_dtype(split)))
        return (*indices, *sparse_values, *sparse_shapes, *out, *ragged_values, *splits)

    return parse


@kernel("ParseExampleV2", outputs=_outputs, expensive=True)
def parse_example_v2(node: Node) -> Compute:
    n_dense = len(node.attr_types("Tdense", []))
    parse = _parser(node, node.attr_int("num_sparse", 0), ragged=True)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return tuple(parse(inputs[0], inputs[2], inputs[3], inputs[4], inputs[5 : 5 + n_dense]))

    return compute


def _v1_outputs(node: Node) -> int:
    return 3 * node.attr_int("Nsparse", node.attr_int("num_sparse", 0)) + len(node.attr_types("Tdense", []))


@kernel("ParseExample", outputs=_v1_outputs, expensive=True)
def parse_example(node: Node) -> Compute:
    """TF1's op: sparse and dense keys as one scalar input each (TF 1.x serving_input_receiver_fns)."""
    n_sparse = node.attr_int("Nsparse", 0)
    n_dense = node.attr_int("Ndense", 0)
    parse = _parser(node, n_sparse, ragged=False)
    no_keys = np.zeros(0, dtype=object)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        sparse_keys = inputs[2 : 2 + n_sparse]
        dense_keys = inputs[2 + n_sparse : 2 + n_sparse + n_dense]
        defaults = inputs[2 + n_sparse + n_dense :]
        flat = [np.asarray(k).item() for k in sparse_keys], [np.asarray(k).item() for k in dense_keys]
        return tuple(
            parse(
                inputs[0],
                np.array(flat[0] or [], dtype=object),
                np.array(flat[1] or [], dtype=object),
                no_keys,
                defaults,
            )
        )

    return compute


@kernel("ParseSingleExample", outputs=_v1_outputs, expensive=True)
def parse_single_example(node: Node) -> Compute:
    """One serialized Example (a scalar), the keys as attrs."""
    sparse_keys = np.array(
        [k.encode() if isinstance(k, str) else k for k in node.attr("sparse_keys", [])], dtype=object
    )
    dense_keys = np.array(
        [k.encode() if isinstance(k, str) else k for k in node.attr("dense_keys", [])], dtype=object
    )
    parse = _parser(node, node.attr_int("num_sparse", 0), ragged=False)
    no_keys = np.zeros(0, dtype=object)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        if np.asarray(inputs[0]).ndim != 0:
            raise InvalidArgumentError(
                f"Expected serialized to be a scalar, got shape: {list(np.shape(inputs[0]))}"
            )
        return tuple(parse(inputs[0], sparse_keys, dense_keys, no_keys, inputs[1:]))

    return compute


_RAW_TYPES = frozenset(
    np.dtype(t)
    for t in ("float16", "float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "int64", "bool")
) | {np.dtype(np.complex64), np.dtype(np.complex128)}


@kernel("DecodeRaw")
def decode_raw(node: Node) -> Compute:
    """Bytes to numbers (``tf.io.decode_raw``): each string becomes a row of ``out_type``, in the byte order
    ``little_endian`` says; all strings must be of one length, a multiple of the type's size."""
    out_type = node.attr_dtype("out_type")
    if out_type not in _RAW_TYPES:
        raise InvalidArgumentError(
            f"Node '{node.name}' (op '{node.op}'): attr 'out_type' cannot be {out_type.name}", node.name
        )
    type_name = types_pb2.DataType.Name(node.attr_type("out_type"))[3:].lower()  # TensorFlow's: "float"
    little = node.attr_bool("little_endian", True)
    # a complex number is two floats, each in the byte order asked for
    wire = np.dtype(f"f{out_type.itemsize // 2}") if out_type.kind == "c" else out_type
    if wire.itemsize > 1:
        wire = wire.newbyteorder("<" if little else ">")
    size = out_type.itemsize

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        (strings,) = inputs
        flat = strings.reshape(-1)
        if flat.size == 0:
            return (np.zeros((*strings.shape, 0), out_type),)
        length = len(flat[0])
        lengths = np.fromiter((len(s) for s in flat), np.int64, flat.size)
        if np.any(lengths != length):
            i = int(np.argmax(lengths != length))
            raise InvalidArgumentError(
                "DecodeRaw requires input strings to all be the same size, but element "
                f"{i} has size {length} != {lengths[i]}"
            )
        if length % size:
            raise InvalidArgumentError(
                f"Input to DecodeRaw has length {length} that is not a multiple of {size}, the size of "
                f"{type_name}"
            )
        raw = np.frombuffer(b"".join(flat), wire)
        if out_type == np.bool_:
            raw = raw.view(np.uint8) != 0
        elif out_type.kind == "c":  # the native floats, paired
            raw = raw.astype(wire.newbyteorder("=")).view(out_type)
        return (raw.astype(out_type).reshape(*strings.shape, -1),)

    return compute


_PADDED_RAW_TYPES = frozenset(
    np.dtype(t)
    for t in ("float16", "float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "int64")
)


@kernel("DecodePaddedRaw")
def decode_padded_raw(node: Node) -> Compute:
    """Bytes of any length to rows of ``fixed_length`` bytes of numbers (``tf.io.decode_raw`` with
    ``fixed_length``): longer strings cut, shorter ones padded with zero bytes."""
    out_type = node.attr_dtype("out_type")
    if out_type not in _PADDED_RAW_TYPES:
        raise InvalidArgumentError(
            f"Node '{node.name}' (op '{node.op}'): attr 'out_type' cannot be {out_type.name}", node.name
        )
    wire = out_type.newbyteorder("<" if node.attr_bool("little_endian", True) else ">")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        strings, length_t = inputs
        if length_t.ndim != 0:
            raise InvalidArgumentError(f"k must be scalar, got shape {_shape_text(length_t.shape)}")
        length = int(length_t)
        if length % out_type.itemsize:
            raise InvalidArgumentError(
                f"fixed_length ({length}) must be a multiple of the size of out_type ({out_type.itemsize})"
            )
        if length <= 0:
            raise InvalidArgumentError(f"fixed_length ({length}) must be greater than zero.")
        data = b"".join(bytes(s[:length]).ljust(length, b"\0") for s in strings.reshape(-1))
        raw = np.frombuffer(data, wire).astype(out_type)
        return (raw.reshape(*strings.shape, length // out_type.itemsize),)

    return compute


# --- CSV ---------------------------------------------------------------------------------------------

_CSV_TYPES = (
    types_pb2.DT_FLOAT,
    types_pb2.DT_DOUBLE,
    types_pb2.DT_INT32,
    types_pb2.DT_INT64,
    types_pb2.DT_STRING,
)
_CSV_TYPE_NAMES: dict[int, str] = {
    types_pb2.DT_FLOAT: "float",
    types_pb2.DT_DOUBLE: "double",
    types_pb2.DT_INT32: "int32",
}


def _csv_fields(record: bytes, delim: int, quotes: bool, select: list[int]) -> list[bytes]:
    """TensorFlow's DecodeCSVOp::ExtractFields: a record's fields (only those in ``select`` when given);
    a quoted field may hold delimiters and doubled quotes; a trailing delimiter ends in an empty field."""
    fields: list[bytes] = []
    i, n, parsed, chosen = 0, len(record), 0, 0
    while i < n:
        include = not select or (chosen < len(select) and select[chosen] == parsed)
        chosen += bool(select) and include
        if not quotes or record[i] != 0x22:
            end = record.find(bytes([delim]), i)
            end = n if end < 0 else end
            field = record[i:end]
            if (quotes and b'"' in field) or b"\n" in field or b"\r" in field:
                raise InvalidArgumentError("Unquoted fields cannot have quotes/CRLFs inside")
            i = end + 1
        else:
            i += 1
            parts = []
            while i < n:
                if record[i] == 0x22:
                    if i + 1 == n or record[i + 1] == delim:
                        break
                    if record[i + 1] != 0x22:
                        raise InvalidArgumentError("Quote inside a string has to be escaped by another quote")
                    parts.append(b'"')
                    i += 2
                    continue
                parts.append(record[i : i + 1])
                i += 1
            if not (i < n and record[i] == 0x22 and (i == n - 1 or record[i + 1] == delim)):
                raise InvalidArgumentError("Quoted field has to end with quote followed by delim or end")
            field = b"".join(parts)
            i += 2
        if include:
            fields.append(field)
        parsed += 1
        if select and chosen == len(select):
            break
    if n and record[-1] == delim and (not select or (chosen < len(select) and select[chosen] == parsed)):
        fields.append(b"")
    return fields


def _csv_outputs(node: Node) -> int:
    return len(node.attr_types("OUT_TYPE"))


@kernel("DecodeCSV", outputs=_csv_outputs, expensive=True)
def decode_csv(node: Node) -> Compute:
    """``tf.io.decode_csv``: one output per column, each in the records' shape; an empty field (or one equal
    to ``na_value``) takes its column's default, and is an error when the default is empty (required)."""
    types = node.attr_types("OUT_TYPE")
    for t in types:
        if t not in _CSV_TYPES:
            raise InvalidArgumentError(
                f"Node '{node.name}' (op 'DecodeCSV'): attr 'OUT_TYPE' cannot hold {dtypes.name(t)}",
                node.name,
            )
    delim_text = node.attr_str("field_delim", ",").encode()
    if len(delim_text) != 1:
        raise InvalidArgumentError(f"Node '{node.name}' (op 'DecodeCSV'): field_delim should be only 1 char")
    delim = delim_text[0]
    quotes = node.attr_bool("use_quote_delim", True)
    na_value = node.attr_str("na_value", "").encode()
    select = node.attr_ints("select_cols", [])
    if any(b <= a for a, b in itertools.pairwise(select)) or any(c < 0 for c in select):
        raise InvalidArgumentError(
            f"Node '{node.name}' (op 'DecodeCSV'): select_cols is not strictly increasing."
        )
    if select and len(select) != len(types):
        raise InvalidArgumentError(
            f"Node '{node.name}' (op 'DecodeCSV'): select_cols should match output size"
        )
    out_dtypes = [dtypes.as_numpy_dtype(t) for t in types]
    parsers = [
        None if t == types_pb2.DT_STRING else number_parser(d) for t, d in zip(types, out_dtypes, strict=True)
    ]

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        records, defaults = inputs[0], inputs[1:]
        for f, d in enumerate(defaults):
            if d.size > 1:
                raise InvalidArgumentError(
                    f"There should only be 1 default per field but field {f} has {d.size}"
                )
        columns: list[list[Any]] = [[] for _ in types]
        for r, record in enumerate(records.ravel().tolist()):
            fields = _csv_fields(record, delim, quotes, select)
            if len(fields) != len(types):
                raise InvalidArgumentError(f"Expect {len(types)} fields but have {len(fields)} in record {r}")
            for f, (field, parse) in enumerate(zip(fields, parsers, strict=True)):
                if not field or field == na_value:
                    if defaults[f].size != 1:
                        raise InvalidArgumentError(f"Field {f} is required but missing in record {r}!")
                    columns[f].append(defaults[f].ravel()[0])
                elif parse is None:
                    columns[f].append(field)
                else:
                    value = parse(field)
                    if value is None:
                        name = _CSV_TYPE_NAMES.get(types[f], "int64")
                        text = field.decode("utf-8", "backslashreplace")
                        raise InvalidArgumentError(f"Field {f} in record {r} is not a valid {name}: {text}")
                    columns[f].append(value)
        outs = []
        for values, dtype in zip(columns, out_dtypes, strict=True):
            if dtype.kind == "O":
                col = np.empty(len(values), object)
                col[:] = values
            else:
                with np.errstate(over="ignore"):
                    col = np.array(values, np.float64 if dtype.kind == "f" else dtype).astype(dtype)
            outs.append(col.reshape(records.shape))
        return tuple(outs)

    return compute


# --- serialized tensors --------------------------------------------------------------------------------


@kernel("SerializeTensor")
def serialize_tensor(node: Node) -> Compute:
    """``tf.io.serialize_tensor``: a TensorProto as TensorFlow writes it (``AsProtoTensorContent``: numbers in
    ``tensor_content``, strings in ``string_val``), serialized."""

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        out = np.empty((), object)
        out[()] = from_ndarray(inputs[0]).SerializeToString()
        return (out,)

    return compute


def _tf_type_name(code: int) -> str:
    """TensorFlow's DataTypeString: ``float``, ``double``, ``int32``, ``string``."""
    try:
        return types_pb2.DataType.Name(code)[3:].lower()
    except ValueError:
        return f"unknown dtype enum ({code})"


@kernel("ParseTensor")
def parse_tensor(node: Node) -> Compute:
    """``tf.io.parse_tensor``: a serialized TensorProto (a scalar string) back to a tensor of ``out_type``."""
    code = node.attr_type("out_type")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        (serialized,) = inputs
        if serialized.ndim:
            raise InvalidArgumentError(
                f"Expected `serialized` to be a scalar, got shape: {_shape_text(serialized.shape)}"
            )
        proto = tensor_pb2.TensorProto()
        try:
            proto.ParseFromString(serialized[()])
        except DecodeError:
            raise InvalidArgumentError(
                "Could not parse `serialized` as TensorProto, base64: "
                + base64.b64encode(serialized[()]).decode()
            ) from None
        if proto.dtype != code:
            raise InvalidArgumentError(
                f"Type mismatch between parsed tensor ({_tf_type_name(proto.dtype)}) and dtype "
                f"({_tf_type_name(code)})"
            )
        return (to_ndarray(proto),)

    return compute


# --- DecodeCompressed, DecodeJSONExample --------------------------------------------------------------------

# zlib's window bits for TensorFlow's ZLIB and GZIP options: each reads its own header only
_WINDOW_BITS = {"ZLIB": zlib.MAX_WBITS, "GZIP": zlib.MAX_WBITS | 16}


def _inflate(data: bytes, wbits: int) -> bytes:
    """What TensorFlow's ZlibInputStream reads of ``data``: all of it, or, cut short, what it decoded up to
    the cut; bytes after the end of the stream are ignored."""
    stream = zlib.decompressobj(wbits)
    try:
        return stream.decompress(data) + stream.flush()
    except zlib.error as e:
        # Python's "Error -3 while decompressing data: incorrect header check", in zlib's (TensorFlow's) words
        match = re.match(r"Error (-?\d+) while [a-z ]+: (.*)", str(e))
        code, why = match.groups() if match else ("?", str(e))
        raise DataLossError(f"inflate() failed with error {code}: {why}") from None


@kernel("DecodeCompressed")
def decode_compressed(node: Node) -> Compute:
    """``tf.io.decode_compressed``: each string inflated (ZLIB, GZIP) or copied (the empty type)."""
    kind = node.attr_str("compression_type", "")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        (data,) = inputs
        if kind == "":
            return (data.copy(),)
        if kind == "ZSTD":
            raise UnimplementedError("DecodeCompressed: poolserve inflates ZLIB and GZIP, not ZSTD")
        if kind not in _WINDOW_BITS:
            raise InvalidArgumentError("Only ZLIB, ZSTD, GZIP or NONE are supported compressions")
        wbits = _WINDOW_BITS[kind]
        return (_each(data, lambda s: _inflate(s, wbits)),)

    return compute


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: int, payload: bytes) -> bytes:
    return bytes((tag,)) + _varint(len(payload)) + payload


def _feature_wire(feature: Any) -> bytes:
    """A Feature as protobuf's JSON-to-binary converter writes it: repeated numbers unpacked, one tag each."""
    kind = feature.WhichOneof("kind")
    if kind == "bytes_list":
        return _field(0x0A, b"".join(_field(0x0A, v) for v in feature.bytes_list.value))
    if kind == "float_list":
        return _field(0x12, b"".join(b"\x0d" + struct.pack("<f", v) for v in feature.float_list.value))
    if kind == "int64_list":
        values = feature.int64_list.value
        return _field(0x1A, b"".join(b"\x08" + _varint(v & 0xFFFFFFFFFFFFFFFF) for v in values))
    return b""


def _json_keys(text: str) -> list[str]:
    """The features' names in the order the JSON gives them (the order TensorFlow writes them in)."""
    doc = json.loads(text, object_pairs_hook=dict)
    features = doc.get("features") if isinstance(doc, dict) else None
    feature = features.get("feature") if isinstance(features, dict) else None
    return list(feature) if isinstance(feature, dict) else []


def _json_example(text: bytes) -> bytes:
    try:
        decoded = text.decode("utf-8")
        example = json_format.Parse(decoded, example_pb2.Example())
    except (json_format.ParseError, UnicodeDecodeError) as e:
        raise InvalidArgumentError(f"Error while parsing JSON: {e}") from None
    if not example.HasField("features"):
        return b""
    entries = example.features.feature
    order = [k for k in _json_keys(decoded) if k in entries]
    order += sorted(set(entries) - set(order))
    body = b"".join(
        _field(0x0A, _field(0x0A, k.encode()) + _field(0x12, _feature_wire(entries[k]))) for k in order
    )
    return _field(0x0A, body)


@kernel("DecodeJSONExample")
def decode_json_example(node: Node) -> Compute:
    """``tf.io.decode_json_example``: Examples in protobuf's JSON mapping to serialized Examples, byte for
    byte as TensorFlow writes them (features in the JSON's order, repeated numbers unpacked). A refused
    document names protobuf's (Python's) reason, not TensorFlow's (C++) words for it."""

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return (_each(inputs[0], _json_example),)

    return compute
