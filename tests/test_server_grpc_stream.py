"""KServe's ModelStreamInfer on the real app and runtime, driven with stubs generated from our protos
(tritonclient's own calls: test_server_tritonclient_grpc.py). The app here also serves
test_server_kserve_config.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
from support import RUNS
from test_server_grpc import SLEEPS, answered, steps_end, write_sleepy
from test_server_kserve import CONFIG, write_models

from poolserve.proto import grpc_service_pb2, grpc_service_pb2_grpc
from poolserve.server.app import create_app
from poolserve.server.config import load_config
from poolserve.server.grpc_server import STREAM_WINDOW, GrpcServer
from poolserve.server.service import InferenceService

pb = grpc_service_pb2
pytestmark = pytest.mark.anyio
SAVED_MODEL = Path(__file__).parent / "fixtures" / "saved_models" / "tf1_classify"

BATCHED = """
[[models]]
name = "batched"
path = "calc2.pb"
[models.batching]
max_batch_size = 8
max_queue_delay_us = 20000
preferred_batch_sizes = [8, 4]
max_concurrent_batches = 2
[[models]]
name = "auto"
path = "calc1.pb"
[models.batching]
"""


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Any:
    folder = tmp_path_factory.mktemp("grpc_stream")
    write_models(folder)
    write_sleepy(folder, "snap")
    saved = f'[[models]]\nname = "classify"\npath = "{SAVED_MODEL}"\n'
    sleepy = '[[models]]\nname = "sleepy"\npath = "sleepy.pb"\n'
    (folder / "poolserve.toml").write_text(CONFIG + BATCHED + saved + sleepy)
    return create_app(load_config(folder / "poolserve.toml"))


@pytest.fixture(scope="module")
async def kserve(app: Any) -> Any:
    server = GrpcServer(app.state.service)
    port = await server.start("127.0.0.1", 0)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)
    await server.stop(None)


@pytest.fixture(scope="module")
async def http(app: Any) -> Any:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://grpc") as c:
        yield c


# --- ModelStreamInfer ----------------------------------------------------------------------------------


def calc_request(x: np.ndarray, rid: str, model: str = "calc", datatype: str = "FP32") -> Any:
    request = pb.ModelInferRequest(model_name=model, id=rid)
    request.inputs.add(name="x", datatype=datatype, shape=x.shape)
    request.raw_input_contents.append(x.tobytes())
    return request


def y_of(response: Any) -> np.ndarray:
    i = [o.name for o in response.outputs].index("y")
    return np.frombuffer(response.raw_output_contents[i], np.float32).reshape(
        tuple(response.outputs[i].shape)
    )


async def test_stream_answers_each_request_in_order_and_errors_do_not_end_it(kserve: Any) -> None:
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal((i % 3 + 1, 3)).astype(np.float32) for i in range(2 * STREAM_WINDOW + 5)]
    requests = [calc_request(x, f"r{i}") for i, x in enumerate(xs)]
    requests[3] = calc_request(xs[3].astype(np.int32), "r3", datatype="INT32")  # the wrong datatype
    requests[7] = calc_request(xs[7], "r7", model="nope")
    requests[11].parameters["triton_enable_empty_final_response"].bool_param = True
    answers = [a async for a in kserve.ModelStreamInfer(iter(requests))]
    assert [a.infer_response.id for a in answers] == [f"r{i}" for i in range(len(xs))]
    assert answers[3].error_message == "input 'x' has datatype INT32 but model 'calc' expects FP32"
    assert "Model 'nope' not found" in answers[7].error_message
    assert answers[7].infer_response.model_name == "nope"
    for i, (x, answer) in enumerate(zip(xs, answers, strict=True)):
        if i in (3, 7):
            continue
        assert answer.error_message == "", (i, answer.error_message)
        assert answer.infer_response.model_version == "2"
        np.testing.assert_array_equal(y_of(answer.infer_response), x * 3 + 1)
    assert answers[11].infer_response.parameters["triton_final_response"].bool_param
    assert "triton_final_response" not in answers[10].infer_response.parameters


def batch_rows(service: InferenceService, model: str) -> tuple[float, float]:
    """(requests batched, the rows of their batches summed) from the metrics."""
    found = {"count": 0.0, "sum": 0.0}
    for line in service.metrics.exposition()[0].decode().splitlines():
        for key in found:
            if line.startswith(f'poolserve_batch_size_{key}{{model="{model}"}}'):
                found[key] = float(line.rsplit(" ", 1)[1])
    return found["count"], found["sum"]


async def test_stream_requests_run_concurrently_and_batch_together(kserve: Any, app: Any) -> None:
    service: InferenceService = app.state.service
    # one request first: the model's outputs have no static shape, and a step of another row count shows
    # their batch dimension (else the first batch's members run alone, once: server/batching.py)
    await kserve.ModelInfer(calc_request(np.full((2, 3), 9, np.float32), "warm", "batched"))
    count, rows = batch_rows(service, "batched")
    xs = [np.full((1, 3), i, np.float32) for i in range(8)]
    requests = [calc_request(x, str(i), "batched") for i, x in enumerate(xs)]
    answers = [a async for a in kserve.ModelStreamInfer(iter(requests))]
    assert [a.error_message for a in answers] == [""] * 8
    for x, answer in zip(xs, answers, strict=True):
        np.testing.assert_array_equal(y_of(answer.infer_response), x * 3 + 1)
    count2, rows2 = batch_rows(service, "batched")
    assert count2 - count == 8
    assert (
        rows2 - rows > 8
    )  # some ran in a batch of more than one row: the stream did not run them one by one


async def test_stream_interleaved_with_the_client(kserve: Any) -> None:
    """A client that waits for each answer before it sends the next request gets it (the stream does not
    wait for more requests, or for its end, to answer)."""
    call = kserve.ModelStreamInfer()
    for i in range(3):
        x = np.full((2, 3), i, np.float32)
        await call.write(calc_request(x, f"s{i}"))
        answer = await asyncio.wait_for(call.read(), 10)
        assert answer.infer_response.id == f"s{i}" and answer.error_message == ""
        np.testing.assert_array_equal(y_of(answer.infer_response), x * 3 + 1)
    await call.done_writing()
    assert await call.read() == grpc.aio.EOF
    assert await call.code() == grpc.StatusCode.OK


def stream_answered(service: InferenceService, model: str, status: int) -> float:
    return answered(service, model, status, rpc="ModelStreamInfer")


def sleepy_request(rid: str) -> Any:
    request = pb.ModelInferRequest(model_name="sleepy", id=rid)
    request.inputs.add(name="x", datatype="FP32", shape=[2])
    request.raw_input_contents.append(np.ones(2, np.float32).tobytes())
    return request


async def test_cancelled_stream_cancels_its_running_requests(kserve: Any, app: Any) -> None:
    service: InferenceService = app.state.service
    await steps_end(service)
    cancelled = stream_answered(service, "sleepy", 499)

    async def requests() -> AsyncIterator[Any]:
        yield calc_request(np.ones((1, 3), np.float32), "first")
        yield sleepy_request("second")
        await asyncio.sleep(30)  # the client cancels before it sends more

    call = kserve.ModelStreamInfer(requests())
    first = await asyncio.wait_for(call.read(), 10)
    assert first.infer_response.id == "first" and not first.error_message
    for _ in range(200):
        if service.steps_running:
            break
        await asyncio.sleep(0.01)
    assert service.steps_running == 1
    call.cancel()
    await steps_end(service)
    assert f"snap{SLEEPS - 1}" not in RUNS  # stopped, not run to its end
    assert stream_answered(service, "sleepy", 499) == cancelled + 1


async def test_stream_deadline_stops_its_step(kserve: Any, app: Any) -> None:
    service: InferenceService = app.state.service
    await steps_end(service)
    started = time.monotonic()
    call = kserve.ModelStreamInfer(iter([sleepy_request("late")]), timeout=0.2)
    answers = []
    try:
        async for response in call:
            answers.append(response)
    except grpc.aio.AioRpcError as e:
        assert e.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    else:
        # the step's timeout is the call's deadline: it may answer in the stream a moment before the
        # client's own clock ends the call (seen once on a loaded machine)
        assert len(answers) == 1 and "deadline" in answers[0].error_message, answers
    await steps_end(service)
    assert time.monotonic() - started < 0.5 * SLEEPS * 0.05
    assert f"snap{SLEEPS - 1}" not in RUNS
