"""The server's core without HTTP: config loading, model specs, Runtime.infer (pool on/off, deadlines,
cancellation), the trace store, the error mapping and the CLI's argument handling."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import RUNS, sleep_op

from poolserve.proto import config_pb2, types_pb2
from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.errors import Code, DeadlineExceededError, InvalidArgumentError, NotFoundError
from poolserve.runtime.run_handler import DEFAULT_STRETCH
from poolserve.runtime.session import Session
from poolserve.runtime.signature import default_inputs, default_outputs
from poolserve.server import cli, errors
from poolserve.server.config import ConfigError, load_config, make_config
from poolserve.server.models import make_entry
from poolserve.server.service import InferenceService, InferRequest
from poolserve.server.traces import Span, TraceRecord, TraceStore

SLOW_LAYERS = 300


def add_graph() -> Any:
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [None, 3])
    y = b.add(b.mul(x, b.constant(2.0)), b.constant(1.0), name="y")
    b.identity(y, name="out")
    return b.graph_def


def slow_graph() -> Any:
    b = GraphBuilder()
    dims = b.placeholder("dims", np.int32, [2])
    h = b.op("Fill", [dims, b.constant(0.001)], {"T": np.float32, "index_type": np.int32}, name="fill")
    for _ in range(SLOW_LAYERS):
        h = b.unary("Tanh", b.op("MatMul", [h, h], {"T": np.float32}, name="MatMul"))
    b.op("Identity", [h], {"T": np.float32}, name="out")
    return b.graph_def


def multi_graph() -> Any:
    """Two terminal nodes, one with two outputs; a NoOp and an unused Const are not outputs."""
    b = GraphBuilder()
    v = b.placeholder("v", np.int32, [None])
    b.op("Unique", [v], {"T": np.int32, "out_idx": np.int32}, name="uniq", num_outputs=2)
    b.op("Shape", [v], {"T": np.int32, "out_type": np.int64}, name="shape")
    b.constant(1.0, name="unused")
    b.no_op("init")
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


# --- config ---------------------------------------------------------------------------------------------


def test_load_config_file_relative_paths_and_defaults(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    path = tmp_path / "sub" / "server.toml"
    path.write_text(
        """
[server]
port = 9001
admin_token = "t"

[run_handler_pool]
enabled = false
max_concurrent_handlers = 8

