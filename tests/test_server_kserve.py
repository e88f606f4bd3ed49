"""The KServe v2 adapter: the tensor codec (JSON and binary), then the /v2 routes on the real runtime."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import httpx
import numpy as np
import pytest

from runtime.builder import GraphBuilder
from runtime.errors import InvalidArgumentError, UnimplementedError
from server.app import create_app
from server.config import load_config
from server.kserve import RawInput, decode_request, encode_response


def body_of(request: dict, *chunks: bytes) -> tuple[bytes, str | None]:
    header = json.dumps(request).encode()
    if not chunks:
        return header, None
    return header + b"".join(chunks), str(len(header))


def bytes_elements(*items: bytes) -> bytes:
    return b"".join(struct.pack("<I", len(x)) + x for x in items)


def split_response(body: bytes, header_length: int | None) -> tuple[dict, bytes]:
    if header_length is None:
        return json.loads(body), b""
    return json.loads(body[:header_length]), body[header_length:]


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
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
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
        (input_body(shape=[3]), r"input 'x': shape \[3\] needs 3 elements but 'data' holds 2"),
        (input_body(shape=[2, 2], data=[[1, 2], [3]]), "'data' is not a rectangular nested list"),
        (input_body(datatype="INT32", data=[1.5, 2]), "INT32 data must hold integers, got floating-point"),
        (input_body(datatype="FP32", data=["1", "2"]), "FP32 data must hold numbers, got strings"),
        (input_body(datatype="FP32", data=[True, False]), "FP32 data must hold numbers, got booleans"),
        (input_body(datatype="BOOL", data=[1, 0]), "BOOL data must hold booleans, got integers"),
        (input_body(datatype="INT32", data=[1, None]), "got values of mixed or non-numeric types"),
        (input_body(datatype="UINT8", data=[1, 256]), "value 256 is out of range for UINT8"),
        (input_body(datatype="UINT32", data=[-1, 2]), "value -1 is out of range for UINT32"),
        (
            input_body(datatype="INT64", data=[1, 2**64]),
            "value 18446744073709551616 is out of range for INT64",
        ),
        (
            input_body(datatype="INT64", data=[-1, 2**63]),
            "value 9223372036854775808 is out of range for INT64",
        ),
        (input_body(datatype="UINT64", data=[-1, 2**63]), "value -1 is out of range for UINT64"),
        (
            input_body(datatype="UINT64", data=[2**64, 1.5]),
            "UINT64 data must hold integers, got values of mixed",
        ),
        (input_body(datatype="INT8", data=[True, False]), "INT8 data must hold integers, got booleans"),
        (input_body(datatype="BYTES", data=["a", 2]), "BYTES data must hold strings, got 2"),
        (input_body(datatype="BYTES", data=["a"]), "needs 2 elements but 'data' holds 1"),
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


@pytest.mark.parametrize("datatype", ["UINT16", "INT32", "INT8", "UINT64", "FP16", "FP64"])
def test_decode_binary_every_fixed_size_datatype(datatype):
    from server.kserve import DATATYPES

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


def test_decode_binary_is_zero_copy():
    x = np.arange(1000, dtype=np.float32)
    body, length = body_of(
        {
            "inputs": [
                {"name": "x", "shape": [1000], "datatype": "FP32", "parameters": {"binary_data_size": 4000}}
            ]
        },
        x.tobytes(),
    )
    y = decode_request(body, length).inputs["x"]
    assert not y.flags.owndata and not y.flags.writeable  # a view of the body, not a copy
    np.testing.assert_array_equal(y, x)


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
            r"input 'x': binary_data_size is 4 bytes but shape \[2\] of FP32 needs 8",
        ),
        (binary_input(8), b"\0" * 4, "binary_data_size 8 goes past the end of the body"),
        (
            binary_input(8),
            b"\0" * 12,
            "the body has 4 bytes of binary data that no input's binary_data_size claims",
        ),
        (binary_input(-1), b"", "binary_data_size must be a non-negative integer, got -1"),
        (binary_input("8"), b"\0" * 8, "binary_data_size must be a non-negative integer"),
        (binary_input(6, datatype="BYTES"), bytes_elements(b"ab"), r"ends after 1 of the 2 elements"),
        (
            binary_input(7, datatype="BYTES"),
            bytes_elements(b"ab", b"")[:7],
            r"ends after 1 of the 2 elements",
        ),
        (
            binary_input(7, datatype="BYTES"),
            struct.pack("<I", 5) + b"abc",
            "element 0 claims 5 bytes but only 3 remain",
        ),
        (
            binary_input(12, shape=(1,), datatype="BYTES"),
            bytes_elements(b"ab") + b"zzzzzz",
            "binary_data_size is 12 bytes but the 1 BYTES elements use 6",
        ),
    ],
)
def test_decode_binary_errors(request_json, payload, message):
    body, length = body_of(request_json, payload)
    with pytest.raises(InvalidArgumentError, match=message):
        decode_request(body, length)


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


# --- the routes, on the real app and runtime -----------------------------------------------------------


def write_models(folder: Path) -> None:
    """calc (versions 1 and 2), types (one input per datatype family) and slow (a few big matmuls)."""
    for version, scale in ((1, 2.0), (2, 3.0)):
        b = GraphBuilder()
        x = b.placeholder("x", np.float32, (None, 3))
        b.identity(b.add(b.mul(x, b.constant(np.float32(scale))), b.constant(np.float32(1))), name="y")
        b.identity(
            b.op(
                "Sum", [x, b.constant(np.int32(1))], {"T": np.float32, "Tidx": np.int32, "keep_dims": False}
            ),
            name="total",
        )
        (folder / f"calc{version}.pb").write_bytes(b.graph_def.SerializeToString())

    b = GraphBuilder()
    a = b.placeholder("a", np.int32, (None,))
    b.identity(b.add(a, a), name="a2")
    flag = b.placeholder("flag", np.bool_, (None,))
    b.op("Identity", [b.op("LogicalNot", [flag])], {"T": np.bool_}, name="not_flag")
    text = b.placeholder("text", np.object_, (None,))
    b.identity(text, name="text_out")
    half = b.placeholder("half", np.float16, (2,))
    b.identity(half, name="half_out")
    (folder / "types.pb").write_bytes(b.graph_def.SerializeToString())

    b = GraphBuilder()
    x = b.placeholder("x", np.float32, ())
    big = b.op(
        "Fill", [b.constant(np.array([600, 600], np.int32)), x], {"T": np.float32, "index_type": np.int32}
    )
    for _ in range(4):
        big = b.matmul(big, big)
    b.identity(big, name="out")
    (folder / "slow.pb").write_bytes(b.graph_def.SerializeToString())


CONFIG = """
[server]
default_timeout_ms = 20000
[run_handler_pool]
enabled = true
[[models]]
name = "calc"
path = "calc1.pb"
version = 1
[[models]]
name = "calc"
path = "calc2.pb"
version = 2
[[models]]
name = "types"
path = "types.pb"
[[models]]
name = "slow"
path = "slow.pb"
"""


@pytest.fixture(scope="module")
def anyio_backend():
    return "asyncio"


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    folder = tmp_path_factory.mktemp("kserve")
    write_models(folder)
    (folder / "poolserve.toml").write_text(CONFIG)
    return create_app(load_config(folder / "poolserve.toml"))


@pytest.fixture(scope="module")
async def client(app):
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://kserve") as c:
            yield c


def calc_request(x, **extra) -> dict:
    x = np.asarray(x, np.float32)
    return {
        "inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}],
        **extra,
    }


def outputs_of(response: httpx.Response) -> dict[str, np.ndarray]:
    """The response's outputs as arrays, JSON or binary (the way tritonclient reads them)."""
    length = response.headers.get("Inference-Header-Content-Length")
    header, rest = split_response(response.content, int(length) if length is not None else None)
    if rest:
        request = {
            "inputs": [
                {k: o[k] for k in ("name", "shape", "datatype", "parameters")}
                for o in header["outputs"]
                if "parameters" in o
            ]
        }
        decoded = decode_request(*body_of(request, rest)).inputs
    else:
        decoded = {}
    out = {}
    for o in header["outputs"]:
        if o["name"] in decoded:
            out[o["name"]] = decoded[o["name"]]
        else:
            dtype = {
                "BYTES": object,
                "BOOL": bool,
                "FP16": np.float16,
                "FP32": np.float32,
                "INT32": np.int32,
            }[o["datatype"]]
            data = [s.encode() for s in o["data"]] if o["datatype"] == "BYTES" else o["data"]
            out[o["name"]] = np.array(data, dtype=dtype).reshape(o["shape"])
    return out


