"""The KServe v2 tensor codec (server.kserve's decode_request and encode_response): JSON and binary
tensor data, raw single-input requests, and the errors a client can cause. The /v2 routes on the real
runtime are in test_server_kserve.py."""

from __future__ import annotations

import json
import struct
import time
import tracemalloc

import numpy as np
import pytest
from support import body_of, bytes_elements, split_response

from poolserve.runtime.errors import InvalidArgumentError, UnimplementedError
from poolserve.server.kserve import RawInput, decode_request, encode_response

# --- decoding: JSON ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("datatype", "data", "dtype"),
    [
        ("BOOL", [True, False, True, True], np.bool_),
        ("UINT8", [0, 255, 3, 4], np.uint8),
        ("UINT16", [0, 65535, 3, 4], np.uint16),
        ("UINT32", [0, 2**32 - 1, 3, 4], np.uint32),
        ("UINT64", [0, 2**64 - 1, 3, 4], np.uint64),
        ("UINT64", [2**64 - 1, 2**63, 2**63 + 1, 2**64 - 2], np.uint64),
        ("INT8", [-128, 127, 3, 4], np.int8),
        ("INT16", [-(2**15), 2**15 - 1, 3, 4], np.int16),
        ("INT32", [-(2**31), 2**31 - 1, 3, 4], np.int32),
        ("INT64", [-(2**63), 2**63 - 1, 3, 4], np.int64),
        ("FP16", [0.5, -1.0, 3, 65504.0], np.float16),
        ("FP32", [0.1, -1.5, 3, 1e30], np.float32),
        ("FP64", [0.1, -1.5, 3, 1e300], np.float64),
    ],
)
def test_decode_json_every_datatype(datatype, data, dtype):
    body, _ = body_of({"inputs": [{"name": "x", "shape": [2, 2], "datatype": datatype, "data": data}]})
    decoded = decode_request(body)
    x = decoded.inputs["x"]
    assert x.dtype == dtype and x.shape == (2, 2)
    np.testing.assert_array_equal(x, np.array(data, dtype=dtype).reshape(2, 2))
    assert decoded.datatypes == {"x": datatype}


def test_decode_json_nested_data_and_scalar():
    body, _ = body_of(
        {
            "id": "req-1",
            "inputs": [
                {"name": "a", "shape": [2, 3], "datatype": "FP32", "data": [[1, 2, 3], [4, 5, 6]]},
                {"name": "s", "shape": [], "datatype": "INT32", "data": [7]},
                {"name": "e", "shape": [0, 3], "datatype": "FP32", "data": []},
            ],
        }
    )
    decoded = decode_request(body)
    np.testing.assert_array_equal(decoded.inputs["a"], np.arange(1, 7, dtype=np.float32).reshape(2, 3))
    assert decoded.inputs["s"].shape == () and decoded.inputs["s"] == 7
    assert decoded.inputs["e"].shape == (0, 3) and decoded.inputs["e"].dtype == np.float32
    assert decoded.request_id == "req-1"
    assert decoded.outputs is None and decoded.binary_output is False


def test_decode_json_bytes():
    body, _ = body_of(
        {"inputs": [{"name": "t", "shape": [2, 1], "datatype": "BYTES", "data": [["héllo"], [""]]}]}
    )
    t = decode_request(body).inputs["t"]
    assert t.dtype == object and t.shape == (2, 1)
    assert t.ravel().tolist() == ["héllo".encode(), b""]


def test_decode_outputs_and_parameters():
    body, _ = body_of(
        {
            "inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}],
            "outputs": [{"name": "y", "parameters": {"binary_data": True}}, {"name": "z"}],
            "parameters": {"binary_data_output": False, "timeout": 5000, "custom": "kept"},
        }
    )
    decoded = decode_request(body)
    assert [(o.name, o.binary) for o in decoded.outputs] == [("y", True), ("z", None)]
    assert decoded.output_binary(decoded.outputs[0]) is True
    assert decoded.output_binary(decoded.outputs[1]) is False
    assert decoded.parameters["timeout"] == 5000 and decoded.parameters["custom"] == "kept"


