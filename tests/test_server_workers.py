"""server/workers.py: ``poolserve serve --workers 2`` as real processes on 127.0.0.1. Both workers answer,
/metrics adds them up, a trace is found through either, the pool toggle and repository calls reach both, a killed worker is
replaced, and SIGTERM drains them all and exits 0.

Each request goes on a fresh connection: the kernel spreads connections (not requests) over the workers'
SO_REUSEPORT sockets, and the X-Poolserve-Worker header names the worker that answered. The tests share one
server; the last one stops it."""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import multiprocessing.connection
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from support import ROOT, ServerProcess, free_port
from test_server_process import write_models

from poolserve.proto import grpc_service_pb2, grpc_service_pb2_grpc
from poolserve.server.openapi import RepositoryAnswer
from poolserve.server.workers import WORKER_HEADER, SharedFlag, Worker, core_share, remove_stale_runtime_dirs

ADD = {"feeds": {"x": [[1, 2, 3]]}}
# a connection per request (no keep-alive), without httpx.get's cost of a client per call (80 ms)
HTTP = httpx.Client(timeout=10, limits=httpx.Limits(max_keepalive_connections=0))


def write_config(tmp: Path) -> Path:
    write_models(tmp)
    config = tmp / "server.toml"
    config.write_text(
        '[server]\ndrain_seconds = 20\n\n[traces]\npath = "traces.sqlite3"\n\n'
        '[[models]]\nname = "add"\npath = "add.pb"\n\n[[models]]\nname = "slow"\npath = "slow.pb"\n'
    )
    return config


def serve_until_exit(config: Path, *args: str, timeout: float = 30) -> tuple[int | None, str]:
    """``poolserve serve --config CONFIG --host 127.0.0.1 ARGS`` expected to exit on its own: its exit code
    (None when it still ran after ``timeout`` seconds, and was stopped) and its output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("POOLSERVE_")}
    env["XDG_STATE_HOME"] = str(config.parent / "state")
    command = [sys.executable, "-m", "poolserve.server.cli", "serve", "--config", str(config)]
    with subprocess.Popen(
        [*command, "--host", "127.0.0.1", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as proc:
        try:
            out, _ = proc.communicate(timeout=timeout)
            return proc.returncode, out
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            return None, out


class Workers(ServerProcess):
    def __init__(self, tmp: Path) -> None:
        super().__init__(write_config(tmp), tmp / "server.log", "--workers", "2")
        self.wait_for(lambda: len(self.pids()) == 2, "both workers to answer")

    def get(self, path: str) -> httpx.Response:
        return HTTP.get(f"{self.url}{path}")

    def pids(self, tries: int = 30) -> set[str]:
        seen: set[str] = set()
        for _ in range(tries):
            try:
                r = self.get("/v1/health/ready")
            except httpx.TransportError:
                continue
            if r.status_code == 200:
                seen.add(r.headers[WORKER_HEADER])
        return seen

    def wait_for(self, done: Callable[[], bool], what: str, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, f"timed out waiting for {what}: {self.output()[-2000:]}"
            time.sleep(0.05)

    def metric(self, name: str) -> float:
        text = self.get("/metrics").text
        m = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", text, re.M)
        return float(m.group(1)) if m else 0.0


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workers]:
    s = Workers(tmp_path_factory.mktemp("workers"))
    yield s
    s.stop()


def test_both_workers_answer_and_metrics_add_up(workers: Workers) -> None:
    answered: dict[str, int] = {}
    for _ in range(24):
        r = HTTP.post(f"{workers.url}/v1/models/add:run", json=ADD)
        assert r.status_code == 200 and r.json()["outputs"]["out"]["data"] == [3, 5, 7]
        answered[r.headers[WORKER_HEADER]] = answered.get(r.headers[WORKER_HEADER], 0) + 1
    assert len(answered) == 2, answered
    name = 'poolserve_requests_total{endpoint="/v1/models/{model}:run",model="add",status="200"}'
    # one scrape, answered by one worker, counts both workers' requests
    assert workers.metric(name) == 24
    assert workers.metric("poolserve_in_flight_requests") <= 1  # a gauge, summed over the live workers


def test_either_workers_statistics_count_every_workers_requests(workers: Workers) -> None:
    """Each worker counts its own requests and writes its numbers for the others every second: the
    statistics, through either worker, add up both workers' (once the latest are written)."""

    def agreed() -> int | None:
        """The success count of add when both workers answer the same one, else None."""
        seen: dict[str, int] = {}
        for _ in range(20):
            r = workers.get("/v2/models/add/stats")
            [stat] = r.json()["model_stats"]
            seen[r.headers[WORKER_HEADER]] = stat["inference_stats"]["success"]["count"]
        return seen.popitem()[1] if len(seen) == 2 and len(set(seen.values())) == 1 else None

    counted: list[int] = []

    def settled() -> bool:
        # two workers' numbers can agree while both are stale (each writes its own every second): the
        # same answer again once they have written is the true count
        count = agreed()
        if count is None:
            return False
        time.sleep(1.2)
        if agreed() != count:
            return False
        counted.append(count)
        return True

    workers.wait_for(settled, "the workers to agree on the requests before")
    answered = set()
    for _ in range(24):
        r = HTTP.post(f"{workers.url}/v1/models/add:run", json=ADD)
        assert r.status_code == 200
        answered.add(r.headers[WORKER_HEADER])
    assert len(answered) == 2
    workers.wait_for(lambda: agreed() == counted[0] + 24, "both workers to count all 24 requests")