@pytest.mark.anyio
async def test_server_metadata_and_health(client):
    r = await client.get("/v2")
    assert r.status_code == 200
    body = r.json()
    assert body["name"] == "poolserve" and body["version"] and "binary_tensor_data" in body["extensions"]
    assert (await client.get("/v2/health/live")).status_code == 200
    assert (await client.get("/v2/health/ready")).status_code == 200


@pytest.mark.anyio
@pytest.mark.parametrize("draining", [False, True])
async def test_not_ready_answers_503(client, app, draining):
    runtime = app.state.runtime
    runtime.ready, runtime.draining = False, draining
    try:
        r = await client.get("/v2/health/ready")
        assert r.status_code == 503
        assert r.json()["error"] == ("the server is shutting down" if draining else "the server is not ready")
        r = await client.get("/v2/models/calc/ready")
        assert r.status_code == 503 and "Model 'calc' is not ready" in r.json()["error"]
        assert (await client.get("/v2/health/live")).status_code == 200
    finally:
        runtime.ready, runtime.draining = True, False
    assert (await client.get("/v2/health/ready")).status_code == 200


@pytest.mark.anyio
async def test_model_metadata(client):
    r = await client.get("/v2/models/calc")
    assert r.status_code == 200
    body = r.json()
    assert (
        body["name"] == "calc"
        and body["versions"] == ["1", "2"]
        and body["platform"] == "tensorflow_graphdef"
    )
    assert body["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 3]}]
    assert [(o["name"], o["datatype"]) for o in body["outputs"]] == [("y", "FP32"), ("total", "FP32")]
    assert (await client.get("/v2/models/calc/versions/1")).json()["versions"] == ["1", "2"]
    types = (await client.get("/v2/models/types")).json()
    assert types["inputs"] == [
        {"name": "a", "datatype": "INT32", "shape": [-1]},
        {"name": "flag", "datatype": "BOOL", "shape": [-1]},
        {"name": "text", "datatype": "BYTES", "shape": [-1]},
        {"name": "half", "datatype": "FP16", "shape": [2]},
    ]
    assert [(o["name"], o["datatype"]) for o in types["outputs"]] == [
        ("a2", "INT32"),
        ("not_flag", "BOOL"),
        ("text_out", "BYTES"),
        ("half_out", "FP16"),
    ]


@pytest.mark.anyio
async def test_model_ready(client):
    assert (await client.get("/v2/models/calc/ready")).status_code == 200
    assert (await client.get("/v2/models/calc/versions/2/ready")).status_code == 200


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/v2/models/nope", "Model 'nope' not found; the server has: calc, slow, types"),
        ("/v2/models/nope/ready", "Model 'nope' not found"),
        ("/v2/models/calc/versions/7", "Model 'calc' has no version 7; it has: 1, 2"),
        ("/v2/models/calc/versions/7/ready", "Model 'calc' has no version 7"),
        ("/v2/models/calc/versions/one", "Model 'calc' has no version 'one' \\(versions are integers\\)"),
    ],
)
async def test_unknown_model_or_version(client, path, message):
    r = await client.get(path)
    assert r.status_code == 404
    assert re.search(message, r.json()["error"])


