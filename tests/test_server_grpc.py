"""The gRPC front end on the real app and runtime, driven with stubs generated from our protos (the wire
format tritonclient.grpc and tensorflow-serving-api speak; the real clients are in
test_server_tritonclient_grpc.py and, for TF Serving, checked by hand: see the README).

Every answer is compared with the HTTP endpoint's for the same request: one core path."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
from support import RUNS, sleep_op
from test_server_kserve import CONFIG, write_models

from poolserve.proto import (
    classification_pb2,
    config_pb2,
    example_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    grpc_service_pb2,
    grpc_service_pb2_grpc,
    inference_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
    types_pb2,
)
from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.dtypes import BFLOAT16
from poolserve.runtime.tensor import from_ndarray, to_ndarray
from poolserve.server import codec, grpc_raw
from poolserve.server.app import create_app
from poolserve.server.auth import AdminToken
from poolserve.server.config import config_source, load_config
from poolserve.server.grpc_server import GrpcServer, apply_deadline
from poolserve.server.kserve_grpc import ModelInferAdapter
from poolserve.server.service import InferenceService, InferRequest

pb = grpc_service_pb2
pytestmark = pytest.mark.anyio
SLEEPS = 20  # nodes of the sleepy model, 50 ms each
FIXTURES = Path(__file__).parent / "fixtures" / "saved_models"
EXPECTED = np.load(FIXTURES / "tf1_classify.npz")


def write_sleepy(folder: Path, prefix: str) -> None:
    """sleepy.pb: SLEEPS TestSleep nodes of 50 ms (``<prefix>0``, ``<prefix>1``, ...) from x to y."""
    b = GraphBuilder()
    x: str = b.placeholder("x", np.float32, (None,))
    for i in range(SLEEPS):
        x = sleep_op(b, x, 0.05, f"{prefix}{i}")
    b.identity(x, name="y")
    (folder / "sleepy.pb").write_bytes(b.graph_def.SerializeToString())


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Any:
    folder = tmp_path_factory.mktemp("grpc")
    write_models(folder)
    write_sleepy(folder, "nap")
    classify = FIXTURES / "tf1_classify"
    (folder / "poolserve.toml").write_text(
        CONFIG
        + '[[models]]\nname = "sleepy"\npath = "sleepy.pb"\n'
        + f'[[models]]\nname = "classify"\npath = "{classify}"\n'
        + f'[[models]]\nname = "sparse"\npath = "{FIXTURES / "tf1_parse_sparse"}"\n'
    )
    return create_app(load_config(folder / "poolserve.toml"))


@pytest.fixture(scope="module")
async def channel(app: Any) -> Any:
    server = GrpcServer(app.state.service)
    port = await server.start("127.0.0.1", 0)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        yield ch
    await server.stop(None)


@pytest.fixture(scope="module")
async def http(app: Any) -> Any:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://grpc") as c:
        yield c


@pytest.fixture
def kserve(channel: Any) -> grpc_service_pb2_grpc.GRPCInferenceServiceStub:
    return grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)


@pytest.fixture
def tfs(channel: Any) -> prediction_service_pb2_grpc.PredictionServiceStub:
    return prediction_service_pb2_grpc.PredictionServiceStub(channel)


def service_of(app: Any) -> InferenceService:
    service: InferenceService = app.state.service
    return service


def raw_request(model: str, **inputs: np.ndarray) -> grpc_service_pb2.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=model)
    for name, value in inputs.items():
        request.inputs.add(name=name, datatype="FP32", shape=value.shape)
        request.raw_input_contents.append(value.tobytes())
    return request


def outputs_of(response: grpc_service_pb2.ModelInferResponse) -> dict[str, np.ndarray]:
    dtypes = {"FP32": np.float32, "INT32": np.int32, "BOOL": np.bool_, "FP16": np.float16}
    out = {}
    for o, raw in zip(response.outputs, response.raw_output_contents, strict=True):
        if o.datatype == "BYTES":
            out[o.name] = raw
        else:
            out[o.name] = np.frombuffer(raw, dtypes[o.datatype]).reshape(tuple(o.shape))
    return out


async def expect_error(call: Any, code: grpc.StatusCode) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    assert info.value.code() == code, info.value.details()
    details: str = info.value.details()
    return details


# --- KServe v2 -----------------------------------------------------------------------------------------


async def test_health_and_metadata_match_http(kserve: Any, http: httpx.AsyncClient) -> None:
    assert (await kserve.ServerLive(pb.ServerLiveRequest())).live
    assert (await kserve.ServerReady(pb.ServerReadyRequest())).ready
    assert (await kserve.ModelReady(pb.ModelReadyRequest(name="calc", version="1"))).ready
    assert not (await kserve.ModelReady(pb.ModelReadyRequest(name="calc", version="9"))).ready
    assert not (await kserve.ModelReady(pb.ModelReadyRequest(name="nope"))).ready
    meta = await kserve.ServerMetadata(pb.ServerMetadataRequest())
    assert (meta.name, list(meta.extensions)) == ("poolserve", (await http.get("/v2")).json()["extensions"])
    assert list(meta.extensions) == [
        "binary_tensor_data",
        "model_repository",
        "model_configuration",
        "parameters",
        "schedule_policy",
        "statistics",
    ]
    model = await kserve.ModelMetadata(pb.ModelMetadataRequest(name="calc"))
    expected = (await http.get("/v2/models/calc")).json()
    got = {
        "name": model.name,
        "versions": list(model.versions),
        "platform": model.platform,
        "inputs": [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in model.inputs],
        "outputs": [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in model.outputs],
    }
    assert got == expected
    index = await kserve.RepositoryIndex(pb.RepositoryIndexRequest())
    assert [(m.name, m.version, m.state) for m in index.models][:2] == [
        ("calc", "1", "READY"),
        ("calc", "2", "READY"),
    ]


@pytest.mark.parametrize(
    ("method", "says"),
    [
        ("SystemSharedMemoryStatus", "shared memory is not supported by poolserve"),
        ("SystemSharedMemoryRegister", "in raw_input_contents over gRPC"),
        ("SystemSharedMemoryUnregister", "shared memory is not supported"),
        ("CudaSharedMemoryStatus", "(system or CUDA)"),
        ("CudaSharedMemoryRegister", "shared memory is not supported"),
        ("CudaSharedMemoryUnregister", "shared memory is not supported"),
        ("TraceSetting", "x-request-id"),
        ("LogSettings", "does not support Triton's log settings"),
    ],
)
async def test_tritons_shared_memory_and_settings_calls_are_unimplemented_saying_why(
    channel: Any, method: str, says: str
) -> None:
    """Triton's calls our proto does not declare: UNIMPLEMENTED with the reason, not grpc's "Method not
    found!" (the request, whatever its bytes, is not read)."""
    call = channel.unary_unary(f"/inference.GRPCInferenceService/{method}")
    details = await expect_error(call(b"\x0a\x02r0"), grpc.StatusCode.UNIMPLEMENTED)
    assert says in details, details