[[models]]
name = "m"
path = "models/m.pb"
inputs = { in = "x:0" }
session_config = "inter_op_parallelism_threads: 2"
"""
    )
    config = load_config(path)
    assert config.server.port == 9001 and config.server.admin_token == "t"
    assert config.server.host == "127.0.0.1" and config.server.default_timeout_ms == 30000
    assert config.server.max_request_bytes == 64 << 20
    assert config.run_handler_pool.enabled is False and config.run_handler_pool.max_concurrent_handlers == 8
    assert config.traces.capacity == 1000 and config.traces.sample_rate == 0.0
    assert config.models[0].path == (tmp_path / "sub" / "models" / "m.pb").resolve()
    assert config.models[0].inputs == {"in": "x:0"}
    assert config.models[0].config_proto().inter_op_parallelism_threads == 2


def test_deadline_stretch_configures_the_pool(model_dir: Path) -> None:
    config = make_config({"run_handler_pool": {"deadline_stretch": 0}}, model_dir)
    rt = InferenceService(config)
    rt.start()
    try:
        assert rt.pool.stretch == 0.0  # strict arrival order
    finally:
        rt.pool.stretch = DEFAULT_STRETCH  # the pool is process-global
        rt.close()
    with pytest.raises(ValueError, match="deadline_stretch"):
        make_config({"run_handler_pool": {"deadline_stretch": -1}}, model_dir)


def test_environment_overrides_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[server]\nport = 9001\ndefault_timeout_ms = 10\n")
    monkeypatch.setenv("POOLSERVE_SERVER__PORT", "9000")
    monkeypatch.setenv("POOLSERVE_TRACES__SAMPLE_RATE", "0.5")
    config = load_config(path)
    assert config.server.port == 9000
    assert config.server.default_timeout_ms == 10
    assert config.traces.sample_rate == 0.5


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[server]\nport = 'high'\n", "server.port"),
        ("[server]\nprot = 1\n", "server.prot"),
        ("[bogus]\nx = 1\n", "bogus"),
        ("[traces]\nsample_rate = 2.0\n", "traces.sample_rate"),
        ("[[models]]\nname = 'a'\n", "models.0.path"),
        ("[[models]]\nname = 'a/b'\npath = 'x.pb'\n", "may not contain"),
        ("[[models]]\nname = 'a'\npath = 'x.pb'\nsession_config = 'nonsense {'\n", "models.0.session_config"),
        (
            "[[models]]\nname = 'a'\npath = 'x.pb'\n[[models]]\nname = 'a'\npath = 'y.pb'\n",
            "configured twice",
        ),
        ("[server\n", "not valid TOML"),
    ],
)
def test_bad_config_names_the_field(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match="c.toml") as info:
        load_config(path)
    assert fragment in str(info.value)


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "nope.toml")


def test_embedded_default_config_loads() -> None:
    config = load_config(None)
    assert {m.name for m in config.models} >= {"mlp"}
    assert all(m.path.is_absolute() and m.path.exists() for m in config.models)


# --- model specs ----------------------------------------------------------------------------------------


def test_default_inputs_and_outputs() -> None:
    session = Session(multi_graph())
    entry = make_entry("multi", 1, session)
    assert [(s.name, s.tensor, s.dtype, s.shape) for s in entry.inputs] == [
        ("v", "v:0", types_pb2.DT_INT32, (-1,))
    ]
    outputs = {s.name: s for s in entry.outputs}
    assert list(outputs) == ["uniq", "uniq:1", "shape"]
    assert outputs["uniq:1"].tensor == "uniq:1"
    assert outputs["shape"].dtype == types_pb2.DT_INT64
    assert tuple(default_inputs(session.graph)) == entry.inputs
    assert tuple(default_outputs(session.graph)) == entry.outputs
    session.close()


def test_aliases_and_resolution_errors() -> None:
    session = Session(add_graph())
    entry = make_entry("add", 1, session, inputs={"in": "x"}, outputs={"double": "y:0", "final": "out"})
    assert [s.name for s in entry.inputs] == ["in"]
    assert entry.input_spec("in").tensor == "x:0"
    assert entry.input_spec("x:0").tensor == "x:0"  # graph tensor names work too
    assert entry.input_spec("x").name == "in"
    assert entry.output_spec("double").tensor == "y:0"
    assert entry.output_spec("mul").tensor == "mul:0"
    with pytest.raises(InvalidArgumentError, match=r"Model 'add' has no input 'nope'; its inputs are: in"):
        entry.input_spec("nope")
    with pytest.raises(InvalidArgumentError, match=r"no output 'ghost:7'; its outputs are: double, final"):
        entry.output_spec("ghost:7")
    with pytest.raises(InvalidArgumentError, match=r"model 'add': input 'bad': .*no node 'zzz'"):
        make_entry("add", 1, session, inputs={"bad": "zzz:0"})
    session.close()


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


def test_bad_model_file_names_the_model(tmp_path: Path) -> None:
    (tmp_path / "bad.pb").write_bytes(b"\x00garbage")
    rt = InferenceService(make_config({"models": [{"name": "broken", "path": "bad.pb"}]}, tmp_path))
    with pytest.raises(InvalidArgumentError, match="model 'broken'"):
        rt.start()


# --- InferenceService.infer --------------------------------------------------------------------------------------


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


# --- traces ---------------------------------------------------------------------------------------------


def record(rid: str, spans: int = 1) -> TraceRecord:
    t = time.monotonic()
    return TraceRecord(
        rid, "m", 200, [Span("compute", t, t + 0.001 * (i + 1)) for i in range(spans)], None, t
    )


def test_trace_store_bounds_count_and_bytes() -> None:
    store = TraceStore(capacity=3, capacity_bytes=10_000)
    for i in range(5):
        store.add(record(f"r{i}"))
    assert [r.request_id for r in store.recent()] == ["r4", "r3", "r2"]
    with pytest.raises(NotFoundError, match="r0"):
        store.get("r0")
    small = TraceStore(capacity=100, capacity_bytes=record("x").size_bytes() * 2)
    for i in range(4):
        small.add(record(f"r{i}"))
    assert len(small) == 2 and small.bytes <= small.capacity_bytes
    small.add(record("huge", spans=1000))  # larger than the whole store: not kept
    assert len(small) == 2
    assert len(TraceStore(0, 1000)) == 0


def test_trace_finish_and_merge() -> None:
    store = TraceStore(10, 1 << 20)
    a, b = record("a"), record("b")
    store.add(a)
    store.add(b)
    store.finish("a", 504, a.spans[-1].end + 0.002)  # the encode span runs from the last span's end
    store.finish("ghost", 200, 0.0)  # unknown ids are ignored
    assert store.get("a").status == 504
    assert [s.name for s in store.get("a").spans] == ["compute", "encode"]
    store.finish("a", 200, a.spans[-1].end + 1.0)  # a later request with the same id: left as it was
    assert store.get("a").status == 504 and len(store.get("a").spans) == 2
    assert store.get("a").summary()["latency_ms"] == pytest.approx(3.0, abs=0.5)
    merged = store.merge(["a", "b"])
    server = [e for e in merged["traceEvents"] if e.get("cat") == "Server"]
    assert len(server) == 3 and len({e["pid"] for e in server}) == 2
    with pytest.raises(NotFoundError, match="'c'"):
        store.merge(["a", "c"])


# --- errors ---------------------------------------------------------------------------------------------


def test_error_status_mapping() -> None:
    expected = {
        Code.CANCELLED: 499,
        Code.INVALID_ARGUMENT: 400,
        Code.FAILED_PRECONDITION: 400,
        Code.OUT_OF_RANGE: 400,
        Code.DEADLINE_EXCEEDED: 504,
        Code.NOT_FOUND: 404,
        Code.ALREADY_EXISTS: 409,
        Code.ABORTED: 409,
        Code.PERMISSION_DENIED: 403,
        Code.RESOURCE_EXHAUSTED: 429,
        Code.UNIMPLEMENTED: 501,
        Code.UNAVAILABLE: 503,
        Code.UNAUTHENTICATED: 401,
        Code.INTERNAL: 500,
        Code.UNKNOWN: 500,
        Code.DATA_LOSS: 500,
    }
    assert {code: errors.http_status(code) for code in expected} == expected
    assert errors.http_status(999) == 500
    response = errors.error_response(DeadlineExceededError("too late"))
    assert response.status_code == 504
    assert response.body == b'{"error":"too late","code":"DEADLINE_EXCEEDED"}'


# --- cli ------------------------------------------------------------------------------------------------


def test_cli_without_subcommand_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 0
    out = capsys.readouterr().out
    assert "usage: poolserve" in out and "serve" in out


def test_cli_bad_config_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[server]\nport = -1\n")
    assert cli.main(["serve", "--config", str(bad)]) == 2
    assert "server.port" in capsys.readouterr().err


def test_cli_loadtest_hook(capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    if importlib.util.find_spec("poolserve.loadtest.cli") is None:
        assert cli.main(["loadtest", "--help"]) == 2
        assert "loadtest command is not available" in capsys.readouterr().err
        return
    with pytest.raises(SystemExit) as info:  # argparse's --help of loadtest.cli, reached through poolserve
        cli.main(["loadtest", "--help"])
    assert info.value.code == 0
    assert "usage:" in capsys.readouterr().out


def test_start_sets_the_gil_switch_interval(model_dir: Path) -> None:
    before = sys.getswitchinterval()
    config = make_config({"runtime": {"gil_switch_interval_ms": 2.0}, "models": []}, model_dir)
    try:
        InferenceService(config).start()
        assert sys.getswitchinterval() == pytest.approx(0.002)
    finally:
        sys.setswitchinterval(before)
    assert load_config(None).runtime.gil_switch_interval_ms == 5.0  # CPython's own default
