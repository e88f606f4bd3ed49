"""The TF Serving REST adapter: /v1/models/{m}[:predict|/metadata] on the real app and runtime."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import httpx
import numpy as np
import pytest
from support import assert_close

from poolserve.configs import make_models
from poolserve.proto import types_pb2
from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.graph import Graph
from poolserve.runtime.session import Session
from poolserve.server import codec
from poolserve.server.app import create_app
from poolserve.server.config import load_config
from poolserve.server.tfserving import example_from_json, to_array

MLP = Path(make_models.__file__).resolve().parent / "models" / "mlp.pb"
# a SavedModel whose signatures parse tf.Examples: serving_default classifies, regress regresses (x: two
# floats, k: an int64, default 3); TensorFlow's answers in the .npz (tools/make_classify_fixture.py)
CLASSIFY = Path(__file__).parent / "fixtures" / "saved_models" / "tf1_classify"
EXPECTED = np.load(CLASSIFY.parent / "tf1_classify.npz")

CONFIG = f"""
[server]
default_timeout_ms = 10000

[[models]]
name = "mlp"
path = "{MLP}"
version = 1
[[models]]
name = "mlp"
path = "{MLP}"
version = 2

[[models]]
name = "branches"
path = "{MLP.parent / "branches.pb"}"

[[models]]
name = "multi"
path = "multi.pb"
outputs = {{ scaled = "scaled:0", count = "count:0", echo = "echo:0", echo_bytes = "echo:0" }}

[[models]]
name = "multi_scalar"
path = "multi.pb"
outputs = {{ scaled = "scaled:0", total = "total:0" }}

[[models]]
name = "multi_ragged"
path = "multi.pb"
outputs = {{ scaled = "scaled:0", doubled = "doubled:0" }}

[[models]]
name = "decode"
path = "decode.pb"

