"""The KServe v2 adapter: the /v2 routes (health, metadata, infer in JSON and binary) on the real app
and runtime. The tensor codec on its own is tested in test_server_kserve_codec.py."""

from __future__ import annotations

import gzip
import json
import re
import time
import tracemalloc
import zlib
from pathlib import Path

import httpx
import numpy as np
import pytest
from support import body_of, bytes_elements, split_response

from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.dtypes import BFLOAT16 as BF16
from poolserve.server import codec
from poolserve.server.app import create_app
from poolserve.server.config import load_config
from poolserve.server.kserve import decode_request

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
    bf16 = b.placeholder("bf16", BF16, (None,))
    b.mul(bf16, b.constant(np.array(2, BF16)), name="bf16_out")  # computed in bfloat16
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
                "BF16": BF16,
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
    runtime = app.state.service
    runtime.ready, runtime.draining = False, draining
    try:
        r = await client.get("/v2/health/ready")
        assert r.status_code == 503
        assert r.json()["error"] == ("the server is shutting down" if draining else "the server is starting")
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
        {"name": "bf16", "datatype": "BF16", "shape": [-1]},
    ]
    assert [(o["name"], o["datatype"]) for o in types["outputs"]] == [
        ("a2", "INT32"),
        ("not_flag", "BOOL"),
        ("text_out", "BYTES"),
        ("half_out", "FP16"),
        ("bf16_out", "BF16"),
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
    ],
)
async def test_unknown_model_or_version(client, path, message):
    r = await client.get(path)
    assert r.status_code == 404
    assert re.search(message, r.json()["error"])


@pytest.mark.anyio
async def test_non_numeric_version_is_a_bad_request(client):
    # one rule for every protocol (server.codec.parse_version): not digits is a 400, an unknown version 404
    r = await client.get("/v2/models/calc/versions/one")
    assert r.status_code == 400
    assert r.json()["error"] == "The model version must be an integer, got 'one'"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("method", "path", "says"),
    [
        ("GET", "/v2/systemsharedmemory/status", "shared memory is not supported by poolserve"),
        ("GET", "/v2/systemsharedmemory/region/r0/status", "send the tensors in the request"),
        ("POST", "/v2/systemsharedmemory/region/r0/register", "shared memory is not supported"),
        ("POST", "/v2/systemsharedmemory/region/r0/unregister", "shared memory is not supported"),
        ("POST", "/v2/systemsharedmemory/unregister", "shared memory is not supported"),
        ("GET", "/v2/cudasharedmemory/status", "(system or CUDA)"),
        ("GET", "/v2/cudasharedmemory/region/r0/status", "shared memory is not supported"),
        ("POST", "/v2/cudasharedmemory/region/r0/register", "shared memory is not supported"),
        ("POST", "/v2/cudasharedmemory/region/r0/unregister", "shared memory is not supported"),
        ("POST", "/v2/cudasharedmemory/unregister", "shared memory is not supported"),
        ("GET", "/v2/trace/setting", "GET /v1/traces/{request id}"),
        ("POST", "/v2/trace/setting", "does not support Triton's trace settings"),
        ("GET", "/v2/models/calc/trace/setting", "parameter trace=true"),
        ("POST", "/v2/models/calc/trace/setting", "sample_rate"),
        ("GET", "/v2/logging", "does not support Triton's log settings"),
        ("POST", "/v2/logging", "--log-level"),
    ],
)
async def test_tritons_shared_memory_and_settings_calls_answer_501_saying_why(client, method, path, says):
    r = await client.request(method, path, json={"key": "a region", "byte_size": 64})
    assert r.status_code == 501, r.text
    assert r.json()["code"] == "UNIMPLEMENTED" and says in r.json()["error"]


