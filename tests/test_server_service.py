"""server/service.py without HTTP: InferenceService's start-up (pool settings, GIL switch interval), model
lookup, and infer: with and without the RunHandlerPool, the pool the step really used, targets, fetch names,
traces recorded, deadlines and cancellation."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import RUNS, add_graph, sleep_op

from poolserve.proto import config_pb2
from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.errors import DeadlineExceededError, InvalidArgumentError, NotFoundError
from poolserve.runtime.run_handler import DEFAULT_STRETCH, get_pool
from poolserve.runtime.session import Session
from poolserve.server import native
from poolserve.server.config import load_config, make_config
from poolserve.server.models import make_entry
from poolserve.server.service import QUIET_AFTER_REFUSAL_S, InferenceService, InferRequest

SLOW_LAYERS = 300


def slow_graph() -> Any:
    b = GraphBuilder()
    dims = b.placeholder("dims", np.int32, [2])
    h = b.op("Fill", [dims, b.constant(0.001)], {"T": np.float32, "index_type": np.int32}, name="fill")
    for _ in range(SLOW_LAYERS):
        h = b.unary("Tanh", b.op("MatMul", [h, h], {"T": np.float32}, name="MatMul"))
    b.op("Identity", [h], {"T": np.float32}, name="out")
    return b.graph_def


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("core_models")
    (root / "add.pb").write_bytes(add_graph().SerializeToString())
    (root / "slow.pb").write_bytes(slow_graph().SerializeToString())
    return root


@pytest.fixture
def runtime(model_dir: Path) -> Any:
    config = make_config(
        {"models": [{"name": "add", "path": "add.pb"}, {"name": "slow", "path": "slow.pb", "version": 3}]},
        model_dir,
    )
    rt = InferenceService(config)
    rt.start()
    yield rt
    rt.close()


def wait_until(predicate: Any, timeout: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return bool(predicate())


def test_policy_and_deadline_stretch_configure_the_pool(model_dir: Path) -> None:
    config = make_config({"run_handler_pool": {"policy": "deadline", "deadline_stretch": 2}}, model_dir)
    pool = get_pool()
    pool.fair, pool.stretch = True, DEFAULT_STRETCH  # the library's order
    rt = InferenceService(config)
    rt.start()
    try:
        assert rt.pool is pool
        assert rt.pool.stretch == 2.0
        assert not rt.pool.fair and rt.pool_stats().policy == "deadline"
    finally:
        rt.close()
    # the pool is process-global: closing the app gives the library's sessions their order back
    assert pool.fair and pool.stretch == DEFAULT_STRETCH
    default = make_config({}, model_dir).run_handler_pool  # the server's default: strict arrival order
    assert default.policy == "deadline" and default.deadline_stretch == 0.0
    with pytest.raises(ValueError, match="deadline_stretch"):
        make_config({"run_handler_pool": {"deadline_stretch": -1}}, model_dir)
    with pytest.raises(ValueError, match="policy"):
        make_config({"run_handler_pool": {"policy": "fifo"}}, model_dir)


def test_model_lookup_by_name_and_version(runtime: InferenceService) -> None:
    assert runtime.model("slow").version == 3
    assert runtime.model("slow", 3).name == "slow"
    assert [e.name for e in runtime.list_models()] == ["add", "slow"]
    with pytest.raises(NotFoundError, match=r"Model 'nope' not found; the server has: add, slow"):
        runtime.model("nope")
    with pytest.raises(NotFoundError, match=r"Model 'slow' has no version 1; it has: 3"):
        runtime.model("slow", 1)
    assert runtime.model("add").input_spec("x").tensor == "x:0"
    assert runtime.model("add").output_spec("out").tensor == "out:0"


def test_infer_with_and_without_the_pool(runtime: InferenceService) -> None:
    async def go(use_pool: bool | None) -> Any:
        return await runtime.infer(
            InferRequest("add", {"x": np.ones((2, 3), np.float32)}, use_run_handler_pool=use_pool)
        )

    result = asyncio.run(go(None))
    assert result.model == "add" and result.version == 1
    np.testing.assert_array_equal(result.outputs["out"], np.full((2, 3), 3.0, np.float32))
    assert result.timings is not None and result.timings.used_pool is True
    assert result.run_metadata is None and result.trace is None
    assert len(result.request_id) == 32
    off = asyncio.run(go(False))
    assert off.timings is not None and off.timings.used_pool is False
    runtime.pool_enabled = False
    assert asyncio.run(go(None)).timings.used_pool is False
    assert asyncio.run(go(True)).timings.used_pool is True


def test_used_pool_reports_what_ran(runtime: InferenceService) -> None:
    """The session decides (TensorFlow's rule): a model with per-session threads never uses the pool, even
    when the server's default or the request asks for it, and the result says so."""
    cfg = config_pb2.ConfigProto(use_per_session_threads=True)
    runtime.add_model(make_entry("own_threads", 1, Session(add_graph(), cfg)))
    before = runtime.pool.stats().handlers_acquired
    req = InferRequest("own_threads", {"x": np.ones((1, 3), np.float32)}, use_run_handler_pool=True)
    result = asyncio.run(runtime.infer(req))
    assert result.timings is not None and result.timings.used_pool is False
    assert runtime.pool.stats().handlers_acquired == before


def test_infer_runs_targets(runtime: InferenceService) -> None:
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [None])
    b.identity(x, name="out")
    sleep_op(b, x, 0.0, "side_effect")
    runtime.add_model(make_entry("targets", 1, Session(b.graph_def), outputs={"out": "out:0"}))
    req = InferRequest("targets", {"x": np.ones(2, np.float32)}, targets=["side_effect"])
    result = asyncio.run(runtime.infer(req))
    assert list(result.outputs) == ["out"] and RUNS["side_effect"] == 1
    asyncio.run(runtime.infer(InferRequest("targets", {"x": np.ones(2, np.float32)})))
    assert RUNS["side_effect"] == 1  # not a target, not an output: pruned


