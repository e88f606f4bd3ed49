"""poolserve loadtest: the pure parts (percentiles, schedule, payloads, request bodies, the loops with a fake
server) and the command against a real `poolserve serve` process on 127.0.0.1."""

from __future__ import annotations

import asyncio
import io
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rich.console import Console
from support import ServerProcess, free_port

from poolserve.loadtest import cli, overload, report
from poolserve.loadtest.generator import (
    HEADER_LENGTH,
    HttpSender,
    InputSpec,
    Load,
    LoadtestError,
    ModelInfo,
    Picker,
    Recorder,
    Sample,
    Target,
    build_payload,
    concrete_shape,
    encode_request,
    poisson_arrivals,
    random_input,
    run_closed,
    run_open,
)
from poolserve.loadtest.grpc_sender import encode_grpc_request
from poolserve.loadtest.raw_http import RawHttpSender
from poolserve.proto import grpc_service_pb2, serving_pb2, types_pb2
from poolserve.server import kserve, kserve_grpc

ROOT = Path(__file__).resolve().parent.parent
MLP = ModelInfo("mlp", (InputSpec("input", "FP32", (-1, 64)),))


# --- summaries ------------------------------------------------------------------------------------------


def test_latency_percentiles():
    lat = [i / 1000 for i in range(1, 1001)]  # 1..1000 ms
    random.Random(1).shuffle(lat)
    ms = report.latency_ms(lat)
    assert ms["p50"] == pytest.approx(500.5)
    assert ms["p90"] == pytest.approx(900.1)
    assert ms["p99"] == pytest.approx(990.01)
    assert ms["p999"] == pytest.approx(999.001)
    assert ms["max"] == pytest.approx(1000.0)
    assert ms["min"] == pytest.approx(1.0)
    assert report.latency_ms([]) == dict.fromkeys(("p50", "p90", "p99", "p999", "max", "min", "mean"))


def test_summarize_counts_errors_by_status():
    samples = [Sample(i * 0.01, 0.002 * (i + 1), 200, "pool", "mlp") for i in range(7)]
    samples += [Sample(0.1, 0.05, 504, "pool", "mlp"), Sample(0.1, 0.05, 504, "pool", "cnn")]
    samples += [Sample(0.2, 5.0, "client_timeout", "pool", "cnn"), Sample(0.3, 0.001, 400, "pool", "cnn")]
    run = report.summarize(samples, "pool", 2.0)
    assert run["requests"] == 11
    assert run["successes"] == 7
    assert run["errors"] == 4 == sum(run["errors_by_status"].values())
    assert run["errors_by_status"] == {"400": 1, "504": 2, "client_timeout": 1}
    assert run["timeouts"] == 2
    assert run["throughput_rps"] == pytest.approx(3.5)
    assert run["latency_ms"]["max"] == pytest.approx(14.0)  # successes only
    assert run["by_model"]["cnn"]["requests"] == 3
    assert run["by_model"]["mlp"]["successes"] == 7


def test_ratios_and_table():
    def run(mode, rps, p50):
        lat = dict.fromkeys(("p50", "p90", "p99", "p999", "max"), p50)
        return {
            "mode": mode,
            "requests": 10,
            "errors": 1,
            "errors_by_status": {"504": 1},
            "timeouts": 1,
            "throughput_rps": rps,
            "latency_ms": lat,
            "duration_s": 1.0,
        }

    pool, no_pool = run("pool", 300.0, 2.0), run("no_pool", 200.0, 4.0)
    r = report.ratios(pool, no_pool)
    assert r["throughput_rps"] == pytest.approx(1.5)
    assert r["latency_p50"] == pytest.approx(0.5)
    text = report.markdown_table([pool, no_pool])
    assert "| metric | pool | no_pool | pool / no_pool |" in text
    assert "| throughput (req/s) | 300.0 | 200.0 | 1.50x |" in text
    assert "| errors | 1 (504: 1) | 1 (504: 1) | - |" in text