def input_body(**fields) -> bytes:
    entry = {"name": "x", "shape": [2], "datatype": "FP32", "data": [1, 2]}
    entry.update(fields)
    entry = {k: v for k, v in entry.items() if v is not None}
    return json.dumps({"inputs": [entry]}).encode()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "malformed JSON"),
        (b"\xff\xfe", "malformed JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b"{}", "'inputs' must be a non-empty list"),
        (b'{"inputs": []}', "'inputs' must be a non-empty list"),
        (b'{"inputs": [{"shape": [1]}]}', r"inputs\[0\] must be an object with a string 'name'"),
        (b'{"inputs": [1]}', r"inputs\[0\] must be an object"),
        (b'{"id": 5, "inputs": []}', "'id' must be a string"),
        (b'{"parameters": [], "inputs": []}', "'parameters' must be a JSON object"),
        (input_body(shape=[2, -1]), "'shape' must be a list of non-negative integers"),
        (input_body(shape="2"), "'shape' must be a list of non-negative integers"),
        (input_body(shape=[True]), "'shape' must be a list of non-negative integers"),
        (
            input_body(datatype="FLOAT32"),
            "input 'x': unknown datatype 'FLOAT32'; expected one of BOOL, UINT8",
        ),
        (input_body(datatype=None), "unknown datatype None"),
        (input_body(data=None), "input 'x' has neither 'data' nor parameters.binary_data_size"),
        (input_body(shape=[3]), r"input 'x': shape \[3\] needs 3 values but the data holds 2"),
        (input_body(shape=[2, 2], data=[[1, 2], [3]]), "input 'x': ragged nested lists"),
        (
            input_body(datatype="INT32", data=[1.5, 2]),
            "expected integers for dtype int32, got a fractional or non-finite number",
        ),
        (input_body(datatype="FP32", data=["1", "2"]), "expected numbers for dtype float32, got text"),
        (
            input_body(datatype="FP32", data=[True, False]),
            "expected numbers for dtype float32, got true/false",
        ),
        (input_body(datatype="BOOL", data=[1, 0]), "expected true/false for dtype bool, got numbers"),
        (
            input_body(datatype="INT32", data=[1, None]),
            "expected integers for dtype int32, got a mix of types",
        ),
        (input_body(datatype="UINT8", data=[1, 256]), "value 256 is out of range for dtype uint8"),
        (input_body(datatype="UINT32", data=[-1, 2]), "value -1 is out of range for dtype uint32"),
        (
            input_body(datatype="INT64", data=[1, 2**64]),
            "value 18446744073709551616 is out of range for dtype int64",
        ),
        (
            input_body(datatype="INT64", data=[-1, 2**63]),
            "value 9223372036854775808 is out of range for dtype int64",
        ),
        (input_body(datatype="UINT64", data=[-1, 2**63]), "value -1 is out of range for dtype uint64"),
        (
            input_body(datatype="UINT64", data=[2**64, 1.5]),
            "expected integers for dtype uint64, got a fractional",
        ),
        (input_body(datatype="INT8", data=[True, False]), "expected integers for dtype int8, got true/false"),
        (
            input_body(datatype="BYTES", data=["a", 2]),
            "expected text or .*b64.* for dtype string, got a number",
        ),
        (input_body(datatype="BYTES", data=["a"]), "needs 2 values but the data holds 1"),
        (input_body(parameters=[]), "input 'x': 'parameters' must be a JSON object"),
        (
            input_body(data=None, parameters={"binary_data_size": 8}),
            "input 'x' has binary_data_size but the request has no Inference-Header-Content-Length",
        ),
        (input_body(parameters={"shared_memory_region": "r"}), "shared memory is not supported"),
        (
            b'{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}, '
            b'{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}]}',
            "input 'x' appears more than once",
        ),
    ],
)
def test_decode_errors(body, message):
    with pytest.raises((InvalidArgumentError, UnimplementedError), match=message):
        decode_request(body)


def test_decode_unimplemented_is_its_own_code():
    with pytest.raises(UnimplementedError):
        decode_request(input_body(parameters={"shared_memory_region": "r"}))


