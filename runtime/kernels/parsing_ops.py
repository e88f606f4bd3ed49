"""tf.Example parsing: ``ParseExampleV2`` with dense features, what a classify or regress signature (and TF
Serving's Classify and Regress) feeds its serialized Examples through.

Dense features only (``tf.io.FixedLenFeature`` of a fully defined shape): a missing feature takes its default
or is an error when it has none; a feature of the wrong kind or size is an error naming the key and the
example. Sparse and ragged features are UNIMPLEMENTED.
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


@kernel("ParseExampleV2", outputs=_outputs, expensive=True)
def parse_example_v2(node: Node) -> Compute:
    types = node.attr_types("Tdense", [])
    shapes = _dense_shapes(node)
    if len(shapes) != len(types):
        raise InvalidArgumentError(
            f"Node '{node.name}': {len(types)} Tdense but {len(shapes)} dense_shapes", node.name
        )
    if node.attr_int("num_sparse", 0) or node.attr_types("ragged_value_types", []):
        raise UnimplementedError(
            f"Node '{node.name}' (ParseExampleV2): sparse and ragged features are not supported", node.name
        )
    for t in types:
        if t not in _KIND:
            raise InvalidArgumentError(f"Node '{node.name}': dense dtype {dtypes.name(t)} is not parseable")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        serialized = np.asarray(inputs[0])
        dense_keys = [_text(k) for k in np.asarray(inputs[3]).ravel().tolist()]
        defaults = [np.asarray(d) for d in inputs[5 : 5 + len(types)]]
        if len(dense_keys) != len(types):
            raise InvalidArgumentError(
                f"Node '{node.name}': {len(dense_keys)} dense_keys but {len(types)} Tdense", node.name
            )
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
        return tuple(out)

    return compute