def test_infer_fetches_keep_the_callers_names_and_order(runtime: InferenceService) -> None:
    req = InferRequest("add", {"x:0": np.zeros((1, 3), np.float32)}, fetches=["out:0", "mul", "y"])
    result = asyncio.run(runtime.infer(req))
    assert list(result.outputs) == ["out:0", "mul", "y"]
    np.testing.assert_array_equal(result.outputs["y"], [[1.0, 1.0, 1.0]])


def test_infer_trace_on_request(runtime: InferenceService) -> None:
    options = config_pb2.RunOptions(trace_level=config_pb2.RunOptions.SOFTWARE_TRACE)
    req = InferRequest("add", {"x": np.zeros((1, 3), np.float32)}, run_options=options, request_id="r1")
    result = asyncio.run(runtime.infer(req))
    assert result.request_id == "r1"
    assert result.run_metadata is not None and result.run_metadata.step_stats.dev_stats
    assert result.trace is not None
    names = [e["name"] for e in result.trace["traceEvents"] if e.get("cat") == "Server"]
    assert names == ["receive+decode", "wait for run handler", "compute"]
    assert runtime.traces.get("r1").model == "add"


def test_infer_deadline_cancels_the_step(runtime: InferenceService) -> None:
    options = config_pb2.RunOptions(timeout_in_ms=100)
    req = InferRequest("slow", {"dims": np.asarray([600, 600], np.int32)}, run_options=options)
    t0 = time.monotonic()
    with pytest.raises(DeadlineExceededError, match="deadline of 100 ms"):
        asyncio.run(runtime.infer(req))
    assert time.monotonic() - t0 < 1.0
    assert wait_until(lambda: runtime.steps_running == 0)


def test_deadline_counts_from_arrival(runtime: InferenceService) -> None:
    options = config_pb2.RunOptions(timeout_in_ms=50)
    req = InferRequest(
        "add", {"x": np.zeros((1, 3), np.float32)}, run_options=options, received_at=time.monotonic() - 1.0
    )
    with pytest.raises(DeadlineExceededError, match="passed while decoding the request"):
        asyncio.run(runtime.infer(req))


def test_cancelling_the_awaiting_task_cancels_the_step(runtime: InferenceService) -> None:
    for use_pool in (True, False):
        req = InferRequest("slow", {"dims": np.asarray([600, 600], np.int32)}, use_run_handler_pool=use_pool)

        async def go(req: InferRequest) -> None:
            task = asyncio.create_task(runtime.infer(req))
            while runtime.steps_running == 0:
                await asyncio.sleep(0.001)
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        t0 = time.monotonic()
        asyncio.run(go(req))
        assert wait_until(lambda: runtime.steps_running == 0, 0.5), "the step kept running"
        assert time.monotonic() - t0 < 1.0
    stats = runtime.pool_stats()
    assert stats is not None and stats.active_handlers == 0


def test_infer_errors(runtime: InferenceService) -> None:
    with pytest.raises(NotFoundError):
        asyncio.run(runtime.infer(InferRequest("nope", {})))
    with pytest.raises(InvalidArgumentError, match="Cannot feed value of shape"):
        asyncio.run(runtime.infer(InferRequest("add", {"x": np.zeros((1, 4), np.float32)})))
    twice = {"x": np.zeros((1, 3), np.float32), "x:0": np.zeros((1, 3), np.float32)}
    with pytest.raises(InvalidArgumentError, match="Tensor 'x:0' is fed twice"):
        asyncio.run(runtime.infer(InferRequest("add", twice)))
    # the handler of a refused request went back to the pool
    stats = runtime.pool_stats()
    assert stats is not None and stats.active_handlers == 0