@pytest.mark.parametrize(
    ("outputs", "message"),
    [
        ({"name": "y"}, "'outputs' must be a list"),
        ([{"name": 3}], r"outputs\[0\] must be an object with a string 'name'"),
        ([{"name": "y"}, {"name": "y"}], "output 'y' is requested more than once"),
        (
            [{"name": "y", "parameters": {"binary_data": "yes"}}],
            "output 'y': parameter 'binary_data' must be a boolean",
        ),
        ([{"name": "y", "parameters": {"classification": 3}}], "classification extension is not supported"),
    ],
)
def test_decode_output_errors(outputs, message):
    body = json.dumps(
        {"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}], "outputs": outputs}
    ).encode()
    with pytest.raises((InvalidArgumentError, UnimplementedError), match=message):
        decode_request(body)


def test_decode_binary_output_parameter_must_be_bool():
    body = json.dumps(
        {
            "inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}],
            "parameters": {"binary_data_output": 1},
        }
    ).encode()
    with pytest.raises(InvalidArgumentError, match="parameter 'binary_data_output' must be a boolean"):
        decode_request(body)


# --- decoding: binary ----------------------------------------------------------------------------------


def test_decode_binary_mixed_with_json_in_order():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([[1, -2]], dtype=np.int64)
    flags = np.array([True, False, True])
    body, length = body_of(
        {
            "inputs": [
                {
                    "name": "a",
                    "shape": [2, 3],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": a.nbytes},
                },
                {"name": "j", "shape": [2], "datatype": "INT32", "data": [5, 6]},
                {
                    "name": "b",
                    "shape": [1, 2],
                    "datatype": "INT64",
                    "parameters": {"binary_data_size": b.nbytes},
                },
                {"name": "f", "shape": [3], "datatype": "BOOL", "parameters": {"binary_data_size": 3}},
                {
                    "name": "t",
                    "shape": [2],
                    "datatype": "BYTES",
                    "parameters": {"binary_data_size": 4 + 3 + 4 + 0},
                },
            ]
        },
        a.tobytes(),
        b.tobytes(),
        bytes([1, 0, 7]),  # any non-zero byte is true
        bytes_elements(b"abc", b""),
    )
    decoded = decode_request(body, length)
    np.testing.assert_array_equal(decoded.inputs["a"], a)
    np.testing.assert_array_equal(decoded.inputs["b"], b)
    np.testing.assert_array_equal(decoded.inputs["j"], [5, 6])
    np.testing.assert_array_equal(decoded.inputs["f"], flags)
    assert decoded.inputs["f"].dtype == np.bool_
    assert decoded.inputs["t"].tolist() == [b"abc", b""]
    assert decoded.inputs["a"].dtype == np.float32 and decoded.inputs["b"].dtype == np.int64


@pytest.mark.parametrize("datatype", ["UINT16", "INT32", "INT8", "UINT64", "FP16", "BF16", "FP64"])
def test_decode_binary_every_fixed_size_datatype(datatype):
    from poolserve.server.kserve import DATATYPES

    x = (np.arange(12) - 3).astype(DATATYPES[datatype]).reshape(3, 4)
    body, length = body_of(
        {
            "inputs": [
                {
                    "name": "x",
                    "shape": [3, 4],
                    "datatype": datatype,
                    "parameters": {"binary_data_size": x.nbytes},
                }
            ]
        },
        x.astype(x.dtype.newbyteorder("<")).tobytes(),
    )
    y = decode_request(body, length).inputs["x"]
    assert y.dtype == x.dtype
    np.testing.assert_array_equal(y, x)


@pytest.mark.parametrize("pad", [0, 1])
def test_decode_binary_is_zero_copy_where_the_tensor_starts_aligned(pad):
    x = np.arange(1000, dtype=np.float32)
    request = {
        "inputs": [
            {"name": "x", "shape": [1000], "datatype": "FP32", "parameters": {"binary_data_size": 4000}}
        ]
    }
    header = json.dumps(request).encode()
    header += b" " * (-len(header) % 16 + pad)  # a bytes object's data starts 16-byte aligned
    body = header + x.tobytes()
    y = decode_request(body, str(len(header))).inputs["x"]
    np.testing.assert_array_equal(y, x)
    assert y.flags.aligned
    if pad == 0:
        assert np.shares_memory(y, np.frombuffer(body, np.uint8)) and not y.flags.writeable  # a view
    else:  # numpy reads an unaligned array slowly in every op: copied once instead
        assert not np.shares_memory(y, np.frombuffer(body, np.uint8))


def binary_input(size: int, shape=(2,), datatype="FP32") -> dict:
    return {
        "inputs": [
            {
                "name": "x",
                "shape": list(shape),
                "datatype": datatype,
                "parameters": {"binary_data_size": size},
            }
        ]
    }


@pytest.mark.parametrize(
    ("request_json", "payload", "message"),
    [
        (
            binary_input(4),
            b"\0" * 4,
            r"input 'x': binary_data_size is 4 bytes but shape \[2\] of float32 needs 8",
        ),
        (binary_input(8), b"\0" * 4, "binary_data_size 8 goes past the end of the body"),
        (
            binary_input(8),
            b"\0" * 12,
            "the body has 4 bytes of binary data that no input's binary_data_size claims",
        ),
        (binary_input(-1), b"", "binary_data_size must be a non-negative integer, got -1"),
        (binary_input("8"), b"\0" * 8, "binary_data_size must be a non-negative integer"),
        (
            binary_input(6, datatype="BYTES"),
            bytes_elements(b"ab"),
            r"shape \[2\] has 2 string elements, which need at least 8 bytes \(a 4-byte length each\), "
            "but binary_data_size is 6 bytes",
        ),
        (
            binary_input(9, datatype="BYTES"),
            bytes_elements(b"abcde"),
            r"ends after 1 of the 2 elements",
        ),
        (
            binary_input(7, shape=(1,), datatype="BYTES"),
            struct.pack("<I", 5) + b"abc",
            "element 0 claims 5 bytes but only 3 remain",
        ),
        (
            binary_input(12, shape=(1,), datatype="BYTES"),
            bytes_elements(b"ab") + b"zzzzzz",
            "binary_data_size is 12 bytes but the 1 string elements use 6",
        ),
    ],
)
def test_decode_binary_errors(request_json, payload, message):
    body, length = body_of(request_json, payload)
    with pytest.raises(InvalidArgumentError, match=message):
        decode_request(body, length)


def test_decode_binary_strings_refuses_a_count_the_bytes_cannot_hold_before_making_the_array():
    """113 bytes asking for 100,000,000 BYTES elements: each element needs its 4-byte length, so the
    request is refused from its size, at once, without the 800 MB array of them it made before (1-1.4 s
    on the event loop)."""
    body, length = body_of(binary_input(0, shape=(100_000_000,), datatype="BYTES"), b"")
    tracemalloc.start()
    try:
        start = time.perf_counter()
        with pytest.raises(InvalidArgumentError) as info:
            decode_request(body, length)
        elapsed = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info.value.message == (
        "input 'x': shape [100000000] has 100000000 string elements, which need at least 400000000 "
        "bytes (a 4-byte length each), but binary_data_size is 0 bytes"
    )
    assert elapsed < 0.5 and peak < 1 << 20, (elapsed, peak)


def test_decode_binary_with_both_data_and_size():
    body, length = body_of(
        {
            "inputs": [
                {
                    "name": "x",
                    "shape": [1],
                    "datatype": "FP32",
                    "data": [1],
                    "parameters": {"binary_data_size": 4},
                }
            ]
        },
        b"\0" * 4,
    )
    with pytest.raises(InvalidArgumentError, match="has both 'data' and binary_data_size"):
        decode_request(body, length)


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ("abc", "Inference-Header-Content-Length must be an integer, got 'abc'"),
        ("9999", "is 9999 but the body has"),
        ("-3", "is -3 but the body has"),
    ],
)
def test_decode_bad_header_length(header, message):
    with pytest.raises(InvalidArgumentError, match=message):
        decode_request(input_body(), header)