[[models]]
name = "classify"
path = "{CLASSIFY}"
"""


def write_multi(path: Path) -> None:
    """Inputs a float32 [None, 2], n int32 [None], text string [None]; outputs of every kind."""
    b = GraphBuilder()
    a = b.placeholder("a", np.float32, (None, 2))
    n = b.placeholder("n", np.int32, (None,))
    text = b.placeholder("text", object, (None,))
    b.identity(b.mul(a, b.constant(np.float32(2.0))), name="scaled")
    b.identity(b.add(n, b.constant(np.int32(1))), name="count")
    b.identity(text, name="echo")
    axes = b.constant(np.asarray([0, 1], np.int32))
    b.op("Sum", [a, axes], {"T": np.float32, "Tidx": np.int32, "keep_dims": False}, name="total")
    axis = b.constant(np.int32(0))
    b.op("ConcatV2", [a, a, axis], {"T": np.float32, "N": 2, "Tidx": np.int32}, name="doubled")
    path.write_bytes(b.graph_def.SerializeToString())


def write_decode(path: Path) -> None:
    """A JPEG's bytes in (a scalar string), its channels' means out: a graph that decodes what it serves."""
    b = GraphBuilder()
    image = b.placeholder("image", object, ())
    pixels = b.op("DecodeJpeg", [image], {"channels": 3}, name="decoded")
    floats = b.op("Cast", [pixels], {"SrcT": np.uint8, "DstT": np.float32}, name="floats")
    axes = b.constant(np.asarray([0, 1], np.int32))
    b.op("Mean", [floats, axes], {"T": np.float32, "Tidx": np.int32, "keep_dims": False}, name="mean")
    path.write_bytes(b.graph_def.SerializeToString())


@pytest.fixture(scope="module")
def anyio_backend():
    return "asyncio"


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tfserving")
    write_multi(folder / "multi.pb")
    write_decode(folder / "decode.pb")
    (folder / "poolserve.toml").write_text(CONFIG)
    return create_app(load_config(folder / "poolserve.toml"))


@pytest.fixture(scope="module")
async def client(app):
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://tfserving") as c:
            yield c


@pytest.fixture(scope="module")
def mlp_reference():
    x = np.random.default_rng(7).standard_normal((3, 64)).astype(np.float32)
    with Session(Graph.load(MLP)) as sess:
        return x, sess.run("probabilities:0", {"input:0": x})


async def predict(client, path: str, body) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return await client.post(path, content=content, headers={"content-type": "application/json"})


async def error_of(client, path: str, body, status: int = 400) -> str:
    r = await predict(client, path, body)
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    return r.json()["error"]


def nested(value, depth: int):
    """``value`` in ``depth`` lists."""
    for _ in range(depth):
        value = [value]
    return value


def b64(data: bytes) -> dict[str, str]:
    return {"b64": base64.b64encode(data).decode()}


# --- the codec ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "value", "expected"),
    [
        (types_pb2.DT_FLOAT, [[1, 2.5]], np.array([[1, 2.5]], np.float32)),
        (types_pb2.DT_HALF, [0.5, 3], np.array([0.5, 3], np.float16)),
        (types_pb2.DT_DOUBLE, 0.1, np.array(0.1, np.float64)),
        (types_pb2.DT_INT8, [-128, 127], np.array([-128, 127], np.int8)),
        (types_pb2.DT_INT32, [1.0, -2.0], np.array([1, -2], np.int32)),  # integral floats are integers
        (types_pb2.DT_INT64, [2**63 - 1], np.array([2**63 - 1], np.int64)),
        (types_pb2.DT_UINT8, [[0], [255]], np.array([[0], [255]], np.uint8)),
        (types_pb2.DT_UINT64, [2**64 - 1], np.array([2**64 - 1], np.uint64)),
        (types_pb2.DT_BOOL, [True, False], np.array([True, False])),
        (types_pb2.DT_FLOAT, [[], []], np.zeros((2, 0), np.float32)),
        (types_pb2.DT_INT32, [], np.zeros((0,), np.int32)),
        # the graph does not tell the dtype: JSON's own types, floats as float32
        (types_pb2.DT_INVALID, [1.5, 2], np.array([1.5, 2], np.float32)),
        (types_pb2.DT_INVALID, [1, 2], np.array([1, 2], np.int64)),
        (types_pb2.DT_INVALID, [True], np.array([True])),
    ],
)
def test_to_array_casts_to_the_input_dtype(code, value, expected):
    assert_close(to_array(value, code, "input 'x'"), expected, rtol=0, atol=0)


@pytest.mark.parametrize("code", [types_pb2.DT_STRING, types_pb2.DT_INVALID])
def test_to_array_strings(code):
    arr = to_array([["a", b64(b"\x00\xff")], ["\u00e9", ""]], code, "input 's'")
    assert arr.dtype == object and arr.shape == (2, 2)
    assert arr.tolist() == [[b"a", b"\x00\xff"], ["\u00e9".encode(), b""]]
    assert to_array("x", code, "s").shape == ()


@pytest.mark.parametrize(
    ("code", "value", "match"),
    [
        (types_pb2.DT_INT8, [128], "out of range for dtype int8 \\[-128, 127\\]"),
        (types_pb2.DT_UINT8, [-1], "out of range for dtype uint8"),
        (types_pb2.DT_INT32, [float("nan")], "expected integers"),
        (types_pb2.DT_BOOL, [0, 1], "expected true/false for dtype bool, got numbers"),
        (types_pb2.DT_INT32, ["1"], "expected integers for dtype int32, got text"),
        (types_pb2.DT_FLOAT, [[1], 2], "ragged nested lists"),
        (types_pb2.DT_STRING, [{"b64": 1}], "got an object"),
        (types_pb2.DT_INVALID, [None], "expected numbers, true/false or text"),
    ],
)
def test_to_array_refuses(code, value, match):
    with pytest.raises(InvalidArgumentError, match=match):
        to_array(value, code, "input 'x'")


# --- predict: formats ------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_row_format_single_input(client, mlp_reference):
    x, expected = mlp_reference
    r = await predict(client, "/v1/models/mlp:predict", {"instances": x.tolist()})
    assert r.status_code == 200, r.text
    body = r.json()
    assert list(body) == ["predictions"]
    # float32 values survive JSON exactly (Python writes their float64 value in full)
    assert_close(np.asarray(body["predictions"], np.float32), expected, rtol=0, atol=0)


@pytest.mark.anyio
async def test_row_format_named_instances(client, mlp_reference):
    x, expected = mlp_reference
    body = {"signature_name": "serving_default", "instances": [{"input": row} for row in x.tolist()]}
    r = await predict(client, "/v1/models/mlp:predict", body)
    assert r.status_code == 200, r.text
    assert_close(np.asarray(r.json()["predictions"], np.float32), expected, rtol=0, atol=0)


@pytest.mark.anyio
@pytest.mark.parametrize("named", [False, True])
async def test_columnar_format_single_input(client, mlp_reference, named):
    x, expected = mlp_reference
    inputs = {"input": x.tolist()} if named else x.tolist()
    r = await predict(client, "/v1/models/mlp:predict", {"inputs": inputs})
    assert r.status_code == 200, r.text
    body = r.json()
    assert list(body) == ["outputs"]
    # one output: the tensor itself, not an object
    assert_close(np.asarray(body["outputs"], np.float32), expected, rtol=0, atol=0)


@pytest.mark.anyio
async def test_row_format_several_inputs_and_outputs_with_b64(client):
    instances = [
        {"a": [1.0, 2.5], "n": 4, "text": "hello"},
        {"a": [-3, 0], "n": -1, "text": b64(b"\xff\x00raw")},
    ]
    r = await predict(client, "/v1/models/multi:predict", {"instances": instances})
    assert r.status_code == 200, r.text
    predictions = r.json()["predictions"]
    assert predictions == [
        {"scaled": [2.0, 5.0], "count": 5, "echo": "hello", "echo_bytes": b64(b"hello")},
        # bytes that are not UTF-8 can only travel as base64
        {"scaled": [-6.0, 0.0], "count": 0, "echo": b64(b"\xff\x00raw"), "echo_bytes": b64(b"\xff\x00raw")},
    ]


@pytest.mark.anyio
async def test_columnar_format_several_inputs_and_outputs(client):
    inputs = {"a": [[1, 2], [3, 4], [5, 6]], "n": [1, 2, 3], "text": ["x", b64(b"y"), "z"]}
    r = await predict(client, "/v1/models/multi:predict", {"inputs": inputs})
    assert r.status_code == 200, r.text
    assert r.json() == {
        "outputs": {
            "scaled": [[2.0, 4.0], [6.0, 8.0], [10.0, 12.0]],
            "count": [2, 3, 4],
            "echo": ["x", "y", "z"],
            "echo_bytes": [b64(b"x"), b64(b"y"), b64(b"z")],
        }
    }


@pytest.mark.anyio
async def test_columnar_format_allows_what_rows_cannot(client):
    """A scalar output and outputs of different batch sizes have no row form, but a columnar one."""
    r = await predict(client, "/v1/models/multi_scalar:predict", {"inputs": {"a": [[1, 2], [3, 4]]}})
    assert r.status_code == 200, r.text
    assert r.json() == {"outputs": {"scaled": [[2.0, 4.0], [6.0, 8.0]], "total": 10.0}}
    r = await predict(client, "/v1/models/multi_ragged:predict", {"inputs": {"a": [[1, 2]]}})
    assert r.status_code == 200, r.text
    assert r.json() == {"outputs": {"scaled": [[2.0, 4.0]], "doubled": [[1.0, 2.0], [1.0, 2.0]]}}


@pytest.mark.anyio
async def test_nan_and_infinity_round_trip(client):
    r = await predict(
        client, "/v1/models/multi_scalar:predict", b'{"inputs": {"a": [[NaN, 1], [Infinity, 2]]}}'
    )
    assert r.status_code == 200, r.text
    assert b"NaN" in r.content and b"Infinity" in r.content
    scaled = np.asarray(json.loads(r.content)["outputs"]["scaled"])
    assert np.isnan(scaled[0, 0]) and scaled[1, 0] == np.inf


# --- predict: versions and labels ------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    "path",
    [
        "/v1/models/mlp/versions/1:predict",
        "/v1/models/mlp/versions/2:predict",
        "/v1/models/mlp/labels/stable:predict",
    ],
)
async def test_predict_versions_and_labels(client, mlp_reference, path):
    x, expected = mlp_reference
    r = await predict(client, path, {"instances": x[:1].tolist()})
    assert r.status_code == 200, r.text
    # a batch of one may round differently from the batch of three (BLAS blocking)
    assert_close(np.asarray(r.json()["predictions"], np.float32), expected[:1], rtol=1e-6, atol=1e-7)


@pytest.mark.anyio
async def test_predict_bad_versions_and_labels(client):
    body = {"instances": [[0.0] * 64]}
    assert "no version 3" in await error_of(client, "/v1/models/mlp/versions/3:predict", body, 404)
    assert "must be an integer, got 'x1'" in await error_of(
        client, "/v1/models/mlp/versions/x1:predict", body
    )
    # 0 is a version number the model does not have (one rule with KServe and native: server.codec)
    assert "no version 0" in await error_of(client, "/v1/models/mlp/versions/0:predict", body, 404)
    assert "canary" in await error_of(client, "/v1/models/mlp/labels/canary:predict", body, 404)


@pytest.mark.anyio
async def test_unknown_model_is_404(client):
    message = await error_of(client, "/v1/models/nope:predict", {"instances": [1]}, 404)
    assert "'nope'" in message and "mlp" in message


# --- predict: request errors -----------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("body", "match"),
    [
        ({"instances": [[0.0] * 64], "inputs": [[0.0] * 64]}, "both 'instances' and 'inputs'"),
        ({"signature_name": "serving_default"}, "Missing 'instances' or 'inputs'"),
        ([[0.0] * 64], "must be a JSON object"),
        ({"instances": {"input": [0.0] * 64}}, "'instances' must be a list"),
        ({"instances": []}, "'instances' is empty"),
        ({"inputs": {}}, "'inputs' is an empty object"),
        ({"instances": [[0.0] * 64], "signature_name": "classify"}, 'signature name: "classify" not found'),
        ({"instances": [[0.0] * 64], "signature_name": 3}, "'signature_name' must be a string"),
        ({"instances": [[0.0] * 64, [0.0] * 63]}, "instance 1 is \\[63\\] but instance 0 is \\[64\\]"),
        (
            {"instances": [{"input": [0.0] * 64}, {"input": [0.0] * 2}]},
            "instance 1 is \\[2\\] but instance 0 is \\[64\\]",
        ),
        (
            {"instances": [{"input": [0.0] * 2}, {"input": [0.0] * 64}]},
            "instance 1 is \\[64\\] but instance 0 is \\[2\\]",
        ),
        ({"inputs": [[0.0] * 64, [0.0] * 63]}, "ragged nested lists"),
        ({"instances": [{"nope": [0.0] * 64}]}, "no input 'nope'; its inputs are: input"),
        ({"inputs": {"input": [[0.0] * 64], "nope": [1]}}, "no input 'nope'"),
        ({"instances": [["a"] * 64]}, "expected numbers for dtype float32, got text"),
        ({"inputs": [[True] * 64]}, "expected numbers for dtype float32, got true/false"),
        ({"inputs": [[None] * 64]}, "expected numbers for dtype float32"),
        ({"instances": [[b64(b"x")] * 64]}, "base64 is for string inputs"),
        ({"instances": [[0.0] * 63]}, "Cannot feed value of shape \\(1, 63\\)"),
        ({"instances": nested([0.0], 65)}, "input 'input': nested lists more than 64 deep"),
        ({"inputs": nested([0.0], 65)}, "input 'input': nested lists more than 64 deep"),
    ],
)
async def test_request_errors(client, body, match):
    message = await error_of(client, "/v1/models/mlp:predict", body)
    assert re.search(match, message), message


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("body", "match"),
    [
        ({"instances": [[1.0, 2.0]]}, "has 3 inputs \\(a, n, text\\)"),
        ({"inputs": [[1.0, 2.0]]}, "has 3 inputs"),
        (
            {"instances": [{"a": [1, 2], "n": 1, "text": "x"}, {"a": [1, 2], "n": 1}]},
            "Instance 1 names inputs \\[a, n\\] but instance 0 names \\[a, n, text\\]",
        ),
        (
            {"instances": [{"a": [1, 2], "n": 1, "text": "x"}, [1, 2]]},
            "Expecting object but got a list at item 1",
        ),
        (
            {"instances": [{"a": [1, 2], "n": 1, "text": "x"}, [1] * 64]},  # read as an array
            "Expecting object but got a list at item 1",
        ),
        ({"inputs": {"a": [[1, 2]], "n": [1.5], "text": ["x"]}}, "expected integers for dtype int32"),
        ({"inputs": {"a": [[1, 2]], "n": [2**31], "text": ["x"]}}, "out of range for dtype int32"),
        (
            {"inputs": {"a": [[1, 2]], "n": [1], "text": [3]}},
            "expected text or .*b64.* for dtype string, got a number",
        ),
        ({"inputs": {"a": [[1, 2]], "n": [1], "text": [{"b64": "!!"}]}}, "invalid base64"),
        (  # JSON's "\ud800", which UTF-8 cannot encode: a UnicodeEncodeError, a 500
            {"inputs": {"a": [[1, 2]], "n": [1], "text": ["\ud800"]}},
            "input 'text': text holds a lone surrogate",
        ),
        ({"inputs": {"a": [[1, 2]], "n": [1], "text": [["x"], "y"]}}, "ragged nested lists"),
        (  # numpy refused the text's shape with a ValueError: a 500
            {"inputs": {"a": [[1, 2]], "n": [1], "text": nested(["x"], 65)}},
            "input 'text': nested lists more than 64 deep; an array has at most 64 dimensions",
        ),
        (
            {"instances": [{"a": [1, 2], "n": 1, "text": nested("x", 65)}]},
            "input 'text': nested lists more than 64 deep",
        ),
        ({"inputs": {"a": [[1, 2]], "n": [1]}}, "must feed a value for placeholder tensor 'text'"),
    ],
)
async def test_request_errors_several_inputs(client, body, match):
    message = await error_of(client, "/v1/models/multi:predict", body)
    assert re.search(match, message), message


@pytest.mark.anyio
async def test_row_format_needs_batched_outputs(client):
    message = await error_of(client, "/v1/models/multi_scalar:predict", {"instances": [{"a": [1, 2]}]})
    assert "Output 'total' is a scalar" in message
    message = await error_of(client, "/v1/models/multi_ragged:predict", {"instances": [{"a": [1, 2]}]})
    assert "Output 'doubled' has inconsistent batch size 2, expecting 1" in message


@pytest.mark.anyio
async def test_malformed_json(client):
    message = await error_of(client, "/v1/models/mlp:predict", b'{"instances": [1,')
    assert message.startswith("malformed JSON")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("body", "message"),
    [
        # past orjson's 1024 levels: Python's json, its fallback, raised RecursionError
        (b'{"instances":' + b"[" * 1100 + b"]" * 1100 + b"}", "malformed JSON: nested too deeply"),
        (b'{"inputs":' + b"[" * 100_000 + b"]" * 100_000 + b"}", "malformed JSON: nested too deeply"),
        # within them: the row format's error path measured each instance's shape recursively
        (
            b'{"instances":' + b"[" * 1000 + b"1" + b"]" * 1000 + b"}",
            "input 'input': nested lists more than 64 deep",
        ),
        (b'{"signature_name":' + b"[" * 1000 + b"]" * 1000 + b"}", "'signature_name' must be a string"),
    ],
)
async def test_json_nested_too_deeply_is_a_400(client, body, message):
    assert (await error_of(client, "/v1/models/mlp:predict", body)).startswith(message)


# --- status and metadata ---------------------------------------------------------------------------------


def available(version: str) -> dict:
    return {"version": version, "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}


@pytest.mark.anyio
async def test_model_status(client):
    r = await client.get("/v1/models/mlp")
    assert r.status_code == 200
    assert r.json() == {"model_version_status": [available("2"), available("1")]}
    r = await client.get("/v1/models/mlp/versions/1")
    assert r.json() == {"model_version_status": [available("1")]}
    r = await client.get("/v1/models/mlp/labels/stable")
    assert r.json() == {"model_version_status": [available("2")]}
    assert (await client.get("/v1/models/mlp/versions/5")).status_code == 404
    assert (await client.get("/v1/models/mlp/versions/one")).status_code == 400
    assert (await client.get("/v1/models/mlp/labels/canary")).status_code == 404
    r = await client.get("/v1/models/nope")
    assert r.status_code == 404 and "'nope'" in r.json()["error"]


def dim(*sizes: int) -> dict:
    return {"dim": [{"size": str(s), "name": ""} for s in sizes], "unknown_rank": False}


@pytest.mark.anyio
async def test_metadata(client):
    r = await client.get("/v1/models/mlp/metadata")
    assert r.status_code == 200
    assert r.json() == {
        "model_spec": {"name": "mlp", "signature_name": "", "version": "2"},
        "metadata": {
            "signature_def": {
                "signature_def": {
                    "serving_default": {
                        "inputs": {
                            "input": {"dtype": "DT_FLOAT", "tensor_shape": dim(-1, 64), "name": "input:0"}
                        },
                        "outputs": {
                            "probabilities": {
                                "dtype": "DT_FLOAT",
                                "tensor_shape": dim(-1, 10),
                                "name": "probabilities:0",
                            }
                        },
                        "method_name": "tensorflow/serving/predict",
                    }
                }
            }
        },
    }
    r = await client.get("/v1/models/mlp/versions/1/metadata")
    assert r.json()["model_spec"]["version"] == "1"
    r = await client.get("/v1/models/mlp/labels/stable/metadata")
    assert r.json()["model_spec"]["version"] == "2"
    assert (await client.get("/v1/models/mlp/labels/canary/metadata")).status_code == 404
    assert (await client.get("/v1/models/nope/metadata")).status_code == 404


@pytest.mark.anyio
async def test_metadata_several_inputs_and_unknown_shapes(client):
    signature = (await client.get("/v1/models/multi/metadata")).json()["metadata"]["signature_def"]
    sig = signature["signature_def"]["serving_default"]
    assert sig["inputs"] == {
        "a": {"dtype": "DT_FLOAT", "tensor_shape": dim(-1, 2), "name": "a:0"},
        "n": {"dtype": "DT_INT32", "tensor_shape": dim(-1), "name": "n:0"},
        "text": {"dtype": "DT_STRING", "tensor_shape": dim(-1), "name": "text:0"},
    }
    unknown = {"dim": [], "unknown_rank": True}
    assert sig["outputs"] == {
        "scaled": {"dtype": "DT_FLOAT", "tensor_shape": unknown, "name": "scaled:0"},
        "count": {"dtype": "DT_INT32", "tensor_shape": unknown, "name": "count:0"},
        "echo": {"dtype": "DT_STRING", "tensor_shape": unknown, "name": "echo:0"},
        "echo_bytes": {"dtype": "DT_STRING", "tensor_shape": unknown, "name": "echo:0"},
    }


@pytest.mark.anyio
async def test_native_run_route_is_not_shadowed(client):
    """ ":predict" and the native ":run" share the /v1/models/{model}:... prefix."""
    r = await client.post("/v1/models/mlp:run", json={"feeds": {}, "fetches": ["probabilities"]})
    assert r.status_code == 400 and "must feed a value for placeholder tensor 'input'" in r.json()["error"]


@pytest.mark.anyio
async def test_large_request_and_response(client, monkeypatch):
    """Big JSON bodies are decoded off the event loop: same answers."""
    offloaded = []
    to_thread = codec.in_codec_thread

    async def counting(fn, *args):
        offloaded.append(fn.__name__)
        return await to_thread(fn, *args)

    monkeypatch.setattr(codec, "in_codec_thread", counting)
    x = np.random.default_rng(3).standard_normal((300, 256)).astype(np.float32)
    with Session(Graph.load(MLP.parent / "branches.pb")) as sess:
        expected = sess.run("output:0", {"input:0": x})
    body = json.dumps({"instances": x.tolist()}).encode()
    assert len(body) > 1 << 20
    r = await predict(client, "/v1/models/branches:predict", body)
    assert r.status_code == 200, r.text
    # the JSON round trip is exact; the sums are not: the pool may run BLAS with fewer threads under load
    assert_close(np.asarray(r.json()["predictions"], np.float32), expected, rtol=1e-5, atol=1e-6)
    # the adapter's, through server.adapter.serve: alone in the server, the body over ALONE_BYTES leaves the
    # loop, the answer's arrays (under it) do not
    assert offloaded == ["decode"]


@pytest.mark.anyio
async def test_an_encoded_image_in_base64_is_decoded_in_the_graph(client):
    """TF Serving's way to send images: {"b64": ...} to a string input the graph decodes (DecodeJpeg);
    the pixels are TensorFlow's (tests/fixtures/images, decoded by TensorFlow 2.21)."""
    images = Path(__file__).parent / "fixtures" / "images"
    with np.load(images / "tf_decoded.npz") as data:
        pixels = data["c420.jpg|DecodeJpeg|channels=3,ratio=1"]
    jpeg = base64.b64encode((images / "c420.jpg").read_bytes()).decode()
    r = await predict(client, "/v1/models/decode:predict", {"inputs": {"image": {"b64": jpeg}}})
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(r.json()["outputs"], pixels.astype(np.float32).mean(axis=(0, 1)), rtol=1e-6)
    bad = await predict(
        client, "/v1/models/decode:predict", {"inputs": {"image": {"b64": "bm90IGEganBlZw=="}}}
    )
    assert bad.status_code == 400 and "Invalid JPEG data" in bad.json()["error"]