@pytest.mark.anyio
async def test_a_shared_memory_input_or_output_is_refused_saying_how_to_send_it(client):
    body = calc_request(np.ones((1, 3)))
    body["inputs"][0]["parameters"] = {"shared_memory_region": "r0", "shared_memory_byte_size": 12}
    del body["inputs"][0]["data"]
    r = await client.post("/v2/models/calc/infer", json=body)
    assert r.status_code == 501
    assert r.json()["error"].startswith("input 'x': shared memory is not supported by poolserve")
    body = calc_request(np.ones((1, 3)), outputs=[{"name": "y", "parameters": {"shared_memory_region": "o"}}])
    r = await client.post("/v2/models/calc/infer", json=body)
    assert r.status_code == 501 and "send the tensors in the request" in r.json()["error"]


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
    bf16 = np.array([1.5, -2.25, 1.0e38, 1 / 3], BF16)
    arrays = {"a": a, "flag": flag, "text": text, "half": half, "bf16": bf16}
    datatypes = {"a": "INT32", "flag": "BOOL", "text": "BYTES", "half": "FP16", "bf16": "BF16"}
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
                "data": [s.decode() for s in v]
                if k == "text"
                else (v.astype(np.float32) if k == "bf16" else v).tolist(),
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
    # BF16: 2 bytes an element in binary data, numbers in JSON
    bf16_out = [o for o in r.json()["outputs"] if o["name"] == "bf16_out"] if not binary else None
    assert bf16_out is None or bf16_out[0]["datatype"] == "BF16"
    want = (bf16.astype(np.float32) * 2).astype(BF16).astype(np.float32)
    np.testing.assert_array_equal(out["bf16_out"].astype(np.float32), want)
    assert out["bf16_out"].dtype == BF16


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
            r"input 'x': shape \[1, 3\] needs 3 values but the data holds 2",
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
            "parameter 'priority' must be a non-negative integer",
        ),
        (
            "calc",
            calc_request(np.ones((1, 3)), parameters={"priority": -1}),
            400,
            r"parameter 'priority' must be a non-negative integer \(1 is the highest\), got -1",
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
        (b"{oops", {}, "malformed JSON"),
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
async def test_a_bytes_count_its_binary_data_cannot_hold_is_refused_at_once(client):
    """The QA's 113-byte body for 100,000,000 BYTES elements: a 400 from the body's size (each element
    needs its 4-byte length) in well under the 1-1.4 s the 800 MB array of them took on the event loop."""
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "text",
                    "shape": [100000000],
                    "datatype": "BYTES",
                    "parameters": {"binary_data_size": 0},
                }
            ]
        }
    ).encode()
    tracemalloc.start()
    try:
        start = time.perf_counter()
        r = await client.post(
            "/v2/models/types/infer",
            content=header,
            headers={"Inference-Header-Content-Length": str(len(header))},
        )
        elapsed = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert r.status_code == 400, r.text
    assert r.json()["error"] == (
        "input 'text': shape [100000000] has 100000000 string elements, which need at least 400000000 "
        "bytes (a 4-byte length each), but binary_data_size is 0 bytes"
    )
    assert elapsed < 0.5 and peak < 16 << 20, (elapsed, peak)


@pytest.mark.anyio
@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize(
    ("datatype", "shape", "message"),
    [
        ("FP32", [4611686018427387904], r"shape \[4611686018427387904\] is impossible: no array of float32"),
        ("BYTES", [4611686018427387904], r"shape \[4611686018427387904\] is impossible: no array of string"),
        ("FP32", [4294967296, 4294967296, 0], r"shape \[4294967296, 4294967296, 0\] is impossible"),
        ("BYTES", [4294967296, 4294967296, 0], r"shape \[4294967296, 4294967296, 0\] is impossible"),
        ("FP32", [1] * 65, r"shape \[1, 1, 1, 1, \.\.\.\] has 65 dimensions; an array has at most"),
    ],
)
async def test_a_shape_no_array_can_have_is_a_400_naming_the_input(client, binary, datatype, shape, message):
    """numpy's ValueError for these shapes was a 500, in JSON and in binary."""
    item = {"name": "x", "shape": shape, "datatype": datatype}
    if binary:
        header = json.dumps({"inputs": [{**item, "parameters": {"binary_data_size": 0}}]}).encode()
        r = await client.post(
            "/v2/models/calc/infer",
            content=header,
            headers={"Inference-Header-Content-Length": str(len(header))},
        )
    else:
        r = await client.post("/v2/models/calc/infer", json={"inputs": [{**item, "data": []}]})
    assert r.status_code == 400, r.text
    assert re.match(f"input 'x': {message}", r.json()["error"]), r.text