def test_decode_header_length_cuts_the_json():
    body = input_body() + b"trailing"
    with pytest.raises(InvalidArgumentError, match="8 bytes of binary data that no input"):
        decode_request(body, str(len(body) - 8))


def test_decode_raw_single_input():
    x = np.arange(12, dtype=np.float32)
    decoded = decode_request(x.tobytes(), "0", RawInput("x", "FP32", (-1, 4)))
    np.testing.assert_array_equal(decoded.inputs["x"], x.reshape(3, 4))
    assert decoded.binary_output is True and decoded.outputs is None
    fixed = decode_request(x.tobytes(), "0", RawInput("x", "FP32", (12,)))
    assert fixed.inputs["x"].shape == (12,)
    text = decode_request(bytes_elements(b"ab", b"c"), "0", RawInput("s", "BYTES", (2,)))
    assert text.inputs["s"].tolist() == [b"ab", b"c"]


@pytest.mark.parametrize(
    ("raw", "payload", "message"),
    [
        (None, b"\0" * 4, "needs a model with exactly one input"),
        (RawInput("x", "FP32", (-1, 4)), b"\0" * 20, r"cannot be 20 bytes"),
        (
            RawInput("x", "FP32", (-1, -1)),
            b"\0" * 16,
            r"input 'x' of shape \[-1, -1\] \(FP32\) cannot be 16 bytes",
        ),
        (RawInput("s", "BYTES", (-1,)), b"\0" * 4, r"input 's' of shape \[-1\] \(BYTES\) cannot be 4 bytes"),
        (RawInput("x", "FP32", (3,)), b"\0" * 16, "binary_data_size is 16 bytes but shape"),
    ],
)
def test_decode_raw_errors(raw, payload, message):
    with pytest.raises(InvalidArgumentError, match=message):
        decode_request(payload, "0", raw)