def test_per_model_ratios_and_table():
    # a mix whose totals gain can hide a cheap model whose tail loses: each model gets its own ratios
    def samples(mode, mlp_s, cnn_s):
        out = [Sample(i * 0.01, mlp_s, 200, mode, "mlp") for i in range(10)]
        return out + [Sample(i * 0.01, cnn_s, 200, mode, "cnn") for i in range(5)]

    pool = report.summarize(samples("pool", 0.006, 0.006), "pool", 1.0)
    no_pool = report.summarize(samples("no_pool", 0.003, 0.018), "no_pool", 2.0)
    by_model = report.model_ratios([pool, no_pool])
    assert set(by_model) == {"mlp", "cnn"}
    assert by_model["mlp"]["latency_p99"] == pytest.approx(2.0)
    assert by_model["cnn"]["latency_p99"] == pytest.approx(1 / 3)
    assert by_model["cnn"]["throughput_rps"] == pytest.approx(2.0)
    table = report.models_table([pool, no_pool])
    assert table is not None
    columns = [list(c.cells) for c in table.columns]
    assert columns[0] == ["cnn", "mlp"]
    assert [col[1] for col in columns][-2:] == ["2.00x", "2.00x"]  # mlp: throughput kept up, p99 doubled
    # one model, or one mode: nothing per model to compare
    one = report.summarize([Sample(0.0, 0.001, 200, "pool", "mlp")], "pool", 1.0)
    assert report.models_table([one]) is None
    assert report.model_ratios([pool]) == {}


def test_generator_warnings():
    assert report.generator_warnings(0.5, 1.0, None, 0, 0.0, 0.0) == []
    (cpu,) = report.generator_warnings(0.97, 1.0, None, 0, 0.0, 0.0)
    assert "97% of a CPU core" in cpu
    # 100 sends scheduled over 1 s went out over 2 s: half the requested rate
    (rate,) = report.generator_warnings(0.2, 2.0, 100.0, 100, 2.0, 1.0)
    assert "50.0 req/s of the requested 100 req/s" in rate
    assert report.generator_warnings(0.2, 1.0, 100.0, 100, 1.02, 1.0) == []


# --- schedule and payloads ------------------------------------------------------------------------------


def test_poisson_arrivals():
    times = list(poisson_arrivals(200.0, random.Random(3), count=4000))
    assert times == list(poisson_arrivals(200.0, random.Random(3), count=4000))
    gaps = np.diff([0.0, *times])
    assert (gaps > 0).all()
    assert gaps.mean() == pytest.approx(1 / 200, rel=0.06)
    assert gaps.std() == pytest.approx(1 / 200, rel=0.1)  # exponential: std == mean
    bounded = list(poisson_arrivals(200.0, random.Random(3), duration=2.0))
    assert bounded == [t for t in times if t < 2.0]


def test_concrete_shape():
    assert concrete_shape((-1, 64), 4) == (4, 64)
    assert concrete_shape((-1, -1, 3), 4) == (4, 1, 3)
    assert concrete_shape((2, -1), 4) == (2, 1)
    assert concrete_shape((), 4) == ()


@pytest.mark.parametrize(
    ("datatype", "dtype"),
    [
        ("FP32", np.float32),
        ("FP16", np.float16),
        ("INT64", np.int64),
        ("UINT8", np.uint8),
        ("BOOL", np.bool_),
    ],
)
def test_random_input_dtypes(datatype, dtype):
    spec = InputSpec("x", datatype, (-1, 3))
    a = random_input(spec, 5, np.random.default_rng(0))
    assert a.shape == (5, 3)
    assert a.dtype == dtype
    np.testing.assert_array_equal(a, random_input(spec, 5, np.random.default_rng(0)))


def test_random_strings_and_unknown_datatype():
    a = random_input(InputSpec("s", "BYTES", (2,)), 1, np.random.default_rng(0))
    assert a.dtype == object and all(isinstance(v, bytes) and len(v) == 8 for v in a)
    with pytest.raises(LoadtestError, match="input 'x' has datatype INVALID.*--payload"):
        random_input(InputSpec("x", "INVALID", (2,)), 1, np.random.default_rng(0))


def test_build_payload_mixes_given_and_random():
    model = ModelInfo("m", (InputSpec("a", "FP32", (-1, 2)), InputSpec("b", "INT32", (-1,))))
    payload = build_payload(model, 3, np.random.default_rng(0), {"b": [7, 8]})
    assert payload["a"].shape == (3, 2)
    assert payload["b"].dtype == np.int32
    np.testing.assert_array_equal(payload["b"], [7, 8])
    with pytest.raises(LoadtestError, match="input 'a' is not FP32 data"):
        build_payload(model, 1, np.random.default_rng(0), {"a": [["x", "y"]]})


# --- request bodies -------------------------------------------------------------------------------------


def test_native_json_body():
    payload = {"input": np.arange(128, dtype=np.float32).reshape(2, 64)}
    t = encode_request("native", MLP, payload, "no_pool", timeout_ms=250)
    assert t.path == "/v1/models/mlp:run"
    body = json.loads(t.content)
    assert body["feeds"]["input"] == payload["input"].tolist()
    assert body["run_options"] == {"timeout_in_ms": 250, "experimental": {"use_run_handler_pool": False}}
    default = json.loads(encode_request("native", MLP, payload, "default").content)
    assert "run_options" not in default