# --- classify and regress --------------------------------------------------------------------------------

# the examples TensorFlow's answers in EXPECTED are for: two plain ones, and one with a context
PLAIN = [{"x": [1.0, 2.0]}, {"x": [0.5, -1.0], "k": 2}]
WITH_CONTEXT = {"context": {"k": 4}, "examples": [{"x": [1.0, 1.0]}]}


def scores_of(response: httpx.Response) -> tuple[list[list[str]], np.ndarray]:
    """A :classify answer's labels and scores, the scores read as the float32 they were written from."""
    results = response.json()["results"]
    labels = [[label for label, _ in row] for row in results]
    return labels, np.asarray([[score for _, score in row] for row in results], np.float32)


@pytest.mark.anyio
@pytest.mark.parametrize(
    "path",
    [
        "/v1/models/classify:classify",
        "/v1/models/classify/versions/1:classify",
        "/v1/models/classify/labels/stable:classify",
    ],
)
async def test_classify_gives_tensorflows_scores(client, path):
    r = await predict(client, path, {"examples": PLAIN})
    assert r.status_code == 200, r.text
    assert list(r.json()) == ["results"]
    labels, scores = scores_of(r)
    assert labels == [["a", "b", "c"]] * 2
    np.testing.assert_allclose(scores, EXPECTED["plain_scores"], rtol=1e-6)
    # a context's features go into every example
    labels, scores = scores_of(await predict(client, path, WITH_CONTEXT))
    np.testing.assert_allclose(scores, EXPECTED["context_scores"], rtol=1e-6)