def test_a_trace_recorded_by_one_worker_is_found_through_either(workers: Workers) -> None:
    r = HTTP.post(
        f"{workers.url}/v1/models/add:run",
        json={**ADD, "trace": "response"},
        headers={"X-Request-Id": "traced-1"},
        timeout=10,
    )
    assert r.status_code == 200
    recorded_by = r.headers[WORKER_HEADER]
    found: dict[str, dict[str, object]] = {}

    def both_found() -> bool:
        got = workers.get("/v1/traces/traced-1")
        if got.status_code == 200:
            found[got.headers[WORKER_HEADER]] = got.json()
        else:  # the other worker, before the recording worker's writer committed the trace
            assert got.status_code == 404, got.text
        return len(found) == 2

    workers.wait_for(both_found, "the trace through both workers")
    assert recorded_by in found
    a, b = found.values()
    assert a == b
    spans = [e["name"] for e in a["traceEvents"] if e.get("cat") == "Server"]  # type: ignore[union-attr]
    assert spans[0] == "receive+decode" and spans[-1] == "encode"


def test_the_pool_toggle_reaches_every_worker(workers: Workers) -> None:
    try:
        for enabled in (False, True):
            r = HTTP.put(f"{workers.url}/v1/runtime/run_handler_pool", json={"enabled": enabled}, timeout=10)
            assert r.status_code == 200 and r.json()["enabled"] is enabled
            seen: dict[str, bool] = {}
            for _ in range(30):
                got = workers.get("/v1/runtime/run_handler_pool")
                seen[got.headers[WORKER_HEADER]] = got.json()["enabled"]
            assert len(seen) == 2 and set(seen.values()) == {enabled}, seen
    finally:
        HTTP.put(f"{workers.url}/v1/runtime/run_handler_pool", json={"enabled": True})


def _add_statuses(workers: Workers, model: str = "add") -> dict[str, int]:
    """Each worker's status for a request to ``model`` (a connection per request: both answer)."""
    seen: dict[str, int] = {}
    for _ in range(30):
        r = HTTP.post(f"{workers.url}/v1/models/{model}:run", json=ADD)
        seen[r.headers[WORKER_HEADER]] = r.status_code
    return seen


def _runtime_folder(workers: Workers) -> Path:
    """The supervisor's runtime folder (the calls' record and counter, each worker's answer)."""
    for folder in Path(tempfile.gettempdir()).glob("poolserve-*"):
        pid = folder / "supervisor.pid"
        if pid.is_file() and pid.read_text() == str(workers.proc.pid):
            return folder
    raise AssertionError("no runtime folder of this server")


