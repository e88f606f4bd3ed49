"""KServe ModelInfer's raw tensors read and written beside protobuf (server.grpc_raw): the same messages
protobuf reads and writes, with the tensors' bytes copied less. The end-to-end calls are in
test_server_grpc.py and test_server_tritonclient_grpc.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from google.protobuf.message import DecodeError

from poolserve.proto import grpc_service_pb2 as pb
from poolserve.server import codec, grpc_raw
from poolserve.server.kserve import RequestedOutput
from poolserve.server.kserve_grpc import decode_infer, encode_infer
from poolserve.server.service import InferResult


def request(**inputs: np.ndarray) -> pb.ModelInferRequest:
    message = pb.ModelInferRequest(model_name="m", model_version="2", id="r1")
    message.parameters["priority"].int64_param = 3
    for name, value in inputs.items():
        message.inputs.add(name=name, datatype="FP32", shape=value.shape)
        message.raw_input_contents.append(value.tobytes())
    message.outputs.add(name="y")
    return message


def same_request(got: grpc_raw.RawInferRequest, expected: pb.ModelInferRequest) -> None:
    raw = [bytes(v) for v in got.raw]
    assert raw == list(expected.raw_input_contents)
    assert without_raw(got.message) == without_raw(expected)


def without_raw(message: pb.ModelInferRequest) -> pb.ModelInferRequest:
    rest = pb.ModelInferRequest()
    rest.CopyFrom(message)
    del rest.raw_input_contents[:]
    return rest


def test_parse_request_holds_raw_inputs_as_views_of_the_body() -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.linspace(0, 1, 5, dtype=np.float32)
    message = request(a=a, b=b)
    body = message.SerializeToString()
    got = grpc_raw.parse_request(body)
    same_request(got, message)
    assert not got.message.raw_input_contents  # protobuf never copied them
    decoded = decode_infer(got)
    np.testing.assert_array_equal(decoded.inputs["a"], a)
    np.testing.assert_array_equal(decoded.inputs["b"], b)
    whole = np.frombuffer(body, np.uint8)
    assert all(np.shares_memory(np.frombuffer(view, np.uint8), whole) for view in got.raw)
    for name in ("a", "b"):  # a view of the body unless it starts unaligned (see codec.from_binary)
        assert decoded.inputs[name].flags.aligned
        aligned = np.frombuffer(got.raw[0 if name == "a" else 1], np.float32).flags.aligned
        assert np.shares_memory(decoded.inputs[name], whole) == aligned


def test_parse_request_takes_raw_entries_anywhere_among_the_fields() -> None:
    # protobuf writes fields in number order, but a reader must take them in any order, repeated fields
    # concatenated and a later scalar winning
    first = pb.ModelInferRequest(raw_input_contents=[b"\x01\x02"]).SerializeToString()
    middle = pb.ModelInferRequest(model_name="early", id="x").SerializeToString()
    second = pb.ModelInferRequest(raw_input_contents=[b"", b"\xff" * 300]).SerializeToString()
    last = request(a=np.ones(2, np.float32)).SerializeToString()
    body = first + middle + second + last
    same_request(grpc_raw.parse_request(body), pb.ModelInferRequest.FromString(body))


def test_parse_request_without_raw_inputs_is_protobufs() -> None:
    message = pb.ModelInferRequest(model_name="m")
    message.inputs.add(name="x", datatype="INT32", shape=[2]).contents.int_contents.extend([1, 2])
    got = grpc_raw.parse_request(message.SerializeToString())
    assert got.message == message and got.raw == []
    assert grpc_raw.parse_request(b"").message == pb.ModelInferRequest()


@pytest.mark.parametrize(
    "body",
    [
        b"\x3a\x05abc",  # raw_input_contents claims 5 bytes, 3 follow
        b"\x0a",  # a key and nothing else
        b"\x3a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  # a varint longer than 64 bits
        b"\x0f",  # wire type 7 does not exist
    ],
)
def test_parse_request_refuses_a_broken_body_as_protobuf_does(body: bytes) -> None:
    with pytest.raises(DecodeError):
        pb.ModelInferRequest.FromString(body)
    with pytest.raises(DecodeError):
        grpc_raw.parse_request(body)


def test_parse_request_leaves_groups_to_protobuf() -> None:
    # an unknown field in a group (wire types 3 and 4: field 99) is legal protobuf the scan does not follow
    message = request(a=np.ones(3, np.float32))
    body = message.SerializeToString() + b"\x9b\x06\x08\x01\x9c\x06"
    same_request(grpc_raw.parse_request(body), pb.ModelInferRequest.FromString(body))


def outputs() -> dict[str, Any]:
    return {
        "f": np.arange(6, dtype=np.float32).reshape(2, 3),
        "t": np.arange(6, dtype=np.float64).reshape(2, 3).T,  # not contiguous
        "big": np.arange(4, dtype=">i4"),  # big-endian: converted
        "flag": np.array([True, False, True]),
        "s": np.array([b"ab", b""], dtype=object),
        "scalar": np.float32(2.5),
        "empty": np.zeros((0, 4), np.float32),
    }


def test_a_response_serializes_to_protobufs_own_bytes() -> None:
    result = InferResult(outputs(), "r1", "m", 1, None, {"traceEvents": []})
    decoded = decode_infer(request(a=np.ones(1, np.float32)))
    decoded.outputs = [RequestedOutput(name, True) for name in result.outputs]
    answer = encode_infer(result, decoded)
    expected = pb.ModelInferResponse()
    expected.CopyFrom(answer.message)
    for name, value in result.outputs.items():
        expected.raw_output_contents.append(codec.to_binary(name, value))
    assert grpc_raw.serialize_response(answer) == expected.SerializeToString()
    assert answer.full() == expected
    back = pb.ModelInferResponse.FromString(grpc_raw.serialize_response(answer))
    np.testing.assert_array_equal(
        np.frombuffer(back.raw_output_contents[1], np.float64).reshape(3, 2), result.outputs["t"]
    )
    assert np.frombuffer(back.raw_output_contents[2], "<i4").tolist() == [0, 1, 2, 3]


def test_an_output_array_is_not_copied_before_it_is_serialized() -> None:
    y = np.random.default_rng(0).random((64, 16)).astype(np.float32)
    decoded = decode_infer(request(a=np.ones(1, np.float32)))
    decoded.outputs = [RequestedOutput("y", True)]
    answer = encode_infer(InferResult({"y": y}, "r1", "m", 1), decoded)
    assert isinstance(answer.raw[0], np.ndarray) and np.shares_memory(answer.raw[0], y)