def test_native_protobuf_body():
    payload = {"input": np.arange(128, dtype=np.float32).reshape(2, 64)}
    t = encode_request("native", MLP, payload, "pool", timeout_ms=250, binary=True)
    assert t.headers["Content-Type"] == "application/x-protobuf"
    msg = serving_pb2.RunRequest.FromString(t.content)
    feed = msg.feeds["input"]
    assert feed.dtype == types_pb2.DT_FLOAT
    assert [d.size for d in feed.tensor_shape.dim] == [2, 64]
    np.testing.assert_array_equal(np.frombuffer(feed.tensor_content, "<f4").reshape(2, 64), payload["input"])
    assert msg.run_options.timeout_in_ms == 250
    assert msg.HasField("use_run_handler_pool") and msg.use_run_handler_pool
    off = serving_pb2.RunRequest.FromString(
        encode_request("native", MLP, payload, "no_pool", binary=True).content
    )
    assert off.HasField("use_run_handler_pool") and not off.use_run_handler_pool
    default = encode_request("native", MLP, payload, "default", binary=True).content
    assert not serving_pb2.RunRequest.FromString(default).HasField("use_run_handler_pool")


@pytest.mark.parametrize("binary", [False, True])
def test_kserve_body_decodes_on_the_server(binary):
    model = ModelInfo(
        "m", (InputSpec("x", "FP32", (-1, 3)), InputSpec("i", "INT64", (-1,)), InputSpec("s", "BYTES", (-1,)))
    )
    payload = build_payload(model, 2, np.random.default_rng(0))
    t = encode_request("kserve", model, payload, "pool", timeout_ms=20, binary=binary)
    assert t.path == "/v2/models/m/infer"
    decoded = kserve.decode_request(t.content, t.headers.get(HEADER_LENGTH))
    for name, value in payload.items():
        np.testing.assert_array_equal(decoded.inputs[name], value)
    assert decoded.parameters["use_run_handler_pool"] is True
    assert decoded.parameters["timeout"] == 20_000  # microseconds
    assert decoded.binary_output is binary


@pytest.mark.parametrize("binary", [False, True])
def test_kserve_grpc_request_decodes_on_the_server(binary):
    model = ModelInfo(
        "m", (InputSpec("x", "FP32", (-1, 3)), InputSpec("i", "INT64", (-1,)), InputSpec("s", "BYTES", (-1,)))
    )
    payload = build_payload(model, 2, np.random.default_rng(0))
    t = encode_grpc_request(model, payload, "no_pool", timeout_ms=20, binary=binary)
    message = grpc_service_pb2.ModelInferRequest.FromString(t.content)
    assert t.path == "/inference.GRPCInferenceService/ModelInfer" and message.model_name == "m"
    assert bool(message.raw_input_contents) is binary
    decoded = kserve_grpc.decode_infer(message)
    for name, value in payload.items():
        np.testing.assert_array_equal(decoded.inputs[name], value)
    assert decoded.parameters == {"use_run_handler_pool": False, "timeout": 20_000}


def test_tfserving_body():
    payload = {"input": np.ones((1, 64), np.float32)}
    t = encode_request("tfserving", MLP, payload, "default", timeout_ms=20)
    assert t.path == "/v1/models/mlp:predict"
    assert json.loads(t.content) == {"inputs": {"input": payload["input"].tolist()}}


def test_picker_follows_weights():
    targets = [Target(m, "default", "/", b"", {}) for m in ("a", "b")]
    pick = Picker(targets, [3.0, 1.0], random.Random(0))
    names = [pick().model for _ in range(4000)]
    assert names.count("a") / len(names) == pytest.approx(0.75, abs=0.03)


def test_http_sender_spreads_connections_over_small_clients():
    async def main():
        async with HttpSender("http://127.0.0.1:1", 40, 1.0) as sender:
            sizes = sender.sizes
            first = [sender.slots.get_nowait() for _ in range(3)]
            return sizes, sender.slots.qsize(), first, sender.clients

    sizes, free, first, clients = asyncio.run(main())
    assert sizes == [16, 16, 8]
    assert free == 40 - 3
    assert first == clients  # interleaved: consecutive requests go to different clients
    assert all(c.is_closed for c in clients)


# --- the loops, against a fake server -------------------------------------------------------------------


