"""tf.Example parsing: ``ParseExampleV2``, what a classify or regress signature (and TF Serving's Classify,
Regress and MultiInference) feeds its serialized Examples through, and TF1's ``ParseExample`` (each key a
scalar input: TF 1.x serving_input_receiver_fns) and ``ParseSingleExample`` (keys as attrs), which parse the
same way.

- Dense features (``tf.io.FixedLenFeature`` of a fully defined shape): a missing feature takes its default
  or is an error when it has none; a feature of the wrong size is an error naming the key and the example.
  Variable-shape dense features (``FixedLenSequenceFeature``) are UNIMPLEMENTED.
- Sparse features (``tf.io.VarLenFeature``): a SparseTensor's three parts, as TensorFlow makes them: the
  indices ``[n, rank + 1]`` (example, then position), the values in example order, and the dense shape
  (the batch, then the longest feature's length). A missing feature has no values.
- Ragged features (``tf.io.RaggedFeature`` without partitions): the values in example order and the row
  splits (``[0, ...]``, one more than the examples; empty for a scalar input), int32 or int64.

A feature of the wrong kind is an error naming the key and the example, in TensorFlow's words. The input
is one serialized Example (a scalar) or a vector of them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from poolserve.proto import example_pb2, types_pb2
from poolserve.runtime import dtypes
from poolserve.runtime.errors import InvalidArgumentError, UnimplementedError
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node
from poolserve.runtime.tensor import shape_from_proto

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
        if shape is None or any(d < 0 for d in shape):
            raise UnimplementedError(
                f"Node '{node.name}' (ParseExampleV2): dense features of variable shape "
                "(FixedLenSequenceFeature) are not supported",
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
