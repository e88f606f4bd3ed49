"""The dtypes of op outputs, from TensorFlow's OpDefs (runtime/op_types.py). Expected values are what
TensorFlow 2.21's op definitions give for these attrs."""

from __future__ import annotations

import numpy as np

from poolserve.proto import types_pb2
from poolserve.runtime import kernels  # noqa: F401  (registers every kernel)
from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.kernels.registry import KERNELS
from poolserve.runtime.node import Node
from poolserve.runtime.op_types import OUTPUTS, output_dtype


def test_every_kernel_has_its_outputs_in_the_table() -> None:
    # a new kernel: run tools/make_op_types.py (or list a poolserve-only op in op_types._OWN)
    ours = {op for op, k in KERNELS.items() if k.factory.__module__.startswith("poolserve.runtime.kernels")}
    assert len(ours) > 400 and sorted(ours - set(OUTPUTS)) == []  # tests register kernels of their own


def nodes(b: GraphBuilder) -> dict[str, Node]:
    return {nd.name: Node(nd) for nd in b.graph_def.node}


def test_dtypes_follow_the_definition_and_the_nodes_attrs() -> None:
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None, 3))
    b.op("Equal", [x, x], {"T": np.float32}, name="eq")
    b.op("Cast", [x], {"SrcT": np.float32, "DstT": np.int64}, name="cast")
    b.op("Split", [b.constant(np.int32(0)), x], {"T": np.float16, "num_split": 3}, name="split")
    b.op("Unique", [x], {"T": np.float32, "out_idx": np.int64}, name="uniq")
    b.op("IdentityN", [x, x], {"T": [np.float32, np.int8]}, name="idn")
    attrs = {"Nsparse": 2, "Ndense": 1, "sparse_types": [np.dtype(object), np.int64], "Tdense": [np.float32]}
    b.op("ParseExample", [], attrs, name="parse")
    b.op("AddV2", [x, x], name="untyped")
    b.op("TopKV2", [x, b.constant(np.int32(2))], {"T": np.float32}, name="top")  # no index_type: older TF
    b.op("Shape", [x], {"T": np.float32}, name="shape")
    n = nodes(b)
    assert output_dtype(n["eq"], 0) == types_pb2.DT_BOOL
    assert output_dtype(n["cast"], 0) == types_pb2.DT_INT64
    assert [output_dtype(n["split"], p) for p in range(4)] == [types_pb2.DT_HALF] * 3 + [None]
    assert [output_dtype(n["uniq"], p) for p in range(2)] == [types_pb2.DT_FLOAT, types_pb2.DT_INT64]
    assert [output_dtype(n["idn"], p) for p in range(3)] == [types_pb2.DT_FLOAT, types_pb2.DT_INT8, None]
    # indices * Nsparse, values of sparse_types, shapes * Nsparse, dense values of Tdense
    assert [output_dtype(n["parse"], p) for p in range(7)] == [
        types_pb2.DT_INT64,
        types_pb2.DT_INT64,
        types_pb2.DT_STRING,
        types_pb2.DT_INT64,
        types_pb2.DT_INT64,
        types_pb2.DT_INT64,
        types_pb2.DT_FLOAT,
    ]
    assert output_dtype(n["untyped"], 0) is None  # its T attr is missing, and has no default
    # a type attr left out of a node (graphs older than the attr, defaults stripped) has its default
    assert [output_dtype(n["top"], p) for p in range(2)] == [types_pb2.DT_FLOAT, types_pb2.DT_INT32]
    assert output_dtype(n["shape"], 0) == types_pb2.DT_INT32
    assert output_dtype(n["x"], 0) == types_pb2.DT_FLOAT