class SerialServer:
    """A fake sender: a server that handles one request at a time, ``service`` seconds each."""

    def __init__(self, service: float) -> None:
        self.service = service
        self.lock = asyncio.Lock()
        self.in_flight = 0
        self.peak = 0
        self.arrivals: list[float] = []

    async def __call__(self, target: Target) -> int:
        self.arrivals.append(time.perf_counter())
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            async with self.lock:
                await asyncio.sleep(self.service)
        finally:
            self.in_flight -= 1
        return 200


TARGET = Target("m", "default", "/", b"", {})


def test_open_loop_latency_includes_queueing():
    # 40 requests at 400 req/s to a server that does 50 req/s: the backlog grows through the run
    server = SerialServer(0.02)
    recorder = Recorder()
    schedule = list(poisson_arrivals(400.0, random.Random(5), count=40))

    async def main():
        recorder.origin = time.perf_counter()
        return await run_open(server, lambda: TARGET, recorder, 400.0, Load(requests=40), random.Random(5))

    wall = asyncio.run(main())
    assert len(recorder.samples) == 40
    # the sender never waited for answers: the requests arrived on schedule, piling up at the server
    assert server.peak > 20
    start = recorder.origin
    lags = [a - start - s for a, s in zip(server.arrivals, schedule, strict=True)]
    assert max(lags) < 0.05
    assert sorted(recorder.send_lags) == pytest.approx(sorted(lags), abs=0.01)
    lat = [s.latency for s in sorted(recorder.samples, key=lambda s: s.start)]
    # latency counts from the scheduled time: the last request waited for the 39 before it (~0.8 s)
    assert lat[-1] >= 40 * 0.02 - schedule[-1] - 0.01
    assert np.mean(lat[-5:]) > 5 * np.mean(lat[:5])
    assert wall >= 40 * 0.02


def test_open_loop_counts_a_slow_generator_from_the_schedule():
    # each send blocks the event loop for 10 ms (a CPU-bound generator): at 400 req/s the sends fall
    # behind schedule, and that delay belongs in the latency (and earns the generator a warning)
    async def blocking_send(target):
        time.sleep(0.01)
        return 200

    recorder = Recorder()
    asyncio.run(run_open(blocking_send, lambda: TARGET, recorder, 400.0, Load(requests=20), random.Random(2)))
    samples = sorted(recorder.samples, key=lambda s: s.start)
    lags = sorted(recorder.send_lags)
    assert lags[-1] > 0.1
    for sample, lag in zip(samples, recorder.send_lags, strict=True):
        assert sample.latency >= lag + 0.01
    assert samples[-1].latency > 0.1  # a clock started at the actual send would say ~10 ms
    (warning,) = report.generator_warnings(
        0.1, 1.0, 400.0, len(recorder.send_lags), recorder.send_span, recorder.schedule_span
    )
    assert "could not keep up with the schedule" in warning


def test_closed_loop_keeps_n_in_flight_and_stops_at_count():
    server = SerialServer(0.002)
    recorder = Recorder()
    asyncio.run(run_closed(server, lambda: TARGET, recorder, 5, Load(concurrency=5, requests=23)))
    assert len(recorder.samples) == 23
    assert server.peak == 5
    assert recorder.in_flight == 0


def test_closed_loop_stops_at_duration():
    server = SerialServer(0.001)
    recorder = Recorder()
    wall = asyncio.run(run_closed(server, lambda: TARGET, recorder, 2, Load(concurrency=2, duration=0.2)))
    assert 0.2 <= wall < 0.5
    assert 50 < len(recorder.samples) < 500


# --- the command against a real server ------------------------------------------------------------------


@pytest.fixture(scope="module")
def server_process(tmp_path_factory):
    log = tmp_path_factory.mktemp("loadtest") / "server.log"
    proc = ServerProcess(ROOT / "configs" / "default.toml", log, "--log-level", "warning")
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def server(server_process):
    return server_process.url


def check_run(run):
    assert run["requests"] == run["successes"] + run["errors"]
    assert run["errors"] == sum(run["errors_by_status"].values())
    lat = run["latency_ms"]
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["p999"] <= lat["max"]


def test_closed_loop_report(server, tmp_path, capsys):
    out = tmp_path / "r.json"
    argv = ["--url", server, "--model", "mlp", "--model", "branches:0.5", "--concurrency", "3"]
    assert cli.main([*argv, "--requests", "40", "--batch", "2", "--pool", "off", "--report", str(out)]) == 0
    body = json.loads(out.read_text())
    (run,) = body["runs"]
    assert run["mode"] == "no_pool"
    assert run["requests"] == 40 and run["errors"] == 0
    check_run(run)
    assert sum(m["requests"] for m in run["by_model"].values()) == 40
    assert set(run) >= {"errors_by_status", "timeouts", "throughput_rps", "duration_s"}
    assert run["throughput_rps"] == pytest.approx(40 / run["duration_s"])
    config = body["config"]
    assert config["models"] == [{"name": "mlp", "weight": 1.0}, {"name": "branches", "weight": 0.5}]
    assert config["concurrency"] == 3 and config["loop"] == "closed" and config["batch"] == 2
    assert body["generator"]["cpu_fraction"] > 0
    table = capsys.readouterr().out
    assert "latency p99.9 (ms)" in table and "no_pool" in table