@pytest.mark.parametrize("version", ["", "1"])
async def test_infer_raw_equals_http(kserve: Any, http: httpx.AsyncClient, version: str) -> None:
    x = np.random.default_rng(3).standard_normal((5, 3)).astype(np.float32)
    request = raw_request("calc", x=x)
    request.model_version, request.id = version, "r-1"
    response = await kserve.ModelInfer(request)
    path = f"/v2/models/calc/versions/{version}/infer" if version else "/v2/models/calc/infer"
    body = {"inputs": [{"name": "x", "shape": [5, 3], "datatype": "FP32", "data": x.ravel().tolist()}]}
    expected = (await http.post(path, json=body)).json()
    assert (response.model_name, response.model_version, response.id) == ("calc", version or "2", "r-1")
    assert expected["model_version"] == response.model_version
    got = outputs_of(response)
    for out in expected["outputs"]:
        assert [o.datatype for o in response.outputs if o.name == out["name"]] == [out["datatype"]]
        np.testing.assert_array_equal(
            got[out["name"]], np.reshape(out["data"], out["shape"]).astype(np.float32)
        )


async def test_grpc_calls_count_in_the_statistics(kserve: Any, http: httpx.AsyncClient) -> None:
    """ModelInfer (a success, and a failure) and ModelStreamInfer count for their version as HTTP requests
    do: one set of statistics per version, whatever the protocol."""

    async def counts() -> tuple[int, int, int]:
        [stat] = (await http.get("/v2/models/calc/versions/1/stats")).json()["model_stats"]
        infer = stat["inference_stats"]
        return infer["success"]["count"], infer["fail"]["count"], stat["execution_count"]

    before = await counts()
    request = raw_request("calc", x=np.ones((2, 3), np.float32))
    request.model_version = "1"
    await kserve.ModelInfer(request)
    wrong = raw_request("calc", x=np.ones((2, 2), np.float32))
    wrong.model_version = "1"
    await expect_error(kserve.ModelInfer(wrong), grpc.StatusCode.INVALID_ARGUMENT)
    answers = [a async for a in kserve.ModelStreamInfer(iter([request, request]))]
    assert [a.error_message for a in answers] == ["", ""]
    after = await counts()
    assert (after[0] - before[0], after[1] - before[1], after[2] - before[2]) == (3, 1, 3)


async def test_a_1_mib_raw_tensor_reaches_the_model_and_comes_back_intact(kserve: Any) -> None:
    """bench_grpc's size (a 3-byte length before the raw bytes) with the raw entry at each offset modulo 4 in
    the body (the id shifts it): float32 views where it is aligned, aligned copies where it is not."""
    x = np.random.default_rng(4).standard_normal((87382, 3)).astype(np.float32)  # just over 1 MiB
    residues = set()
    for request_id in ("", "r", "rr", "rrr", "rrrr"):
        request = raw_request("calc", x=x)
        request.id = request_id
        body = request.SerializeToString()
        (view,) = grpc_raw.parse_request(body).raw
        residues.add(
            (np.frombuffer(view, np.uint8).ctypes.data - np.frombuffer(body, np.uint8).ctypes.data) % 4
        )
        response = await kserve.ModelInfer(request)
        assert response.id == request_id
        got = outputs_of(response)
        np.testing.assert_array_equal(got["y"], x * np.float32(3) + np.float32(1))  # calc version 2
        np.testing.assert_array_equal(got["total"], x.sum(axis=1))
    assert residues == {0, 1, 2, 3}


async def test_infer_typed_contents_and_output_selection(kserve: Any) -> None:
    request = pb.ModelInferRequest(model_name="types")
    request.inputs.add(name="a", datatype="INT32", shape=[3]).contents.int_contents.extend([1, -2, 3])
    request.inputs.add(name="flag", datatype="BOOL", shape=[2]).contents.bool_contents.extend([True, False])
    request.inputs.add(name="text", datatype="BYTES", shape=[2]).contents.bytes_contents.extend(
        [b"hi", b"\xff"]
    )
    for name in ("a2", "not_flag", "text_out"):
        request.outputs.add(name=name)
    response = await kserve.ModelInfer(request)
    assert [o.name for o in response.outputs] == ["a2", "not_flag", "text_out"]
    got = outputs_of(response)
    np.testing.assert_array_equal(got["a2"], [2, -4, 6])
    np.testing.assert_array_equal(got["not_flag"], [False, True])
    assert got["text_out"] == b"\x02\x00\x00\x00hi\x01\x00\x00\x00\xff"  # BYTES raw: length, bytes


def _bad(**change: Any) -> grpc_service_pb2.ModelInferRequest:
    request = raw_request("calc", x=np.ones((2, 3), np.float32))
    if "datatype" in change:
        request.inputs[0].datatype = change["datatype"]
    if "raw" in change:
        request.raw_input_contents[0] = change["raw"]
    if "contents" in change:
        del request.raw_input_contents[:]
        request.inputs[0].contents.int_contents.extend(change["contents"])
    if "fp32" in change:
        del request.raw_input_contents[:]
        request.inputs[0].contents.fp32_contents.extend(change["fp32"])
    if "extra_raw" in change:
        request.raw_input_contents.append(b"")
    if "name" in change:
        request.inputs[0].name = change["name"]
    if "version" in change:
        request.model_version = change["version"]
    if "output" in change:
        request.outputs.add(name=change["output"])
    if "timeout" in change:
        request.parameters["timeout"].string_param = change["timeout"]
    return request


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"datatype": "FP64"},
            "input 'x': raw_input_contents[0] is 24 bytes but shape [2, 3] of float64 needs 48",
        ),
        ({"datatype": "INT32"}, "input 'x' has datatype INT32 but model 'calc' expects FP32"),
        ({"datatype": "FLOAT"}, "input 'x': unknown datatype 'FLOAT'"),
        (
            {"raw": b"\0" * 20},
            "input 'x': raw_input_contents[0] is 20 bytes but shape [2, 3] of float32 needs 24",
        ),
        (
            {"contents": [1, 2, 3, 4, 5, 6]},
            "input 'x': datatype FP32 takes its values in contents.fp32_contents, not contents.int_contents",
        ),
        ({"fp32": [1.0, 2.0]}, "input 'x': shape [2, 3] needs 6 values but the contents hold 2"),
        ({"extra_raw": True}, "raw_input_contents has 2 entries but the request has 1 inputs"),
        ({"name": "z"}, "Model 'calc' has no input 'z'"),
        ({"version": "v2"}, "The model version must be an integer, got 'v2'"),
        ({"output": "nope"}, "Model 'calc' has no output 'nope'"),
        (
            {"timeout": "soon"},
            "parameter 'timeout' must be a non-negative integer (microseconds), got 'soon'",
        ),
    ],
)
async def test_bad_infer_requests_are_invalid_argument_naming_the_field(
    kserve: Any, change: dict[str, Any], message: str
) -> None:
    details = await expect_error(kserve.ModelInfer(_bad(**change)), grpc.StatusCode.INVALID_ARGUMENT)
    assert message in details