def test_repository_calls_reach_every_worker_and_its_replacement(workers: Workers) -> None:
    """A load or unload through one worker is applied by every worker before it answers, says so, and a
    worker started later (a replacement after a crash) comes up with the same models: the config file as
    the others have it now, less what calls unloaded."""
    config = workers.log.parent / "server.toml"
    before = config.read_text()
    try:
        config.write_text(before + '\n[[models]]\nname = "twice"\npath = "add.pb"\n')
        r = HTTP.post(f"{workers.url}/v2/repository/models/twice/load", timeout=60)
        assert r.status_code == 200, r.text
        r = HTTP.post(f"{workers.url}/v2/repository/models/add/unload", timeout=60)
        assert r.status_code == 200, r.text
        answer = r.json()
        assert answer["applied_by_all"] is True and len(answer["workers"]) == 2, answer
        assert all(w["applied"] and not w["error"] for w in answer["workers"]), answer
        assert {str(w["pid"]) for w in answer["workers"]} == workers.pids()
        # the OpenAPI document describes this answer (it said the 200 was empty)
        doc = HTTP.get(f"{workers.url}/openapi.json").json()
        for call in ("load", "unload"):
            ok = doc["paths"][f"/v2/repository/models/{{model}}/{call}"]["post"]["responses"]["200"]
            assert ok["content"]["application/json"]["schema"]["$ref"].endswith("/RepositoryAnswer"), ok
        RepositoryAnswer.model_validate(answer)  # the model the document's schema is made from
        seen = _add_statuses(workers)
        assert len(seen) == 2 and set(seen.values()) == {503}, seen
        # unloaded by a call, then out of the config and back in: it loads afresh in every worker (as in
        # one process), and so in a replacement
        assert HTTP.post(f"{workers.url}/v2/repository/models/twice/unload", timeout=60).status_code == 200
        config.write_text(before)

        def indexed() -> set[str]:
            seen = set()
            for _ in range(20):
                r = HTTP.post(f"{workers.url}/v2/repository/index")
                if any(row["name"] == "twice" for row in r.json()):
                    seen.add(r.headers[WORKER_HEADER])
            return seen

        workers.wait_for(lambda: not indexed(), "both workers to drop the model that left the config")
        config.write_text(before + '\n[[models]]\nname = "twice"\npath = "add.pb"\n')
        workers.wait_for(lambda: set(_add_statuses(workers, "twice").values()) == {200}, "it to load again")

        victim = sorted(workers.pids())[0]
        os.kill(int(victim), signal.SIGKILL)
        workers.wait_for(lambda: (p := workers.pids()) and victim not in p and len(p) == 2, "a new worker")
        seen = _add_statuses(workers)
        assert len(seen) == 2 and set(seen.values()) == {503}, seen  # the replacement too
        seen = _add_statuses(workers, "twice")
        assert len(seen) == 2 and set(seen.values()) == {200}, seen
        # the replacement started with the last call's record dropped ("twice" left the config): it took up
        # every call the counter counts (it counted the last one recorded, and re-read the record every poll)
        folder = _runtime_folder(workers)
        counter = int.from_bytes((folder / "repository.seq").read_bytes(), "little")
        acks = {p.stem: json.loads(p.read_text())["applied"] for p in (folder / "repository").glob("*.json")}
        assert set(acks) == workers.pids() and set(acks.values()) == {counter}, (acks, counter)

        with grpc.insecure_channel(workers.grpc_address) as channel:
            stub = grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)
            stub.RepositoryModelLoad(
                grpc_service_pb2.RepositoryModelLoadRequest(model_name="add"), timeout=60
            )
        seen = _add_statuses(workers)
        assert len(seen) == 2 and set(seen.values()) == {200}, seen
    finally:
        config.write_text(before)
        HTTP.post(f"{workers.url}/v2/repository/models/add/load", timeout=60)


def test_a_load_that_fails_in_the_workers_says_so_for_each(workers: Workers) -> None:
    config = workers.log.parent / "server.toml"
    before = config.read_text()
    (config.parent / "empty.pb").write_bytes(b"")  # a GraphDef with no nodes: no worker loads it
    try:
        config.write_text(before + '\n[[models]]\nname = "empty"\npath = "empty.pb"\n')
        r = HTTP.post(f"{workers.url}/v2/repository/models/empty/load", timeout=60)
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert "load 'empty' failed in 2 of 2 workers" in error, error
        assert all(f"worker {pid}: failed to load 'empty'" in error for pid in workers.pids()), error
    finally:
        # unloaded by a call, it no longer keeps the workers unready; then out of the config
        HTTP.post(f"{workers.url}/v2/repository/models/empty/unload", timeout=60)
        config.write_text(before)
    assert len(workers.pids()) == 2