def test_open_loop_kserve_binary(server, tmp_path):
    out = tmp_path / "r.json"
    argv = ["--url", server, "--model", "mlp", "--rate", "150", "--requests", "30", "--protocol", "kserve"]
    assert cli.main([*argv, "--binary", "--pool", "on", "--seed", "4", "--report", str(out)]) == 0
    body = json.loads(out.read_text())
    (run,) = body["runs"]
    assert run["mode"] == "pool" and run["requests"] == 30 and run["errors"] == 0
    check_run(run)
    assert body["config"]["loop"] == "open" and body["config"]["rate"] == 150.0
    lag = body["generator"]["send_lag_ms"]
    assert lag is not None, "an open loop records how late each request was sent"
    # none was sent early (asyncio may wake a timer up to a clock tick before it is due)
    assert -5.0 < lag["min"] <= lag["p50"] <= lag["max"]


def test_compare_pool_report_and_plot(server, tmp_path, capsys):
    out, png = tmp_path / "r.json", tmp_path / "p.png"
    argv = ["--url", server, "--model", "mlp", "--compare-pool", "--rounds", "4", "--concurrency", "2"]
    assert cli.main([*argv, "--requests", "40", "--binary", "--report", str(out), "--plot", str(png)]) == 0
    body = json.loads(out.read_text())
    assert [r["mode"] for r in body["runs"]] == ["pool", "no_pool"]
    for run in body["runs"]:
        assert run["requests"] == 20
        check_run(run)
    ratio = body["comparison"]["pool_over_no_pool"]
    pool, no_pool = body["runs"]
    assert ratio["throughput_rps"] == pytest.approx(pool["throughput_rps"] / no_pool["throughput_rps"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "pool / no_pool" in capsys.readouterr().out


def test_compare_pool_offers_both_modes_the_same_open_loop(server, tmp_path, capsys):
    # paired rounds replay one draw of arrivals and model picks: each model gets the same requests in each
    # mode (before, each mode drew its own, and a model's "throughput ratio" measured the draw)
    out = tmp_path / "r.json"
    argv = ["--url", server, "--model", "mlp", "--model", "cnn:3", "--compare-pool", "--rounds", "4"]
    assert cli.main([*argv, "--rate", "200", "--requests", "48", "--seed", "5", "--report", str(out)]) == 0
    pool, no_pool = json.loads(out.read_text())["runs"]
    assert pool["errors"] == no_pool["errors"] == 0
    counts = [{m: v["requests"] for m, v in run["by_model"].items()} for run in (pool, no_pool)]
    assert counts[0] == counts[1] and set(counts[0]) == {"mlp", "cnn"}
    assert sum(counts[0].values()) == 24
    by_model = json.loads(out.read_text())["comparison"]["by_model"]
    for m in ("mlp", "cnn"):
        want = pool["by_model"][m]["latency_ms"]["p99"] / no_pool["by_model"][m]["latency_ms"]["p99"]
        assert by_model[m]["latency_p99"] == pytest.approx(want)
    printed = capsys.readouterr().out
    assert f"{by_model['cnn']['latency_p99']:.2f}x" in printed.split("cnn")[-1]


def test_kserve_grpc_closed_loop_and_timeouts(server_process, tmp_path, capsys):
    out = tmp_path / "r.json"
    argv = ["--url", server_process.url, "--grpc-address", server_process.grpc_address, "--model", "mlp"]
    argv += ["--protocol", "kserve-grpc", "--concurrency", "3", "--requests", "30"]
    assert cli.main([*argv, "--binary", "--report", str(out)]) == 0
    (run,) = json.loads(out.read_text())["runs"]
    assert run["requests"] == 30 and run["errors"] == 0
    check_run(run)
    # raw tensors decode in microseconds: a batch of 16 could compute within 1 ms on a quiet machine, 256 cannot.
    # One client, as in test_timeouts_are_counted: once the server knows cnn's cost (earlier tests on this
    # server ran it), a request that found another in flight could be shed (UNAVAILABLE), not timed out
    argv = [*argv[:4], "--model", "cnn", "--protocol", "kserve-grpc", "--batch", "256", "--timeout-ms", "1"]
    assert cli.main([*argv, "--requests", "6", "--concurrency", "1", "--report", str(out)]) == 1
    body = json.loads(out.read_text())
    (run,) = body["runs"]
    assert run["requests"] == 6 == run["errors"] == run["timeouts"]
    assert "deadline of 1 ms" in body["first_errors"]["504"]
    capsys.readouterr()


def test_kserve_grpc_without_a_server_at_the_address_is_one_clear_error(server_process, capsys):
    """The address given is the one used (the URL's port is the HTTP one); nothing answering there stops
    the run before the load, naming the address, instead of every request failing."""
    address = f"127.0.0.1:{free_port()}"
    argv = ["--url", server_process.url, "--model", "mlp", "--protocol", "kserve-grpc", "--requests", "5"]
    started = time.monotonic()
    assert cli.main([*argv, "--grpc-address", address]) == 1
    assert time.monotonic() - started < 15
    out, err = capsys.readouterr()
    assert f"no KServe gRPC server answers at {address}" in err and "--grpc-address HOST:PORT" in err
    assert "requests" not in out  # no table: no load was sent


def test_timeouts_are_counted(server, tmp_path, capsys):
    # 1 ms cannot cover decoding a JSON batch of 256 images and computing it: the server answers 504 (16
    # warm images can now take under 1 ms on a quiet machine: the JSON is read straight into numpy). One
    # client: a request that found another in flight could be shed (503) once the server knows cnn's cost
    out = tmp_path / "r.json"
    argv = ["--url", server, "--model", "cnn", "--batch", "256", "--timeout-ms", "1", "--concurrency", "1"]
    assert cli.main([*argv, "--requests", "6", "--report", str(out)]) == 1  # no request succeeded
    body = json.loads(out.read_text())
    (run,) = body["runs"]
    assert run["requests"] == 6 == run["errors"] == run["timeouts"] == run["errors_by_status"]["504"]
    assert run["latency_ms"]["p50"] is None
    assert "deadline of 1 ms" in body["first_errors"]["504"]
    err = capsys.readouterr().err
    assert "first 504 error: The deadline of 1 ms" in err
    assert "no request succeeded" in err


def test_overload_steps_report_goodput_shedding_and_rss(server, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(overload, "SETTLE_S", 0.1)
    # the overload steps go through the lean sender, as the other load loops do (httpx put the generator
    # seconds behind its schedule at 2x-5x of the capacity, on the server's cores)
    sent: list[str] = []
    raw_call = RawHttpSender.__call__

    async def counted(self: RawHttpSender, target: Any) -> int | str:
        sent.append(target.path)
        return await raw_call(self, target)

    monkeypatch.setattr(RawHttpSender, "__call__", counted)
    # and each step starts with the generator's connections open (not opened by its first requests)
    opened: list[int] = []
    raw_open = RawHttpSender.open_connections

    async def opening(self: RawHttpSender) -> int:
        n = await raw_open(self)
        opened.append(len(self.open))  # connections open as the step starts
        return n

    monkeypatch.setattr(RawHttpSender, "open_connections", opening)
    out = tmp_path / "o.json"
    argv = [
        "--url",
        server,
        "--model",
        "mlp",
        "--overload",
        "--capacity-duration",
        "0.5",
        "--duration",
        "0.5",
    ]
    assert cli.main([*argv, "--multiples", "1", "2", "--report", str(out)]) == 0
    body = json.loads(out.read_text())["overload"]
    assert body["capacity_rps"] > 0 and body["rss_idle_mib"] > 10
    steps = body["steps"]
    assert [s["multiple"] for s in steps] == [1.0, 2.0]
    for s in steps:
        assert s["offered_rps"] == pytest.approx(s["multiple"] * body["capacity_rps"])
        assert s["requests"] == s["accepted"] + s["shed"] + s["timeouts_504"] + s["other_errors"] + s[
            "connection_errors"]  # fmt: skip
        assert s["deadline_ms"] == 1000 and s["rss_peak_mib"] >= body["rss_idle_mib"]
        assert 0 <= s["shed_fraction"] <= 1 and s["goodput_rps"] <= s["accepted"] / 0.5
        assert s["server"]["loop_lag"]["count"] > 0  # the server samples its event loop's lag
    table = capsys.readouterr().out
    assert "--overload: mlp" in table and "2x" in table
    assert len(sent) >= sum(s["requests"] for s in steps) > 0
    assert opened == [cli.OPEN_LOOP_CONNECTIONS] * 2  # before each step, all of them


def test_overload_step_summary():
    samples = [Sample(0, 0.2, 200, "default", "m"), Sample(0, 1.5, 200, "default", "m"),
               Sample(0, 0.004, 503, "default", "m"), Sample(0, 6.0, "client_timeout", "default", "m")]  # fmt: skip
    s = overload.summarize_step(samples, overload.Step(2.0, 20.0, 2.0), 10.0, 1000.0, 2.5)
    assert s["accepted"] == 2 and s["goodput_rps"] == 0.5 and s["goodput_of_capacity"] == 0.05
    assert s["shed"] == 1 and s["shed_fraction"] == 0.25 and s["time_to_shed_p99_ms"] == pytest.approx(4)
    assert s["connection_errors"] == 1 and s["timeouts_504"] == 0
    s.update(rss_peak_mib=120.0, rss_after_mib=100.0, send_lag_p99_ms=3.0)
    s["server"] = {
        "accepted": {"p99_ms": 480.2},
        "shed_at_arrival": {"p99_ms": 0.4},
        "loop_lag": {"p99_ms": 12.5},
    }
    table = overload.markdown([s], {"rss_idle_mib": 90.0})
    assert "| 2x | 20.0 | 0.5 (0.05) |" in table and table.endswith("| 3.0 | 480 / 0.4 / 12.5 |")


def test_tfserving_says_pool_is_not_expressible(server, capsys):
    argv = ["--url", server, "--model", "attention", "--protocol", "tfserving", "--pool", "on"]
    assert cli.main([*argv, "--requests", "5", "--concurrency", "1", "--timeout-ms", "5000"]) == 0
    captured = capsys.readouterr()
    assert "--pool on cannot be expressed in a TF Serving request" in captured.err
    assert "--timeout-ms cannot be expressed" in captured.err
    assert "default" in captured.out


def test_payload_file(server, tmp_path, capsys):
    good = tmp_path / "in.json"
    good.write_text(json.dumps({"input": [[0.5] * 64] * 3}))
    assert cli.main(["--url", server, "--model", "mlp", "--payload", str(good), "--requests", "4"]) == 0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"nope": [1.0]}))
    assert cli.main(["--url", server, "--model", "mlp", "--payload", str(bad), "--requests", "4"]) == 1
    assert (
        "--payload names input(s) nope that the model(s) do not have; inputs: input"
        in capsys.readouterr().err
    )
    bad.write_text("{")
    assert cli.main(["--url", server, "--model", "mlp", "--payload", str(bad), "--requests", "4"]) == 1
    assert "is not valid JSON" in capsys.readouterr().err