async def test_a_bytes_count_its_raw_contents_cannot_hold_is_refused_at_once(kserve: Any) -> None:
    """tritonclient.grpc's form of the QA's request: shape [100000000] of BYTES and an empty
    raw_input_contents entry; refused from the entry's size before any array of the elements is made."""
    request = pb.ModelInferRequest(model_name="types")
    request.inputs.add(name="text", datatype="BYTES", shape=[100000000])
    request.raw_input_contents.append(b"")
    start = time.perf_counter()
    details = await expect_error(kserve.ModelInfer(request), grpc.StatusCode.INVALID_ARGUMENT)
    assert time.perf_counter() - start < 0.5
    assert details == (
        "input 'text': shape [100000000] has 100000000 string elements, which need at least 400000000 "
        "bytes (a 4-byte length each), but raw_input_contents[0] is 0 bytes"
    )


@pytest.mark.parametrize("raw", [True, False])
@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ([2**62], "input 'x': shape [4611686018427387904] is impossible: no array of float32"),
        ([2**32, 2**32, 0], "input 'x': shape [4294967296, 4294967296, 0] is impossible"),
        ([1] * 65, "input 'x': shape [1, 1, 1, 1, ...] has 65 dimensions; an array has at most"),
    ],
)
async def test_a_shape_no_array_can_have_is_invalid_argument(
    kserve: Any, raw: bool, shape: list[int], message: str
) -> None:
    """In raw_input_contents and in typed contents: numpy's ValueError was INTERNAL."""
    request = pb.ModelInferRequest(model_name="calc")
    tensor = request.inputs.add(name="x", datatype="FP32", shape=shape)
    if raw:
        request.raw_input_contents.append(b"")
    else:
        tensor.contents.SetInParent()
    details = await expect_error(kserve.ModelInfer(request), grpc.StatusCode.INVALID_ARGUMENT)
    assert details.startswith(message), details


async def test_a_shape_of_many_dimensions_is_refused_at_once(kserve: Any, tfs: Any) -> None:
    """300,000 dimensions of 2 (600 KB): their product, a 90,000-digit integer, took math.prod ~5 s
    holding the GIL, and its text in the error message was past Python's digits limit (INTERNAL)."""
    dims = [2] * 300_000
    message = "input 'x': shape [2, 2, 2, 2, ...] has 300000 dimensions; an array has at most"
    request = pb.ModelInferRequest(model_name="calc")
    request.inputs.add(name="x", datatype="FP32", shape=dims)
    request.raw_input_contents.append(b"")
    predict = predict_request("calc")
    predict.inputs["x"].dtype = types_pb2.DT_FLOAT
    for size in dims:
        predict.inputs["x"].tensor_shape.dim.add(size=size)
    for call in (kserve.ModelInfer(request), tfs.Predict(predict)):
        start = time.perf_counter()
        details = await expect_error(call, grpc.StatusCode.INVALID_ARGUMENT)
        assert time.perf_counter() - start < 1.5
        assert details.startswith(message), details[:200]