def test_start_sets_the_gil_switch_interval(model_dir: Path) -> None:
    before = sys.getswitchinterval()
    config = make_config({"runtime": {"gil_switch_interval_ms": 2.0}, "models": []}, model_dir)
    try:
        InferenceService(config).start()
        assert sys.getswitchinterval() == pytest.approx(0.002)
    finally:
        sys.setswitchinterval(before)
    assert load_config(None).runtime.gil_switch_interval_ms == 5.0  # CPython's own default


def _blas_threads() -> int:
    from threadpoolctl import threadpool_info

    return max((lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"), default=0)


def test_steps_without_the_pool_share_the_cores_between_their_blas_threads(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two steps the pool does not run, at once: each kernel gets half the cores the server leaves to
    kernels, so they never put more BLAS threads than cores to work; the process's own number is back
    when they end."""
    from poolserve.runtime import threadpool

    if threadpool.KernelThreads.pinned:
        pytest.skip("an earlier test in this process set intra_op_parallelism_threads")
    threadpool.keep_core_for_loop()  # with this machine's cores, as any server in this process does
    monkeypatch.setattr(threadpool, "_core_share", 5)  # five cores: four for kernels, two each for two
    config = make_config(
        {"run_handler_pool": {"enabled": False}, "models": [{"name": "slow", "path": "slow.pb"}]}, model_dir
    )
    rt = InferenceService(config)
    rt.start()
    default = _blas_threads()
    seen: list[int] = []

    async def main() -> None:
        feeds = {"dims": np.array([256, 256], np.int32)}
        tasks = [asyncio.ensure_future(rt.infer(InferRequest("slow", dict(feeds)))) for _ in range(2)]
        await asyncio.sleep(0)  # both steps start
        while not all(t.done() for t in tasks):
            seen.append(_blas_threads())
            await asyncio.sleep(0.01)
        await asyncio.gather(*tasks)

    try:
        asyncio.run(main())
    finally:
        rt.close()
    assert threadpool.kernel_cores() == 4
    assert seen and seen[0] == 2
    assert _blas_threads() == default


def test_a_step_may_run_on_the_loop_until_the_server_refuses_a_request(runtime: InferenceService) -> None:
    # nothing else in flight, nothing refused: the loop is free (a closed loop's next request arriving
    # meanwhile does not change that)
    admission = runtime.admission
    assert runtime.loop_free()
    admission.arrivals += 1
    assert runtime.loop_free() and not runtime.alone(admission.arrivals - 1)
    runtime.in_flight = 2  # another request in flight
    try:
        assert not runtime.loop_free()
    finally:
        runtime.in_flight = 0
    admission.refuse()  # past capacity: steps leave the loop for QUIET_AFTER_REFUSAL_S
    assert not runtime.loop_free()
    admission.refused_at = time.monotonic() - QUIET_AFTER_REFUSAL_S - 0.01
    assert runtime.loop_free()
    # admission's own refusals count as well
    with pytest.raises(DeadlineExceededError):
        admission.arrive("add", time.monotonic() - 2.0, 1000)
    assert not runtime.loop_free()


def test_infer_answers_0_d_outputs_as_arrays(runtime: InferenceService) -> None:
    # Session.arun returns 0-d results as numpy scalars (bytes for a string), as TensorFlow's Session.run
    # does; a request's outputs stay arrays, which the protocols' encoders take
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [None])
    axis = b.constant(np.int32(0), name="axis")
    b.op("Sum", [x, axis], {"T": np.float32, "Tidx": np.int32, "keep_dims": False}, name="total")
    b.constant(np.array(b"hello", object), name="word")
    outputs = {"total": "total:0", "word": "word:0"}
    runtime.add_model(make_entry("scalars", 1, Session(b.graph_def), outputs=outputs))
    result = asyncio.run(runtime.infer(InferRequest("scalars", {"x": np.ones(3, np.float32)})))
    total, word = result.outputs["total"], result.outputs["word"]
    assert type(total) is np.ndarray and total.dtype == np.float32 and total.shape == () and total == 3
    assert type(word) is np.ndarray and word.dtype == object and word.shape == () and word[()] == b"hello"
    body = json.loads(native.encode_json(result))["outputs"]
    assert body["total"] == {"dtype": "float32", "shape": [], "data": [3.0]}
    assert body["word"] == {"dtype": "string", "shape": [], "data": ["hello"]}