def test_unknown_model(server, capsys):
    assert cli.main(["--url", server, "--model", "nosuch", "--requests", "1"]) == 1
    err = capsys.readouterr().err
    assert f"GET {server}/v2/models/nosuch answered 404" in err
    assert "Traceback" not in err


def test_unreachable_url(capsys):
    url = f"http://127.0.0.1:{free_port()}"
    assert cli.main(["--url", url, "--model", "mlp", "--requests", "1"]) == 1
    err = capsys.readouterr().err
    assert f"cannot connect to {url}/v2/models/mlp" in err
    assert "Traceback" not in err


def test_plot_without_matplotlib(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert cli.main(["--url", "http://127.0.0.1:1", "--model", "m", "--plot", "x.png"]) == 1
    assert "--plot needs matplotlib" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "m", "--rate", "0"], "expected a positive number, got '0'"),
        (["--model", "m", "--concurrency", "2", "--rate", "5"], "not allowed with argument"),
        (["--model", "m", "--duration", "1", "--requests", "5"], "not allowed with argument"),
        (["--model", "m:heavy"], "the weight in 'm:heavy' must be a positive number"),
        (["--model", "m", "--model", "m"], "a model is given more than once"),
        (["--model", "m", "--url", "ftp://x"], "--url must start with http:// or https://"),
        (["--model", "m", "--compare-pool", "--pool", "on"], "leave out --pool"),
        (["--model", "m", "--compare-pool", "--rounds", "3"], "--rounds must be an even number"),
        (["--model", "m", "--compare-pool", "--requests", "3"], "--requests must be at least --rounds"),
        (["--model", "m", "--protocol", "tfserving", "--binary"], "--binary is not available"),
        (["--model", "m", "--protocol", "tfserving", "--compare-pool"], "TF Serving's API does not have"),
        (["--model", "m", "--protocol", "grpc"], "invalid choice: 'grpc'"),
        (["--model", "m", "--grpc-address", "h:1"], "--grpc-address goes with --protocol kserve-grpc"),
        (["--model", "m", "--protocol", "kserve-grpc", "--grpc-address", "h"], "give HOST:PORT"),
        (["--model", "m", "--protocol", "kserve-grpc", "--grpc-address", "http://h:1"], "not a URL"),
        (["--model", "m", "--protocol", "kserve-grpc", "--grpc-address", "h:abc"], "must be a number"),
        (["--model", "m", "--protocol", "kserve-grpc", "--grpc-address", "h:70000"], "must be a number"),
        (["--model", "m", "--protocol", "kserve-grpc", "--grpc-address", "::1:80"], "[::1]:80"),
        (["--model", "m", "--batch", "0"], "expected a positive integer, got '0'"),
        (["--rate", "5"], "the following arguments are required: --model"),
        (["--model", "m", "--overload", "--rate", "5"], "--rate does not go with --overload"),
        (
            ["--model", "m", "--overload", "--protocol", "tfserving"],
            "--overload needs a per-request deadline",
        ),
    ],
)
def test_bad_arguments(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert "usage: poolserve loadtest" in err


def test_command_line_bad_argument_exit_code():
    proc = subprocess.run(
        [sys.executable, "-m", "poolserve.server.cli", "loadtest", "--model", "m", "--warmup", "-1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "argument --warmup: expected a number of at least 0, got '-1'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_batch_sizes_seen_are_reported(tmp_path, capsys):
    config = tmp_path / "batching.toml"
    model = ROOT / "configs" / "models" / "mlp.pb"
    config.write_text(f'[[models]]\nname = "mlp"\npath = "{model}"\n[models.batching]\nmax_batch_size = 16\n')
    proc = ServerProcess(config, tmp_path / "server.log", "--log-level", "warning")
    try:
        out = tmp_path / "r.json"
        argv = ["--url", proc.url, "--model", "mlp", "--concurrency", "8", "--requests", "80"]
        assert cli.main([*argv, "--report", str(out)]) == 0
    finally:
        proc.stop()
    batches = json.loads(out.read_text())["batches"]["mlp"]
    assert batches["batched_requests"] == 80
    assert 1.0 <= batches["mean_rows"] <= 16.0
    assert "batching: mlp: 80 requests ran in batches of" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("statuses", "code", "problems"),
    [
        ({200: 99, 503: 1}, 0, []),  # 1% failed: within the share
        ({200: 98, 503: 2}, 1, ["2 of 100 requests failed (2.0%; at most 1% may)"]),
        ({200: 99, "connect_error": 1}, 1, ["1 connection error(s)"]),
        # the server gone mid-run: most requests failed, and the run exited 0
        ({200: 8, "ReadError": 92}, 1, ["92 of 100 requests failed (92.0%", "92 connection error(s)"]),
        ({504: 3}, 1, ["no request succeeded"]),
    ],
)
def test_failed_requests_past_the_share_or_connection_errors_exit_1(tmp_path, statuses, code, problems):
    out = tmp_path / "r.json"
    args = cli.build_parser().parse_args(["--model", "m", "--requests", "100", "--report", str(out)])
    err = io.StringIO()
    runner = cli.Runner(args, Console(file=io.StringIO()), Console(file=err, width=200))
    recorder = Recorder()
    for status, n in statuses.items():
        recorder.samples += [Sample(0.0, 0.01, status, "default", "m")] * n
    assert runner.finish(recorder, {"default": 1.0}, 0.1, 1.0, {}) == code
    verdict = json.loads(out.read_text())["verdict"]
    assert verdict["passed"] is (code == 0) and verdict["max_error_share"] == 0.01
    assert len(verdict["problems"]) == len(problems)
    for line, fragment in zip(verdict["problems"], problems, strict=True):
        assert fragment in line and fragment in err.getvalue()


@pytest.mark.parametrize("flag", ["--report", "--plot"])
def test_unwritable_outputs_are_refused_before_the_load(tmp_path, capsys, flag):
    if flag == "--plot":
        pytest.importorskip("matplotlib")  # without it, --plot is refused first, for that
    path = tmp_path / "no-such-folder" / "out"
    url = f"http://127.0.0.1:{free_port()}"  # never reached: the check comes first
    assert cli.main(["--url", url, "--model", "mlp", "--requests", "1", flag, str(path)]) == 1
    err = capsys.readouterr().err
    assert f"cannot write {flag} {path}" in err and "cannot connect" not in err
    assert not path.parent.exists()


def test_a_writable_report_path_is_left_as_it_was(tmp_path):
    path = tmp_path / "r.json"
    report.check_writable("--report", str(path))
    assert not path.exists()
    path.write_text("kept")
    report.check_writable("--report", str(path))
    assert path.read_text() == "kept"