async def test_raw_bytes_elements_are_decoded_off_the_event_loop(
    kserve: Any, app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """raw_input_contents cost no parsing, but BYTES elements are read one by one in Python: with other
    requests in flight, many of them leave the loop."""
    offloaded: list[str] = []
    to_thread = codec.in_codec_thread

    async def counting(fn: Any, *args: Any) -> Any:
        offloaded.append(f"{type(fn.__self__).__name__}.{fn.__name__}")
        return await to_thread(fn, *args)

    monkeypatch.setattr(codec, "in_codec_thread", counting)
    texts = pb.ModelInferRequest(model_name="types")
    texts.inputs.add(name="text", datatype="BYTES", shape=[4096])
    texts.raw_input_contents.append(b"\x0c\0\0\0twelve bytes" * 4096)  # 64 KiB
    texts.outputs.add(name="text_out")
    service = service_of(app)
    service.in_flight += 1  # as if another request were in flight
    try:
        for request, offload in (
            (texts, True),
            (raw_request("calc", x=np.zeros((5461, 3), np.float32)), False),
        ):
            offloaded.clear()
            await kserve.ModelInfer(request)
            assert ("ModelInferAdapter.decode" in offloaded) == offload, offloaded
    finally:
        service.in_flight -= 1


async def test_fp16_needs_raw_contents_and_int_range_is_checked(kserve: Any) -> None:
    request = pb.ModelInferRequest(model_name="types")
    request.inputs.add(name="half", datatype="FP16", shape=[2]).contents.fp32_contents.extend([1, 2])
    details = await expect_error(kserve.ModelInfer(request), grpc.StatusCode.INVALID_ARGUMENT)
    assert "input 'half': datatype FP16 has no typed contents: send it in raw_input_contents" in details
    request = pb.ModelInferRequest(model_name="types")
    request.inputs.add(name="a", datatype="INT32", shape=[1]).contents.int64_contents.append(1)
    details = await expect_error(kserve.ModelInfer(request), grpc.StatusCode.INVALID_ARGUMENT)
    assert "contents.int_contents, not contents.int64_contents" in details


async def test_unknown_model_or_version_is_not_found(kserve: Any) -> None:
    details = await expect_error(
        kserve.ModelInfer(raw_request("nope", x=np.ones(1, np.float32))), grpc.StatusCode.NOT_FOUND
    )
    assert details.startswith("Model 'nope' not found; the server has: calc, ")
    request = raw_request("calc", x=np.ones((1, 3), np.float32))
    request.model_version = "7"
    details = await expect_error(kserve.ModelInfer(request), grpc.StatusCode.NOT_FOUND)
    assert details == "Model 'calc' has no version 7; it has: 1, 2"
    details = await expect_error(
        kserve.ModelMetadata(pb.ModelMetadataRequest(name="nope")), grpc.StatusCode.NOT_FOUND
    )
    assert "Model 'nope' not found" in details


# --- request parameters --------------------------------------------------------------------------------


async def test_priority_timeout_and_pool_parameters_reach_the_request(app: Any) -> None:
    request = raw_request("calc", x=np.ones((1, 3), np.float32))
    request.parameters["priority"].uint64_param = 5
    request.parameters["timeout"].int64_param = 2500  # microseconds: 3 ms
    request.parameters["use_run_handler_pool"].bool_param = False
    infer, _ = ModelInferAdapter().decode(request, service_of(app).model("calc"))
    assert infer.run_options is not None
    # Triton's level 5 (1 is the highest, 2 the default's) is below the default in the pool's order
    assert infer.run_options.experimental.run_handler_pool_options.priority == -3
    assert infer.run_options.timeout_in_ms == 3
    assert infer.use_run_handler_pool is False


async def test_priority_follows_triton_levels_up_to_the_largest_uint64(app: Any) -> None:
    def pool_priority(level: int) -> int:
        request = raw_request("calc", x=np.ones((1, 3), np.float32))
        request.parameters["priority"].uint64_param = level
        infer, _ = ModelInferAdapter().decode(request, service_of(app).model("calc"))
        assert infer.run_options is not None
        return infer.run_options.experimental.run_handler_pool_options.priority

    levels = [1, 0, 2, 3, 2**63 + 5, 2**64 - 1]
    got = [pool_priority(level) for level in levels]
    assert got[0] > got[1] == got[2] > got[3] > got[4] == got[5]


@pytest.mark.parametrize("pool", [True, False])
async def test_trace_parameter_returns_the_trace_and_use_run_handler_pool_is_honoured(
    kserve: Any, pool: bool
) -> None:
    request = raw_request("calc", x=np.ones((1, 3), np.float32))
    request.parameters["trace"].bool_param = True
    request.parameters["use_run_handler_pool"].bool_param = pool
    call = kserve.ModelInfer(request, metadata=(("x-request-id", f"traced-{pool}"),))
    response = await call
    assert dict(await call.trailing_metadata())["x-request-id"] == f"traced-{pool}"
    trace = json.loads(response.parameters["trace"].string_param)
    waits = [e for e in trace["traceEvents"] if e.get("name") == "wait for run handler"]
    assert [w["args"]["run_handler_pool"] for w in waits] == [pool]
    assert waits[0]["args"]["request_id"] == f"traced-{pool}"


async def test_timeout_parameter_stops_the_step(kserve: Any, app: Any) -> None:
    request = raw_request("sleepy", x=np.ones(2, np.float32))
    request.parameters["timeout"].int64_param = 150_000
    details = await expect_error(kserve.ModelInfer(request), grpc.StatusCode.DEADLINE_EXCEEDED)
    assert "(KServe's 'timeout' parameter)" in details  # what the client set, not RunOptions
    assert f"nap{SLEEPS - 1}" not in RUNS
    text, _ = service_of(app).metrics.exposition()
    assert b'poolserve_timeouts_total{model="sleepy"}' in text


# --- deadlines and cancellation ------------------------------------------------------------------------


def answered(service: InferenceService, model: str, status: int, rpc: str = "ModelInfer") -> float:
    """How many KServe ``rpc`` calls (or stream requests) for ``model`` were answered with (the HTTP
    equivalent of) ``status``."""
    text, _ = service.metrics.exposition()
    key = f'endpoint="/inference.GRPCInferenceService/{rpc}",model="{model}",status="{status}"}} '
    for line in text.decode().splitlines():
        if line.startswith("poolserve_requests_total{") and key in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def steps_end(service: InferenceService) -> None:
    """Waits for the steps, and the calls' handlers (they count their answer as they leave), to end."""
    for _ in range(300):
        if service.steps_running == 0 and service.in_flight == 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the step did not end")


async def test_grpc_deadline_becomes_the_step_timeout(kserve: Any, app: Any) -> None:
    service = service_of(app)
    await steps_end(service)
    timeouts = answered(service, "sleepy", 504)
    started = time.monotonic()
    await expect_error(
        kserve.ModelInfer(raw_request("sleepy", x=np.ones(2, np.float32)), timeout=0.2),
        grpc.StatusCode.DEADLINE_EXCEEDED,
    )
    await steps_end(service)
    assert time.monotonic() - started < 0.5 * SLEEPS * 0.05  # stopped, not run to its end
    assert f"nap{SLEEPS - 1}" not in RUNS
    assert answered(service, "sleepy", 504) == timeouts + 1, answered(service, "sleepy", 499)


def test_a_grpc_deadline_is_named_as_the_timeout_only_when_it_is_the_shorter() -> None:
    request = InferRequest("m", {})
    apply_deadline(request, 0.2)
    assert request.run_options is not None and request.run_options.timeout_in_ms == 200
    assert request.timeout_source == "the gRPC call's deadline"
    own = InferRequest("m", {}, run_options=config_pb2.RunOptions(timeout_in_ms=50))
    apply_deadline(own, 0.2)  # the request's own is shorter: it stays the step's timeout, and named
    assert own.run_options is not None and own.run_options.timeout_in_ms == 50 and own.timeout_source is None


async def test_cancelled_call_cancels_the_step(kserve: Any, app: Any) -> None:
    service = service_of(app)
    await steps_end(service)
    cancelled = answered(service, "sleepy", 499)
    call = kserve.ModelInfer(raw_request("sleepy", x=np.ones(2, np.float32)))
    for _ in range(200):
        if service.steps_running:
            break
        await asyncio.sleep(0.01)
    assert service.steps_running == 1
    call.cancel()
    await steps_end(service)
    assert f"nap{SLEEPS - 1}" not in RUNS
    assert answered(service, "sleepy", 499) == cancelled + 1


async def test_grpc_calls_share_the_http_admission(
    kserve: Any, app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The per-client limit answers RESOURCE_EXHAUSTED (HTTP's 429) and a queue that cannot meet the call's
    deadline UNAVAILABLE (503), from the same Admission as HTTP's."""
    service = service_of(app)
    await steps_end(service)
    monkeypatch.setattr(service.config.server, "max_in_flight_per_client", 1)
    mine = (("x-client-id", "mine"),)
    long = kserve.ModelInfer(raw_request("sleepy", x=np.ones(2, np.float32)), metadata=mine)
    for _ in range(200):
        if service.steps_running:
            break
        await asyncio.sleep(0.01)
    assert service.admission.clients == {"mine": 1}
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await kserve.ModelInfer(raw_request("calc", x=np.ones((1, 3), np.float32)), metadata=mine)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "'mine' already has 1 requests in flight" in str(refused.value.details())
    other = (("x-client-id", "other"),)
    await kserve.ModelInfer(raw_request("calc", x=np.ones((1, 3), np.float32)), metadata=other)
    # the queue holds 2 s of work per sleepy call: one with a 1 s deadline is shed at once
    service.admission.cost["sleepy"] = 2.0
    start = time.monotonic()
    with pytest.raises(grpc.aio.AioRpcError) as shed:
        await kserve.ModelInfer(raw_request("sleepy", x=np.ones(2, np.float32)), metadata=other, timeout=1.0)
    assert shed.value.code() == grpc.StatusCode.UNAVAILABLE and time.monotonic() - start < 0.5
    assert "cannot answer a 'sleepy' request within" in str(shed.value.details())
    long.cancel()
    await steps_end(service)
    assert service.admission.clients == {} and not service.admission.open


# --- TF Serving ----------------------------------------------------------------------------------------


def predict_request(model: str, **inputs: Any) -> predict_pb2.PredictRequest:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    for name, value in inputs.items():
        request.inputs[name].CopyFrom(from_ndarray(value))
    return request


async def test_bfloat16_over_tf_serving_and_kserve_grpc(tfs: Any, kserve: Any) -> None:
    # DT_BFLOAT16 TensorProtos (tensor_content) to TF Serving's Predict, BF16 raw contents to ModelInfer
    x = np.array([1.5, -2.25, 1 / 3], BFLOAT16)
    request = predict_request("types", bf16=x)
    request.output_filter.append("bf16_out")
    response = await tfs.Predict(request)
    assert response.outputs["bf16_out"].dtype == types_pb2.DT_BFLOAT16
    got = to_ndarray(response.outputs["bf16_out"])
    assert got.dtype == BFLOAT16
    np.testing.assert_array_equal(
        got.view(np.uint16), (x.astype(np.float32) * 2).astype(BFLOAT16).view(np.uint16)
    )
    infer = pb.ModelInferRequest(model_name="types")
    infer.inputs.add(name="bf16", datatype="BF16", shape=x.shape)
    infer.raw_input_contents.append(x.tobytes())
    infer.outputs.add(name="bf16_out")
    answer = await kserve.ModelInfer(infer)
    assert answer.outputs[0].datatype == "BF16"
    np.testing.assert_array_equal(
        np.frombuffer(answer.raw_output_contents[0], np.uint16), got.view(np.uint16)
    )


async def test_predict_equals_http(tfs: Any, http: httpx.AsyncClient) -> None:
    x = np.random.default_rng(5).standard_normal((4, 3)).astype(np.float32)
    response = await tfs.Predict(predict_request("calc", x=x))
    expected = (await http.post("/v1/models/calc:predict", json={"inputs": {"x": x.tolist()}})).json()[
        "outputs"
    ]
    assert set(response.outputs) == set(expected) == {"y", "total"}
    for name, value in expected.items():
        got = to_ndarray(response.outputs[name])
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, np.asarray(value, np.float32))
    spec = response.model_spec
    assert (spec.name, spec.version.value, spec.signature_name) == ("calc", 2, "serving_default")


async def test_predict_version_label_and_output_filter(tfs: Any) -> None:
    x = np.ones((2, 3), np.float32)
    request = predict_request("calc", x=x)
    request.model_spec.version.value = 1
    request.output_filter.append("y")
    response = await tfs.Predict(request)
    assert list(response.outputs) == ["y"] and response.model_spec.version.value == 1
    np.testing.assert_array_equal(to_ndarray(response.outputs["y"]), np.full((2, 3), 3.0, np.float32))
    request = predict_request("calc", x=x)
    request.model_spec.version_label = "stable"
    assert (await tfs.Predict(request)).model_spec.version.value == 2
    request.model_spec.version_label = "canary"
    details = await expect_error(tfs.Predict(request), grpc.StatusCode.NOT_FOUND)
    assert "Unrecognized servable version label: canary" in details


@pytest.mark.parametrize(
    ("change", "code", "message"),
    [
        (
            "dtype",
            grpc.StatusCode.INVALID_ARGUMENT,
            "input 'x': the model expects dtype float32 but the tensor holds float64",
        ),
        ("name", grpc.StatusCode.INVALID_ARGUMENT, "Model 'calc' has no input 'z'"),
        ("signature", grpc.StatusCode.INVALID_ARGUMENT, 'Serving signature name: "other" not found'),
        ("spec", grpc.StatusCode.INVALID_ARGUMENT, "Missing ModelSpec"),
        ("content", grpc.StatusCode.INVALID_ARGUMENT, "input 'x': tensor_content has 5 bytes"),
        ("model", grpc.StatusCode.NOT_FOUND, "Model 'nope' not found"),
        ("version", grpc.StatusCode.NOT_FOUND, "Model 'calc' has no version 4"),
    ],
)
async def test_bad_predict_requests(tfs: Any, change: str, code: grpc.StatusCode, message: str) -> None:
    x = np.ones((2, 3), np.float32)
    request = predict_request(
        "calc", **{"z" if change == "name" else "x": x.astype(np.float64) if change == "dtype" else x}
    )
    if change == "signature":
        request.model_spec.signature_name = "other"
    elif change == "spec":
        request.ClearField("model_spec")
    elif change == "content":
        request.inputs["x"].tensor_content = b"12345"
    elif change == "model":
        request.model_spec.name = "nope"
    elif change == "version":
        request.model_spec.version.value = 4
    assert message in await expect_error(tfs.Predict(request), code)


@pytest.mark.parametrize(
    ("dims", "message"),
    [
        (
            (2**40, 2**40),
            "input 'x': shape [1099511627776, 1099511627776] is impossible: no array of float32",
        ),
        ((2**40, 2**40, 0), "input 'x': shape [1099511627776, 1099511627776, 0] is impossible"),
        ((1,) * 65, "input 'x': shape [1, 1, 1, 1, ...] has 65 dimensions; an array has at most"),
    ],
)
async def test_predict_refuses_a_tensor_shape_no_array_can_have(
    tfs: Any, dims: tuple[int, ...], message: str
) -> None:
    request = predict_request("calc")
    tensor = request.inputs["x"]
    tensor.dtype = types_pb2.DT_FLOAT
    for size in dims:
        tensor.tensor_shape.dim.add(size=size)
    details = await expect_error(tfs.Predict(request), grpc.StatusCode.INVALID_ARGUMENT)
    assert details.startswith(message), details


async def test_predict_bounds_what_a_tensor_filled_from_fewer_values_expands_to(tfs: Any) -> None:
    """A few bytes declaring [6000000, 3] floats and one value: 72 MB once filled, past the server's
    max_request_bytes (64 MiB); a smaller one is filled, as TF Serving fills it."""
    request = predict_request("calc")
    tensor = request.inputs["x"]
    tensor.dtype = types_pb2.DT_FLOAT
    tensor.tensor_shape.dim.add(size=2)
    tensor.tensor_shape.dim.add(size=3)
    tensor.float_val.append(1.0)
    response = await tfs.Predict(request)
    np.testing.assert_array_equal(to_ndarray(response.outputs["y"]), np.full((2, 3), 4.0, np.float32))
    tensor.tensor_shape.dim[0].size = 6000000
    details = await expect_error(tfs.Predict(request), grpc.StatusCode.INVALID_ARGUMENT)
    assert details.startswith(
        "input 'x': shape [6000000, 3] filled from 1 of its 18000000 values would take 72000000 bytes of "
        "float32, past max_request_bytes (67108864)"
    ), details


async def test_model_metadata_and_status(tfs: Any, channel: Any, http: httpx.AsyncClient) -> None:
    request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    request.model_spec.name = "calc"
    response = await tfs.GetModelMetadata(request)
    sigs = get_model_metadata_pb2.SignatureDefMap()
    assert response.metadata["signature_def"].Unpack(sigs)
    expected = (await http.get("/v1/models/calc/metadata")).json()["metadata"]["signature_def"][
        "signature_def"
    ]
    assert set(sigs.signature_def) == set(expected) == {"serving_default"}
    sd = sigs.signature_def["serving_default"]
    assert sd.method_name == "tensorflow/serving/predict"
    assert (sd.inputs["x"].name, sd.inputs["x"].dtype, [d.size for d in sd.inputs["x"].tensor_shape.dim]) == (
        "x:0",
        1,
        [-1, 3],
    )
    assert set(sd.outputs) == set(expected["serving_default"]["outputs"])
    request.metadata_field[:] = ["graph"]
    details = await expect_error(tfs.GetModelMetadata(request), grpc.StatusCode.INVALID_ARGUMENT)
    assert "Metadata field graph is not supported" in details

    # a SavedModel's signatures keep their methods, over REST as over gRPC
    request.model_spec.name = "classify"
    request.metadata_field[:] = ["signature_def"]
    response = await tfs.GetModelMetadata(request)
    assert response.metadata["signature_def"].Unpack(sigs)
    rest = (await http.get("/v1/models/classify/metadata")).json()["metadata"]["signature_def"][
        "signature_def"
    ]
    methods = {name: sd.method_name for name, sd in sigs.signature_def.items()}
    assert methods == {name: sd["method_name"] for name, sd in rest.items()}
    assert methods["serving_default"] == "tensorflow/serving/classify"
    assert methods["regress"] == "tensorflow/serving/regress"

    models = model_service_pb2_grpc.ModelServiceStub(channel)
    status = await models.GetModelStatus(
        get_model_status_pb2.GetModelStatusRequest(model_spec={"name": "calc"})
    )
    available = get_model_status_pb2.ModelVersionStatus.AVAILABLE
    assert [(s.version, s.state) for s in status.model_version_status] == [(2, available), (1, available)]
    one = get_model_status_pb2.GetModelStatusRequest(model_spec={"name": "calc", "version": {"value": 1}})
    assert [s.version for s in (await models.GetModelStatus(one)).model_version_status] == [1]
    missing = get_model_status_pb2.GetModelStatusRequest(model_spec={"name": "nope"})
    assert "Model 'nope' not found" in await expect_error(
        models.GetModelStatus(missing), grpc.StatusCode.NOT_FOUND
    )


def examples_request(cls: Any, signature: str = "", context: bool = False) -> Any:
    request = cls(model_spec={"name": "classify", "signature_name": signature})
    if context:
        given = request.input.example_list_with_context
        given.context.features.feature["k"].int64_list.value.append(4)
        given.examples.add().features.feature["x"].float_list.value.extend([1.0, 1.0])
        return request
    first = request.input.example_list.examples.add()
    first.features.feature["x"].float_list.value.extend([1.0, 2.0])
    second = request.input.example_list.examples.add()
    second.features.feature["x"].float_list.value.extend([0.5, -1.0])
    second.features.feature["k"].int64_list.value.append(2)
    return request


async def test_classify_and_regress_match_tensorflow(tfs: Any) -> None:
    response = await tfs.Classify(examples_request(classification_pb2.ClassificationRequest))
    assert (response.model_spec.name, response.model_spec.signature_name) == ("classify", "serving_default")
    rows = response.result.classifications
    assert [[c.label for c in row.classes] for row in rows] == [["a", "b", "c"]] * 2
    scores = [[c.score for c in row.classes] for row in rows]
    np.testing.assert_allclose(scores, EXPECTED["plain_scores"], rtol=1e-6)
    context = await tfs.Classify(examples_request(classification_pb2.ClassificationRequest, context=True))
    got = [[c.score for c in row.classes] for row in context.result.classifications]
    np.testing.assert_allclose(got, EXPECTED["context_scores"], rtol=1e-6)
    regression = await tfs.Regress(examples_request(regression_pb2.RegressionRequest, "regress"))
    np.testing.assert_allclose([r.value for r in regression.result.regressions], EXPECTED["plain_value"])
    assert regression.model_spec.signature_name == "regress"


def examples_json(request: Any) -> dict[str, Any]:
    """An examples_request as the REST :classify/:regress body TF Serving's JSON gives for it."""

    def features(example: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, feature in example.features.feature.items():
            kind = feature.WhichOneof("kind")
            out[name] = list(getattr(feature, kind).value)
        return out

    given = request.input
    body: dict[str, Any] = {"signature_name": request.model_spec.signature_name}
    if given.WhichOneof("kind") == "example_list_with_context":
        body["context"] = features(given.example_list_with_context.context)
        body["examples"] = [features(e) for e in given.example_list_with_context.examples]
    else:
        body["examples"] = [features(e) for e in given.example_list.examples]
    return body


@pytest.mark.parametrize("context", [False, True])
async def test_rest_classify_and_regress_answer_what_grpc_does(
    tfs: Any, http: httpx.AsyncClient, context: bool
) -> None:
    """The REST :classify and :regress run the same examples to the same numbers as gRPC Classify and
    Regress: labels equal, each score and value the same float32."""
    request = examples_request(classification_pb2.ClassificationRequest, context=context)
    grpc_rows = (await tfs.Classify(request)).result.classifications
    rest = await http.post("/v1/models/classify:classify", json=examples_json(request))
    assert rest.status_code == 200, rest.text
    assert [[label for label, _ in row] for row in rest.json()["results"]] == [
        [c.label for c in row.classes] for row in grpc_rows
    ]
    assert [[np.float32(score) for _, score in row] for row in rest.json()["results"]] == [
        [np.float32(c.score) for c in row.classes] for row in grpc_rows
    ]
    request = examples_request(regression_pb2.RegressionRequest, "regress", context=context)
    grpc_values = [np.float32(r.value) for r in (await tfs.Regress(request)).result.regressions]
    rest = await http.post("/v1/models/classify:regress", json=examples_json(request))
    assert rest.status_code == 200, rest.text
    assert [np.float32(v) for v in rest.json()["results"]] == grpc_values
    # and the same error for a signature of the other method
    wrong = regression_pb2.RegressionRequest(model_spec={"name": "classify"}, input=request.input)
    details = await expect_error(tfs.Regress(wrong), grpc.StatusCode.INVALID_ARGUMENT)
    rest = await http.post("/v1/models/classify:regress", json={**examples_json(wrong), "signature_name": ""})
    assert rest.status_code == 400 and rest.json()["error"] == details


@pytest.mark.parametrize(
    ("call", "request_", "message"),
    [
        (
            "Classify",
            classification_pb2.ClassificationRequest(model_spec={"name": "calc"}),
            "Expected classification signature method_name to be tensorflow/serving/classify. Was: tensorflow/serving/predict",
        ),
        (
            "Regress",
            regression_pb2.RegressionRequest(model_spec={"name": "classify"}),
            "Expected regression signature method_name to be tensorflow/serving/regress. Was: tensorflow/serving/classify",
        ),
        (
            "Classify",
            classification_pb2.ClassificationRequest(model_spec={"name": "classify"}),
            "Input is empty",
        ),
    ],
)
async def test_classify_and_regress_errors(tfs: Any, call: str, request_: Any, message: str) -> None:
    details = await expect_error(getattr(tfs, call)(request_), grpc.StatusCode.INVALID_ARGUMENT)
    assert message in details


async def test_missing_feature_is_invalid_argument(tfs: Any) -> None:
    request = regression_pb2.RegressionRequest(model_spec={"name": "classify", "signature_name": "regress"})
    request.input.example_list.examples.add().features.feature["k"].int64_list.value.append(1)
    details = await expect_error(tfs.Regress(request), grpc.StatusCode.INVALID_ARGUMENT)
    assert "Feature: x (data type: float) is required but could not be found" in details


def multi_request(*tasks: tuple[str, str, str], context: bool = False) -> inference_pb2.MultiInferenceRequest:
    """A MultiInference over examples_request's examples: tasks of (model, signature, method)."""
    examples = examples_request(classification_pb2.ClassificationRequest, context=context)
    request = inference_pb2.MultiInferenceRequest(input=examples.input)
    for model, signature, method in tasks:
        request.tasks.add(model_spec={"name": model, "signature_name": signature}, method_name=method)
    return request


CLASSIFY = "tensorflow/serving/classify"
REGRESS = "tensorflow/serving/regress"


async def test_multi_inference_matches_tensorflow(tfs: Any) -> None:
    request = multi_request(("classify", "regress", REGRESS), ("classify", "", CLASSIFY))
    response = await tfs.MultiInference(request)
    regression, classification = response.results
    assert [
        (r.model_spec.name, r.model_spec.signature_name, r.model_spec.version.value) for r in response.results
    ] == [
        ("classify", "regress", 1),
        ("classify", "serving_default", 1),
    ]
    assert regression.WhichOneof("result") == "regression_result"
    got = [r.value for r in regression.regression_result.regressions]
    np.testing.assert_allclose(got, EXPECTED["plain_value"])
    rows = classification.classification_result.classifications
    assert [[c.label for c in row.classes] for row in rows] == [["a", "b", "c"]] * 2
    np.testing.assert_allclose(
        [[c.score for c in row.classes] for row in rows], EXPECTED["plain_scores"], rtol=1e-6
    )
    # with a context Example merged into each
    context = await tfs.MultiInference(multi_request(("classify", "regress", REGRESS), context=True))
    np.testing.assert_allclose(
        [r.value for r in context.results[0].regression_result.regressions], EXPECTED["context_value"]
    )


@pytest.mark.parametrize(
    ("tasks", "code", "message"),
    [
        ((), grpc.StatusCode.INVALID_ARGUMENT, "MultiInferenceRequest has no tasks"),
        (
            (("classify", "", CLASSIFY), ("calc", "", REGRESS)),
            grpc.StatusCode.INVALID_ARGUMENT,
            "All ModelSpecs in a MultiInferenceRequest must access the same model name.",
        ),
        (
            (("classify", "", CLASSIFY), ("classify", "serving_default", CLASSIFY)),
            grpc.StatusCode.INVALID_ARGUMENT,
            "Duplicate evaluation of signature: serving_default",
        ),
        (
            (("classify", "predict", "tensorflow/serving/predict"),),
            grpc.StatusCode.UNIMPLEMENTED,
            "Unsupported signature method_name: 'tensorflow/serving/predict'",
        ),
        (
            (("classify", "regress", CLASSIFY),),
            grpc.StatusCode.INVALID_ARGUMENT,
            "Expected classification signature method_name to be tensorflow/serving/classify. Was: "
            "tensorflow/serving/regress",
        ),
        (
            (("classify", "nosuch", CLASSIFY),),
            grpc.StatusCode.INVALID_ARGUMENT,
            'Serving signature name: "nosuch" not found',
        ),
        ((("nope", "", CLASSIFY),), grpc.StatusCode.NOT_FOUND, "Model 'nope' not found"),
    ],
)
async def test_multi_inference_errors(tfs: Any, tasks: Any, code: grpc.StatusCode, message: str) -> None:
    details = await expect_error(tfs.MultiInference(multi_request(*tasks)), code)
    assert message in details


async def test_predict_parses_sparse_and_ragged_features_as_tensorflow(tfs: Any) -> None:
    """The parsed parts of sparse (VarLenFeature) and ragged features, through Predict: TensorFlow's."""
    expected = json.loads((FIXTURES / "tf1_parse_sparse.json").read_text())
    blobs = []
    for features in expected["examples"]:
        ex = example_pb2.Example()
        for key, (kind, values) in features.items():
            field = getattr(ex.features.feature[key], kind)
            field.SetInParent()
            field.value.extend([v.encode() for v in values] if kind == "bytes_list" else values)
        blobs.append(ex.SerializeToString())
    serialized = np.empty(len(blobs), dtype=object)
    serialized[:] = blobs
    response = await tfs.Predict(predict_request("sparse", inputs=serialized))
    assert sorted(response.outputs) == sorted(expected["serving_default"])
    for name, want in expected["serving_default"].items():
        got = to_ndarray(response.outputs[name])
        assert list(got.shape) == want["shape"], name
        if got.dtype == object:
            assert [v.decode() for v in got.ravel().tolist()] == want["data"], name
        else:
            assert str(got.dtype) == want["dtype"], name
            np.testing.assert_array_equal(got, np.asarray(want["data"], got.dtype).reshape(got.shape))


async def test_metadata_reports_each_signatures_method(tfs: Any) -> None:
    request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    request.model_spec.name = "classify"
    sigs = get_model_metadata_pb2.SignatureDefMap()
    (await tfs.GetModelMetadata(request)).metadata["signature_def"].Unpack(sigs)
    methods = {name: sd.method_name for name, sd in sigs.signature_def.items()}
    assert methods == {
        "serving_default": "tensorflow/serving/classify",
        "regress": "tensorflow/serving/regress",
        "predict": "tensorflow/serving/predict",
    }


async def test_http_and_grpc_share_metrics_and_traces(app: Any, tfs: Any) -> None:
    x = np.ones((1, 3), np.float32)
    call = tfs.Predict(predict_request("calc", x=x))
    await call
    request_id = dict(await call.trailing_metadata())["x-request-id"]
    assert len(request_id) == 32
    text, _ = service_of(app).metrics.exposition()
    assert b'endpoint="/tensorflow.serving.PredictionService/Predict",model="calc",status="200"}' in text


async def test_taken_port_is_an_error(app: Any, channel: Any) -> None:
    first = GrpcServer(service_of(app))
    port = await first.start("127.0.0.1", 0)
    try:
        with pytest.raises(RuntimeError, match=f"cannot listen for gRPC on 127.0.0.1:{port}"):
            await GrpcServer(service_of(app)).start("127.0.0.1", port)
    finally:
        await first.stop(None)


async def test_repository_load_with_an_invalid_config_file_is_invalid_argument(kserve: Any, app: Any) -> None:
    source = config_source(service_of(app).config)
    assert source is not None
    good = source.read_text()
    source.write_text(good + "typo = 1\n")
    try:
        load = grpc_service_pb2.RepositoryModelLoadRequest(model_name="sleepy")
        message = await expect_error(kserve.RepositoryModelLoad(load), grpc.StatusCode.INVALID_ARGUMENT)
        assert "not loading 'sleepy'" in message and "typo" in message
    finally:
        source.write_text(good)
    await kserve.RepositoryModelLoad(load)


async def test_repository_index_load_and_unload_over_grpc(kserve: Any, app: Any) -> None:
    index = await kserve.RepositoryIndex(grpc_service_pb2.RepositoryIndexRequest())
    assert {(m.name, m.state) for m in index.models} >= {("sleepy", "READY"), ("classify", "READY")}
    service = service_of(app)
    service.admin_token = AdminToken("grpc-admin")
    try:
        unload = grpc_service_pb2.RepositoryModelUnloadRequest(model_name="sleepy")
        await expect_error(kserve.RepositoryModelUnload(unload), grpc.StatusCode.UNAUTHENTICATED)
        admin = (("authorization", "Bearer grpc-admin"),)
        await kserve.RepositoryModelUnload(unload, metadata=admin)
        ready = await kserve.ModelReady(grpc_service_pb2.ModelReadyRequest(name="sleepy"))
        assert not ready.ready
        index = await kserve.RepositoryIndex(
            grpc_service_pb2.RepositoryIndexRequest(ready=True), metadata=admin
        )
        assert "sleepy" not in {m.name for m in index.models}
        # once drained, the index names the version the call unloaded, as Triton's does
        request = grpc_service_pb2.RepositoryIndexRequest()
        for _ in range(200):
            index = await kserve.RepositoryIndex(request, metadata=admin)
            rows = [(m.version, m.state) for m in index.models if m.name == "sleepy"]
            if rows != [("1", "UNLOADING")]:
                break
            await asyncio.sleep(0.02)
        assert rows == [("1", "UNAVAILABLE")]
        load = grpc_service_pb2.RepositoryModelLoadRequest(model_name="sleepy")
        await kserve.RepositoryModelLoad(load, metadata=admin)
        assert (await kserve.ModelReady(grpc_service_pb2.ModelReadyRequest(name="sleepy"))).ready
        missing = grpc_service_pb2.RepositoryModelLoadRequest(model_name="nope")
        await expect_error(kserve.RepositoryModelLoad(missing, metadata=admin), grpc.StatusCode.NOT_FOUND)
        load.parameters["config"].string_param = "{}"
        message = await expect_error(
            kserve.RepositoryModelLoad(load, metadata=admin), grpc.StatusCode.UNIMPLEMENTED
        )
        assert "config" in message
    finally:
        service.admin_token = AdminToken()