@pytest.mark.anyio
async def test_binary_bytes_elements_are_decoded_off_the_event_loop(client, app, monkeypatch):
    """Binary tensors cost no parsing, but BYTES elements are read one by one in Python (a million took
    0.6-0.9 s): with other requests in flight, a body of many leaves the loop as JSON of its size does."""
    offloaded: list[str] = []
    to_thread = codec.in_codec_thread

    async def counting(fn, *args):
        offloaded.append(f"{type(fn.__self__).__name__}.{fn.__name__}")
        return await to_thread(fn, *args)

    monkeypatch.setattr(codec, "in_codec_thread", counting)
    texts = bytes_elements(*[b"twelve bytes"] * 4096)  # 64 KiB
    floats = np.zeros((5461, 3), np.float32).tobytes()  # as many bytes of numbers
    requests = [
        ("types", {"name": "text", "shape": [4096], "datatype": "BYTES"}, texts, "text_out"),
        ("calc", {"name": "x", "shape": [5461, 3], "datatype": "FP32"}, floats, "y"),
    ]
    service = app.state.service
    service.in_flight += 1  # as if another request were in flight
    try:
        for model, item, data, output in requests:
            offloaded.clear()
            parameters = {"binary_data_size": len(data)}
            header = {"inputs": [{**item, "parameters": parameters}], "outputs": [{"name": output}]}
            body, length = body_of({**header, "parameters": {"binary_data_output": True}}, data)
            r = await client.post(
                f"/v2/models/{model}/infer", content=body, headers={"Inference-Header-Content-Length": length}
            )
            assert r.status_code == 200, r.text
            assert ("KServeAdapter.decode" in offloaded) == (model == "types"), (model, offloaded)
    finally:
        service.in_flight -= 1


def deep(depth: int) -> bytes:
    return b"[" * depth + b"1" + b"]" * depth


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("path", "body"),
    [
        # past orjson's 1024 levels: Python's json, its fallback, raised RecursionError
        ("/v2/models/calc/infer", b'{"inputs":' + deep(1100) + b"}"),
        ("/v2/models/calc/infer", b'{"inputs":' + deep(100_000) + b"}"),
        # within them: the error naming the value printed it, and repr recursed past Python's limit
        ("/v2/models/calc/infer", b'{"inputs":[{"name":"x","shape":' + deep(1000) + b',"datatype":"FP32"}]}'),
        ("/v2/models/calc/infer", b'{"id":' + deep(1000) + b',"inputs":[]}'),
        ("/v2/repository/index", deep(1100)),
        ("/v2/repository/index", b'{"ready":' + deep(1000) + b"}"),
        ("/v2/repository/models/calc/load", b'{"parameters":{"x":' + deep(100) + b"}}"),
        ("/v2/repository/models/calc/unload", deep(100_000)),
    ],
)
async def test_json_nested_too_deeply_is_a_400(client, path, body):
    r = await client.post(path, content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json()["error"].startswith("malformed JSON: nested too deeply"), r.text


@pytest.mark.anyio
async def test_a_lone_surrogate_is_named_back_escaped(client):
    """JSON's "\\ud800" has no UTF-8: an error naming it could not be written (the error handler itself
    failed), and an 'id' holding it made the answer fail (a 500)."""
    item = b'{"name":"x","shape":[1,3],"datatype":"FP32","data":[1,2,3]}'
    lone = b'"\\ud800"'  # JSON text: a backslash, then ud800
    for body, message in (
        (b'{"inputs":[' + item.replace(b'"x"', lone) + b"]}", "Model 'calc' has no input '\\ud800'"),
        (b'{"id":' + lone + b',"inputs":[' + item + b"]}", "'id' holds a lone surrogate, which is not text"),
    ):
        r = await client.post(
            "/v2/models/calc/infer", content=body, headers={"content-type": "application/json"}
        )
        assert r.status_code == 400, r.text
        assert r.json()["error"].startswith(message), r.text


@pytest.mark.anyio
async def test_raw_request_needs_one_input(client):
    r = await client.post(
        "/v2/models/types/infer", content=b"\0" * 4, headers={"Inference-Header-Content-Length": "0"}
    )
    assert r.status_code == 400
    assert "needs a model with exactly one input" in r.json()["error"]


# --- compressed request bodies (Content-Encoding), on every protocol ------------------------------------


def _deflate_raw(data: bytes) -> bytes:
    c = zlib.compressobj(wbits=-15)
    return c.compress(data) + c.flush()


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("encoding", "compress"),
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", _deflate_raw),
        ("gzip, deflate", lambda b: zlib.compress(gzip.compress(b))),
        ("identity", lambda b: b),
    ],
)
async def test_a_compressed_body_is_decompressed_on_every_protocol(client, encoding, compress):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for path, body, answer in (
        ("/v2/models/calc/infer", calc_request(x), lambda r: outputs_of(r)["y"]),
        (
            "/v1/models/calc:predict",
            {"instances": x.tolist()},
            lambda r: [p["y"] for p in r.json()["predictions"]],
        ),
        (
            "/v1/models/calc:run",
            {"feeds": {"x": x.tolist()}},
            lambda r: np.reshape(r.json()["outputs"]["y"]["data"], (2, 3)),
        ),
    ):
        raw = json.dumps(body).encode()
        r = await client.post(path, content=compress(raw), headers={"Content-Encoding": encoding})
        assert r.status_code == 200, (path, r.text)
        np.testing.assert_array_equal(answer(r), x * 3 + 1)