def test_a_killed_worker_loses_only_its_requests_and_is_replaced(workers: Workers) -> None:
    before = workers.pids()
    assert len(before) == 2
    victim = sorted(before)[0]
    clients, stop = 4, threading.Event()
    statuses: list[int] = []
    dropped: list[float] = []  # when

    def client() -> None:
        deadline = time.monotonic() + 15
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                r = HTTP.post(f"{workers.url}/v1/models/add:run", json=ADD)
                statuses.append(r.status_code)
            except httpx.TransportError:
                dropped.append(time.monotonic())

    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        running = [pool.submit(client) for _ in range(clients)]
        workers.wait_for(lambda: len(statuses) >= 20, "load before the kill")
        killed_at = time.monotonic()
        os.kill(int(victim), signal.SIGKILL)
        served = len(statuses)
        workers.wait_for(lambda: len(statuses) >= served + 20, "the surviving worker to keep answering")
        stop.set()
        for f in running:
            f.result(timeout=20)
    assert set(statuses) == {200}
    # lost: what each client had in flight at the victim, and connections the kernel queued on the victim's
    # socket while the process was going away; nothing once it had gone
    assert len(dropped) <= 2 * clients, dropped
    assert all(t - killed_at < 2.0 for t in dropped), [t - killed_at for t in dropped]
    workers.wait_for(lambda: (p := workers.pids()) and victim not in p and len(p) == 2, "a new worker")