# --- encoding ------------------------------------------------------------------------------------------


def test_encode_json():
    y = np.array([[0.5, -1.0], [2.0, 3.25]], dtype=np.float32)
    flags = np.array([True, False])
    text = np.array([b"ab", "c\u00e9".encode()], dtype=object)
    body, length = encode_response(
        "m",
        "1",
        [("y", y, False), ("f", flags, False), ("t", text, False)],
        request_id="r",
        parameters={"k": 1},
    )
    assert length is None
    response = json.loads(body)
    assert response == {
        "model_name": "m",
        "model_version": "1",
        "id": "r",
        "parameters": {"k": 1},
        "outputs": [
            {"name": "y", "datatype": "FP32", "shape": [2, 2], "data": [0.5, -1.0, 2.0, 3.25]},
            {"name": "f", "datatype": "BOOL", "shape": [2], "data": [True, False]},
            {"name": "t", "datatype": "BYTES", "shape": [2], "data": ["ab", "cé"]},
        ],
    }


def test_encode_json_float32_round_trips_exactly():
    y = np.array([0.1, 1 / 3, 1e-45], dtype=np.float32)
    response = json.loads(encode_response("m", "1", [("y", y, False)])[0])
    np.testing.assert_array_equal(np.array(response["outputs"][0]["data"], dtype=np.float32), y)
    assert "id" not in response and "parameters" not in response


def test_encode_binary_mixed():
    y = np.arange(6, dtype=np.int64).reshape(3, 2)
    z = np.array([1.5], dtype=np.float16)
    t = np.array([[b"xy", b""]], dtype=object)
    scalar = np.float64(2.5)
    body, length = encode_response(
        "m", "2", [("y", y, True), ("z", z, False), ("t", t, True), ("s", scalar, True)]
    )
    header, rest = split_response(body, length)
    outputs = {o["name"]: o for o in header["outputs"]}
    assert outputs["y"] == {
        "name": "y",
        "datatype": "INT64",
        "shape": [3, 2],
        "parameters": {"binary_data_size": 48},
    }
    assert outputs["z"]["data"] == [1.5]
    assert outputs["t"]["parameters"] == {"binary_data_size": 4 + 2 + 4}
    assert outputs["s"] == {
        "name": "s",
        "datatype": "FP64",
        "shape": [],
        "parameters": {"binary_data_size": 8},
    }
    assert rest == y.tobytes() + bytes_elements(b"xy", b"") + np.float64(2.5).tobytes()


def test_encode_binary_non_contiguous_and_big_endian():
    y = np.arange(12, dtype=np.int32).reshape(3, 4)[:, ::2]
    be = np.arange(3, dtype=">f4")
    body, length = encode_response("m", "1", [("y", y, True), ("b", be, True)])
    header, rest = split_response(body, length)
    assert header["outputs"][1]["datatype"] == "FP32"
    assert rest == np.ascontiguousarray(y).tobytes() + np.arange(3, dtype="<f4").tobytes()


def test_encode_errors():
    with pytest.raises(
        InvalidArgumentError,
        match="output 't' holds bytes that are not UTF-8; ask for it with parameters.binary_data=true",
    ):
        encode_response("m", "1", [("t", np.array([b"\xff"], dtype=object), False)])
    with pytest.raises(UnimplementedError, match="dtype complex64 has no KServe v2 datatype"):
        encode_response("m", "1", [("c", np.zeros(2, np.complex64), False)])
    with pytest.raises(InvalidArgumentError, match="output 'o' holds a int, not bytes"):
        encode_response("m", "1", [("o", np.array([3], dtype=object), True)])


def test_round_trip_through_the_codec():
    """What encode_response writes in binary decodes back to the same arrays (the client's view)."""
    arrays = {"a": np.linspace(0, 1, 7, dtype=np.float32), "b": np.array([b"q", b"rs"], dtype=object)}
    body, length = encode_response("m", "1", [(k, v, True) for k, v in arrays.items()])
    header, rest = split_response(body, length)
    request = {
        "inputs": [
            {"name": o["name"], "shape": o["shape"], "datatype": o["datatype"], "parameters": o["parameters"]}
            for o in header["outputs"]
        ]
    }
    decoded = decode_request(*body_of(request, rest))
    for name, value in arrays.items():
        np.testing.assert_array_equal(decoded.inputs[name], value)