@pytest.mark.anyio
@pytest.mark.parametrize(
    "path",
    [
        "/v1/models/classify:regress",
        "/v1/models/classify/versions/1:regress",
        "/v1/models/classify/labels/stable:regress",
    ],
)
async def test_regress_gives_tensorflows_values(client, path):
    r = await predict(client, path, {"signature_name": "regress", "examples": PLAIN})
    assert r.status_code == 200, r.text
    assert r.json() == {"results": EXPECTED["plain_value"].tolist()}
    r = await predict(client, path, {"signature_name": "regress", **WITH_CONTEXT})
    assert r.json() == {"results": EXPECTED["context_value"].tolist()}


@pytest.mark.anyio
async def test_classify_scores_are_written_as_float32(client):
    """Each score is written with the digits its float32 needs (as TF Serving writes them), not the 17 of
    a float32 widened to a float64."""
    r = await predict(client, "/v1/models/classify:classify", {"examples": PLAIN[:1]})
    written = re.findall(r'"[abc]",([^\]]+)\]', r.text)
    assert len(written) == 3
    for text in written:
        digits = re.sub(r"e.*", "", text).replace(".", "").lstrip("-0")
        assert len(digits) <= 9, text


def test_examples_from_json_take_tf_servings_feature_kinds():
    example = example_from_json(
        {"i": 3, "b": True, "f": 1.5, "fs": [1.0, 2.5], "t": "héllo", "raw": b64(b"\x00\xff"), "none": []},
        "examples[0]",
    )
    feature = example.features.feature
    assert list(feature["i"].int64_list.value) == [3]
    assert list(feature["b"].int64_list.value) == [1]  # booleans are int64s, as in TF Serving
    assert list(feature["f"].float_list.value) == [1.5]
    assert list(feature["fs"].float_list.value) == [1.0, 2.5]
    assert list(feature["t"].bytes_list.value) == ["héllo".encode()]
    assert list(feature["raw"].bytes_list.value) == [b"\x00\xff"]
    assert feature["none"].WhichOneof("kind") is None  # an empty list: a feature of no kind


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("path", "body", "match"),
    [
        # the signature's method, as TF Serving words it
        (
            "/v1/models/classify:regress",
            {"examples": PLAIN},
            "Expected regression signature method_name to be tensorflow/serving/regress. "
            "Was: tensorflow/serving/classify",
        ),
        (
            "/v1/models/classify:classify",
            {"signature_name": "regress", "examples": PLAIN},
            "Expected classification signature method_name to be tensorflow/serving/classify. "
            "Was: tensorflow/serving/regress",
        ),
        (
            "/v1/models/mlp:classify",
            {"examples": PLAIN},
            "Expected classification signature method_name to be tensorflow/serving/classify. "
            "Was: tensorflow/serving/predict",
        ),
        (
            "/v1/models/classify:classify",
            {"signature_name": "nope", "examples": PLAIN},
            'name: "nope" not found',
        ),
        # the envelope
        ("/v1/models/classify:classify", {"instances": [1]}, "Missing 'examples' key"),
        ("/v1/models/classify:classify", [PLAIN], "must be a JSON object"),
        (
            "/v1/models/classify:classify",
            {"examples": {"x": [1.0]}},
            "'examples' must be a list .* got an object",
        ),
        ("/v1/models/classify:classify", {"examples": []}, "'examples' is an empty list"),
        (
            "/v1/models/classify:classify",
            {"examples": PLAIN, "signature_name": 1},
            "'signature_name' must be a string",
        ),
        ("/v1/models/classify:classify", {"examples": [[1.0, 2.0]]}, "examples\\[0\\] must be an Example"),
        ("/v1/models/classify:classify", {"context": [1], "examples": PLAIN}, "'context' must be an Example"),
        # the features' values
        (
            "/v1/models/classify:classify",
            {"examples": [{"x": [1, 2.5]}]},
            "feature 'x' of examples\\[0\\], element 1 is float but the feature's first value is int64",
        ),
        (
            "/v1/models/classify:classify",
            {"examples": [{"x": None}]},
            "feature 'x' of examples\\[0\\] is null",
        ),
        ("/v1/models/classify:classify", {"examples": [{"x": [[1.0]]}]}, "element 0 is a list"),
        ("/v1/models/classify:classify", {"examples": [{"x": {"y": 1}}]}, "is an object"),
        ("/v1/models/classify:classify", {"examples": [{"x": b64(b"x") | {"more": 1}}]}, "is an object"),
        ("/v1/models/classify:classify", {"examples": [{"s": {"b64": "!!"}}]}, "invalid base64"),
        ("/v1/models/classify:classify", {"examples": [{"k": 2**63}]}, "outside int64"),
        ("/v1/models/classify:classify", {"examples": [{"x": [1e39, 1.0]}]}, "beyond float32's range"),
        # what the graph's parser says of a feature of the wrong kind or a missing one (TensorFlow's words)
        ("/v1/models/classify:classify", {"examples": [{"x": [1, 2]}]}, "Data types don't match"),
        (
            "/v1/models/classify:classify",
            {"examples": [{"k": 1}]},
            "Feature: x \\(data type: float\\) is required",
        ),
    ],
)
async def test_classify_and_regress_errors_name_the_problem(client, path, body, match):
    message = await error_of(client, path, body)
    assert re.search(match, message), message