def test_a_second_server_on_the_same_grpc_port_exits_1(
    workers: Workers, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The workers bind gRPC with SO_REUSEPORT: without the supervisor's reservation a second server
    would start and take half of the first one's gRPC calls."""
    config = write_config(tmp_path_factory.mktemp("second"))
    ports = ["--port", str(free_port()), "--grpc-port", str(workers.grpc_port)]
    code, out = serve_until_exit(config, *ports, "--workers", "2")
    assert code == 1, out
    assert f"cannot listen for gRPC on 127.0.0.1:{workers.grpc_port}: Address already in use" in out, out


def test_a_grpc_port_another_program_holds_stops_the_server(tmp_path: Path) -> None:
    """Not a crash loop: every worker would fail to bind it."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        grpc_port = other.getsockname()[1]
        ports = ["--port", str(free_port()), "--grpc-port", str(grpc_port)]
        code, out = serve_until_exit(write_config(tmp_path), *ports, "--workers", "2")
    assert code == 1, out
    assert f"cannot listen for gRPC on 127.0.0.1:{grpc_port}" in out, out
    assert "starting another" not in out, out


def _run_worker(config: Path, grpc_port: int, ready: multiprocessing.connection.Connection) -> None:
    from poolserve.server import cli
    from poolserve.server.config import load_config

    settings = load_config(str(config))
    settings.server.host, settings.server.port, settings.server.grpc_port = (
        "127.0.0.1",
        free_port(),
        grpc_port,
    )
    worker = Worker(0, "127.0.0.1", settings.server.port, config.parent, ready)
    args = argparse.Namespace(log_level="warning", access_log=False)
    os._exit(cli.run_server(settings, args, worker))


def test_a_worker_that_cannot_bind_never_reports_loaded(tmp_path: Path) -> None:
    """The supervisor restarts a worker that dies after "loaded" (a crash) and stops on one that dies
    before (it cannot start): a port it cannot bind is the second kind."""
    config = write_config(tmp_path)
    SharedFlag.create(tmp_path / "run_handler_pool", True)
    # spawned, not forked: the test process runs grpc's threads, and a forked child of it can hang in
    # grpc (it did so in a full run, killed after 30 s)
    ctx = multiprocessing.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        process = ctx.Process(target=_run_worker, args=(config, other.getsockname()[1], send))
        process.start()
        send.close()
        process.join(30)
        if process.is_alive():
            process.kill()
            process.join()
    assert process.exitcode == 1
    with pytest.raises(EOFError):  # nothing sent
        receive.recv()


def test_runtime_folders_of_supervisors_gone_are_removed(tmp_path: Path) -> None:
    """A supervisor killed with kill -9 leaves its runtime folder: the next one to start removes it."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    for name, pid in (("poolserve-gone", str(gone.pid)), ("poolserve-alive", str(os.getpid()))):
        (tmp_path / name / "metrics").mkdir(parents=True)
        (tmp_path / name / "supervisor.pid").write_text(pid)
    (tmp_path / "poolserve-unknown").mkdir()  # no pid file: not known to be a runtime folder
    assert remove_stale_runtime_dirs(tmp_path) == [tmp_path / "poolserve-gone"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["poolserve-alive", "poolserve-unknown"]


@pytest.mark.parametrize(("allowed", "auto", "share_of_2"), [({0}, 1, 1), ({0, 1, 2, 3}, 4, 2)])
def test_auto_and_the_core_share_count_the_cores_allowed(
    monkeypatch: pytest.MonkeyPatch, allowed: set[int], auto: int, share_of_2: int
) -> None:
    """``taskset -c 0 poolserve serve --workers auto`` starts one worker, not one per core of the machine."""
    from poolserve.server.cli import worker_count

    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: allowed, raising=False)
    assert worker_count("auto") == auto
    assert core_share(2) == share_of_2


def _slow_start_config(tmp: Path) -> Path:
    """A config whose models take a while to load: a window to signal the server in."""
    write_models(tmp)
    config = tmp / "server.toml"
    config.write_text("".join(f'[[models]]\nname = "m{i}"\npath = "add.pb"\n\n' for i in range(400)))
    return config


@pytest.mark.parametrize("args", [(), ("--workers", "2")])
def test_sigterm_while_starting_exits_0(tmp_path: Path, args: tuple[str, ...]) -> None:
    """Nothing is served yet, so nothing to drain: the README's SIGTERM exits 0, with a line saying so."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("POOLSERVE_")}
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    command = [
        sys.executable,
        "-m",
        "poolserve.server.cli",
        "serve",
        "--config",
        str(_slow_start_config(tmp_path)),
    ]
    ports = ["--port", str(free_port()), "--grpc-port", str(free_port())]
    with subprocess.Popen(
        [*command, "--host", "127.0.0.1", *ports, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as proc:
        watchdog = threading.Timer(60, proc.kill)  # the loop below ends at the output's end at the latest
        watchdog.start()
        try:
            assert proc.stdout is not None
            lines = []
            for line in proc.stdout:
                lines.append(line)
                if "loading version" in line:  # a worker's too, with --workers
                    break
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=30)
        finally:
            watchdog.cancel()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    out = "".join(lines) + out
    assert "poolserve ready" not in out, "the signal came too late to test start-up"
    assert proc.returncode == 0, out
    assert "SIGTERM while starting: exiting (nothing to drain)" in out, out


def test_workers_flag_is_checked() -> None:
    from poolserve.server.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--workers", "0"])
    assert exit_info.value.code == 2


def test_sigterm_drains_every_worker_and_exits_0(workers: Workers) -> None:
    # the last test of the module: it stops the shared server
    body = json.dumps(ADD).encode()
    with socket.create_connection(("127.0.0.1", workers.port), timeout=10) as sock:
        # a request in flight, for as long as the test likes: its body arrives in two parts
        sock.sendall(
            b"POST /v1/models/add:run HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body[:5]
        )
        workers.wait_for(lambda: workers.metric("poolserve_in_flight_requests") >= 1, "the request to start")
        workers.proc.send_signal(signal.SIGTERM)
        # new connections: once the workers have closed their sockets, answered 503 by the supervisor
        workers.wait_for(
            lambda: all(_from_supervisor(workers) for _ in range(3)), "the supervisor to answer 503"
        )
        assert workers.proc.poll() is None
        sock.sendall(body[5:])
        answer = b""
        while chunk := sock.recv(65536):  # to the end: the draining worker closes the connection
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200"), answer
    assert b'"data":[3.0,5.0,7.0]' in answer, answer
    assert workers.proc.wait(timeout=30) == 0, workers.output()


def _from_supervisor(server: Workers) -> bool:
    try:
        r = server.get("/v1/models")
    except httpx.TransportError:  # a connection queued on a worker's socket as it closed
        return False
    assert r.status_code in (200, 503), r.text  # a worker not yet closed still serves
    return r.status_code == 503 and "shutting down" in r.text and r.headers["retry-after"] == "1"