@pytest.mark.anyio
async def test_a_binary_kserve_body_is_decompressed_before_its_header_length_is_read(client):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    head = json.dumps({"inputs": [{"name": "x", "shape": [2, 3], "datatype": "FP32",
                                   "parameters": {"binary_data_size": 24}}]}).encode()  # fmt: skip
    r = await client.post(
        "/v2/models/calc/infer",
        content=gzip.compress(head + x.tobytes()),
        headers={"Content-Encoding": "gzip", "Inference-Header-Content-Length": str(len(head))},
    )
    assert r.status_code == 200, r.text
    np.testing.assert_array_equal(outputs_of(r)["y"], x * 3 + 1)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("encoding", "body", "status", "message"),
    [
        ("br", b"{}", 415, "Content-Encoding 'br' is not supported: send gzip, deflate or identity"),
        ("gzip", b"{not gzip}", 400, "the request body is not valid gzip data"),
        ("gzip", gzip.compress(b'{"inputs": []}')[:-6], 400, "the compressed data is truncated"),
        ("deflate", zlib.compress(b"{}") + b"??", 400, "2 bytes follow the compressed data"),
    ],
)
async def test_a_body_its_encoding_cannot_read_is_refused_with_the_reason(
    client, encoding, body, status, message
):
    r = await client.post("/v2/models/calc/infer", content=body, headers={"Content-Encoding": encoding})
    assert r.status_code == status and message in r.json()["error"], r.text


@pytest.mark.anyio
async def test_a_compressed_body_past_max_request_bytes_once_decompressed_is_413(tmp_path):
    write_models(tmp_path)
    (tmp_path / "poolserve.toml").write_text(
        CONFIG.replace("[server]", "[server]\nmax_request_bytes = 32768", 1)
    )
    app = create_app(load_config(tmp_path / "poolserve.toml"))
    bomb = gzip.compress(b" " * 10_000_000)  # ~10 KB that inflates to 10 MB
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://k") as c,
    ):
        r = await c.post("/v2/models/calc/infer", content=bomb, headers={"Content-Encoding": "gzip"})
        assert r.status_code == 413, r.text
        assert "larger than max_request_bytes (32768) once decompressed" in r.json()["error"]