@pytest.mark.anyio
async def test_classify_unknown_model_or_version(client):
    assert "'nope'" in await error_of(client, "/v1/models/nope:classify", {"examples": PLAIN}, 404)
    assert "no version 7" in await error_of(
        client, "/v1/models/classify/versions/7:regress", {"examples": PLAIN}, 404
    )


@pytest.mark.anyio
async def test_a_mixed_bfloat16_model_answers_tensorflows_numbers_in_json() -> None:
    # the Keras mixed_bfloat16 fixture (tools/make_bfloat16_fixture.py): a DT_BFLOAT16 input takes JSON
    # numbers (rounded to nearest even), bfloat16 outputs come back as the numbers they hold
    from poolserve.runtime.dtypes import BFLOAT16
    from poolserve.server.config import make_config

    fixture = Path(__file__).parent / "fixtures" / "models" / "bfloat16"
    with np.load(fixture.with_suffix(".npz")) as data:
        x, y = data["in:x:0"], data["in:y:0"].view(BFLOAT16)
        want = {
            k[4:-2]: data[k].view(BFLOAT16) if k in data["bfloat16"] else data[k]
            for k in data.files
            if k.startswith("out:")
        }
    app = create_app(make_config({"models": [{"name": "bf16", "path": str(fixture.with_suffix(".pb"))}]}))
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://t") as c,
    ):
        meta = (await c.get("/v1/models/bf16/metadata")).json()
        inputs = meta["metadata"]["signature_def"]["signature_def"]["serving_default"]["inputs"]
        assert inputs["y"]["dtype"] == "DT_BFLOAT16"
        body = {"inputs": {"x": x.tolist(), "y": y.astype(np.float32).tolist()}}
        r = await c.post("/v1/models/bf16:predict", json=body)
    assert r.status_code == 200, r.text
    outputs = r.json()["outputs"]
    for name, w in want.items():
        got = np.asarray(outputs[name], np.float32)
        if w.dtype == BFLOAT16:  # exact: the float32 text of a bfloat16 value reads back to it
            np.testing.assert_array_equal(
                got.astype(BFLOAT16).view(np.uint16), w.view(np.uint16), err_msg=name
            )
        else:
            np.testing.assert_allclose(got, w, rtol=1e-6, atol=1e-7, err_msg=name)