@pytest.mark.anyio
async def test_infer_json(client):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    r = await client.post("/v2/models/calc/infer", json=calc_request(x, id="abc"))
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    assert "Inference-Header-Content-Length" not in r.headers
    body = r.json()
    assert body["model_name"] == "calc" and body["model_version"] == "2" and body["id"] == "abc"
    assert body["outputs"] == [
        {"name": "y", "datatype": "FP32", "shape": [2, 3], "data": (x * 3 + 1).ravel().tolist()},
        {"name": "total", "datatype": "FP32", "shape": [2], "data": [3.0, 12.0]},
    ]


@pytest.mark.anyio
async def test_infer_version_and_selected_outputs(client):
    x = np.ones((1, 3), np.float32)
    r = await client.post(
        "/v2/models/calc/versions/1/infer", json=calc_request(x, outputs=[{"name": "total"}])
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model_version"] == "1" and "id" not in body
    assert [o["name"] for o in body["outputs"]] == ["total"]
    r = await client.post("/v2/models/calc/versions/1/infer", json=calc_request(x, outputs=[{"name": "y"}]))
    assert r.json()["outputs"][0]["data"] == [3.0, 3.0, 3.0]


@pytest.mark.anyio
async def test_infer_big_json(client):
    """Big JSON texts are parsed and written off the event loop: same answers."""
    x = np.random.default_rng(2).standard_normal((30000, 3)).astype(np.float32)
    r = await client.post("/v2/models/calc/infer", json=calc_request(x))
    assert r.status_code == 200, r.text
    out = outputs_of(r)
    np.testing.assert_array_equal(out["y"], x * 3 + 1)
    assert len(r.content) > 256 * 1024


@pytest.mark.anyio
async def test_infer_binary_in_and_out(client):
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    body, length = body_of(
        {
            "inputs": [
                {
                    "name": "x",
                    "shape": [4, 3],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": x.nbytes},
                }
            ],
            "outputs": [
                {"name": "y", "parameters": {"binary_data": True}},
                {"name": "total", "parameters": {"binary_data": False}},
            ],
        },
        x.tobytes(),
    )
    r = await client.post(
        "/v2/models/calc/infer", content=body, headers={"Inference-Header-Content-Length": length}
    )
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/octet-stream"
    header_length = int(r.headers["Inference-Header-Content-Length"])
    header, rest = split_response(r.content, header_length)
    assert (
        header["outputs"][0]["parameters"] == {"binary_data_size": 48} and "data" not in header["outputs"][0]
    )
    assert "data" in header["outputs"][1]
    np.testing.assert_array_equal(np.frombuffer(rest, np.float32).reshape(4, 3), x * 3 + 1)
    np.testing.assert_allclose(header["outputs"][1]["data"], x.sum(axis=1), rtol=1e-6)


@pytest.mark.anyio
async def test_infer_binary_data_output_for_all_outputs(client):
    x = np.arange(3, dtype=np.float32).reshape(1, 3)
    r = await client.post(
        "/v2/models/calc/infer", json=calc_request(x, parameters={"binary_data_output": True})
    )
    assert r.status_code == 200, r.text
    out = outputs_of(r)
    assert "Inference-Header-Content-Length" in r.headers
    np.testing.assert_array_equal(out["y"], x * 3 + 1)
    np.testing.assert_array_equal(out["total"], [3.0])


@pytest.mark.anyio
@pytest.mark.parametrize("binary", [False, True])
async def test_infer_every_datatype_family(client, binary):
    a = np.array([1, -2, 2**30], np.int32)
    flag = np.array([True, False])
    text = np.array(["héllo".encode(), b"", b"x y"], dtype=object)
    half = np.array([0.5, -65504], np.float16)
    arrays = {"a": a, "flag": flag, "text": text, "half": half}
    datatypes = {"a": "INT32", "flag": "BOOL", "text": "BYTES", "half": "FP16"}
    if binary:
        chunks = [bytes_elements(*text) if k == "text" else v.tobytes() for k, v in arrays.items()]
        inputs = [
            {
                "name": k,
                "shape": list(v.shape),
                "datatype": datatypes[k],
                "parameters": {"binary_data_size": len(c)},
            }
            for (k, v), c in zip(arrays.items(), chunks, strict=True)
        ]
        body, length = body_of({"inputs": inputs, "parameters": {"binary_data_output": True}}, *chunks)
        r = await client.post(
            "/v2/models/types/infer", content=body, headers={"Inference-Header-Content-Length": length}
        )
    else:
        inputs = [
            {
                "name": k,
                "shape": list(v.shape),
                "datatype": datatypes[k],
                "data": [s.decode() for s in v] if k == "text" else v.tolist(),
            }
            for k, v in arrays.items()
        ]
        r = await client.post("/v2/models/types/infer", json={"inputs": inputs})
    assert r.status_code == 200, r.text
    assert ("Inference-Header-Content-Length" in r.headers) == binary
    out = outputs_of(r)
    np.testing.assert_array_equal(out["a2"], a + a)
    assert out["a2"].dtype == np.int32
    np.testing.assert_array_equal(out["not_flag"], ~flag)
    assert out["text_out"].tolist() == text.tolist()
    np.testing.assert_array_equal(out["half_out"], half)
    assert out["half_out"].dtype == np.float16


@pytest.mark.anyio
async def test_infer_raw_single_input_request(client):
    x = np.arange(6, dtype=np.float32)
    r = await client.post(
        "/v2/models/calc/infer", content=x.tobytes(), headers={"Inference-Header-Content-Length": "0"}
    )
    assert r.status_code == 200, r.text
    out = outputs_of(r)
    np.testing.assert_array_equal(out["y"], x.reshape(2, 3) * 3 + 1)


@pytest.mark.anyio
async def test_infer_parameters(client):
    x = np.ones((1, 3), np.float32)
    for params in (
        {"priority": 3},
        {"use_run_handler_pool": False},
        {"use_run_handler_pool": True},
        {"timeout": 5_000_000},
        {"custom": "ignored"},
    ):
        r = await client.post("/v2/models/calc/infer", json=calc_request(x, parameters=params))
        assert r.status_code == 200, (params, r.text)
        assert r.json()["outputs"][0]["data"] == [4.0, 4.0, 4.0]


@pytest.mark.anyio
@pytest.mark.parametrize("pool", [False, True])
async def test_infer_trace(client, pool):
    x = np.ones((1, 3), np.float32)
    r = await client.post(
        "/v2/models/calc/infer",
        json=calc_request(x, parameters={"trace": True, "use_run_handler_pool": pool}),
    )
    assert r.status_code == 200, r.text
    body = r.json()
    trace = json.loads(body["parameters"]["trace"])
    names = {e.get("name") for e in trace["traceEvents"]}
    assert {"receive+decode", "wait for run handler", "compute"} <= names
    ops = {e["args"]["op"] for e in trace["traceEvents"] if e.get("cat") == "Op"}
    assert {"Mul", "AddV2", "Sum"} <= ops
    wait = next(e for e in trace["traceEvents"] if e.get("name") == "wait for run handler")
    assert wait["args"]["run_handler_pool"] is pool
    plain = await client.post("/v2/models/calc/infer", json=calc_request(x))
    assert "parameters" not in plain.json()


@pytest.mark.anyio
async def test_infer_timeout_answers_504(client):
    request = {
        "inputs": [{"name": "x", "shape": [], "datatype": "FP32", "data": [1.0]}],
        "parameters": {"timeout": 1},
    }
    r = await client.post("/v2/models/slow/infer", json=request)
    assert r.status_code == 504, r.text
    assert "deadline" in r.json()["error"].lower()


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("model", "request_json", "status", "message"),
    [
        (
            "calc",
            {"inputs": [{"name": "z", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}]},
            400,
            "Model 'calc' has no input 'z'; its inputs are: x",
        ),
        (
            "calc",
            calc_request(np.ones((1, 3)), outputs=[{"name": "nope"}]),
            400,
            "Model 'calc' has no output 'nope'; its outputs are: total, y",
        ),
        (
            "calc",
            {"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP64", "data": [1, 2, 3]}]},
            400,
            "input 'x' has datatype FP64 but model 'calc' expects FP32",
        ),
        (
            "calc",
            calc_request(np.ones((2, 2))),
            400,
            r"Cannot feed value of shape \(2, 2\) for Tensor 'x:0', which has shape \(\?, 3\)",
        ),
        (
            "calc",
            {"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [1, 2]}]},
            400,
            r"input 'x': shape \[1, 3\] needs 3 elements but 'data' holds 2",
        ),
        (
            "calc",
            {"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FLOAT", "data": [1, 2, 3]}]},
            400,
            "unknown datatype 'FLOAT'",
        ),
        (
            "calc",
            calc_request(np.ones((1, 3)), parameters={"timeout": -5}),
            400,
            "parameter 'timeout' must be a non-negative integer",
        ),
        (
            "calc",
            calc_request(np.ones((1, 3)), parameters={"priority": "high"}),
            400,
            "parameter 'priority' must be an integer",
        ),
        (
            "calc",
            calc_request(np.ones((1, 3)), parameters={"trace": "yes"}),
            400,
            "parameter 'trace' must be a boolean",
        ),
        (
            "calc",
            calc_request(np.ones((1, 3)), parameters={"use_run_handler_pool": 1}),
            400,
            "parameter 'use_run_handler_pool' must be a boolean",
        ),
        ("calc", calc_request(np.ones((1, 3)), parameters={"sequence_id": 4}), 501, "sequence batching"),
        (
            "calc",
            calc_request(np.ones((1, 3)), outputs=[{"name": "y", "parameters": {"classification": 2}}]),
            501,
            "classification",
        ),
        (
            "types",
            {"inputs": [{"name": "a", "shape": [1], "datatype": "INT32", "data": [1]}]},
            400,
            "You must feed a value for placeholder tensor 'flag' with dtype bool",
        ),
        ("nope", calc_request(np.ones((1, 3))), 404, "Model 'nope' not found"),
    ],
)
async def test_infer_errors(client, model, request_json, status, message):
    r = await client.post(f"/v2/models/{model}/infer", json=request_json)
    assert r.status_code == status, r.text
    body = r.json()
    assert re.search(message, body["error"]), body


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("content", "headers", "message"),
    [
        (b"{oops", {}, "not valid JSON"),
        (b'{"inputs": []}', {}, "'inputs' must be a non-empty list"),
        (
            b'{"inputs": []}',
            {"Inference-Header-Content-Length": "x"},
            "Inference-Header-Content-Length must be an integer",
        ),
        (
            json.dumps(
                {
                    "inputs": [
                        {
                            "name": "x",
                            "shape": [1, 3],
                            "datatype": "FP32",
                            "parameters": {"binary_data_size": 12},
                        }
                    ]
                }
            ).encode()
            + b"\0" * 8,
            "header",
            "binary_data_size 12 goes past the end of the body",
        ),
        (
            np.zeros(4, np.float32).tobytes(),
            {"Inference-Header-Content-Length": "0"},
            r"a raw request for input 'x' of shape \[-1, 3\] \(FP32\) cannot be 16 bytes",
        ),
    ],
)
async def test_infer_body_errors(client, content, headers, message):
    if headers == "header":
        headers = {"Inference-Header-Content-Length": str(content.index(b"\0"))}
    r = await client.post("/v2/models/calc/infer", content=content, headers=headers)
    assert r.status_code == 400, r.text
    assert re.search(message, r.json()["error"])


@pytest.mark.anyio
async def test_raw_request_needs_one_input(client):
    r = await client.post(
        "/v2/models/types/infer", content=b"\0" * 4, headers={"Inference-Header-Content-Length": "0"}
    )
    assert r.status_code == 400
    assert "needs a model with exactly one input" in r.json()["error"]
