"""The model lifecycle (server/repository.py) against a real server on loopback: version policy, labels,
polling the files and the config file, drain-then-unload under load, failed loads, and the KServe
repository extension. Poll intervals are 0.05-0.1 s so every wait here is short and bounded."""

from __future__ import annotations

import asyncio
import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
import uvicorn
from support import ServerProcess, free_port, gate_op, serve_in_thread

from poolserve import Session, errors
from poolserve.proto import grpc_service_pb2, grpc_service_pb2_grpc
from poolserve.runtime.builder import GraphBuilder
from poolserve.server.app import create_app
from poolserve.server.config import Config, ConfigError, VersionPolicy, load_config, make_config
from poolserve.server.models import load_model
from poolserve.server.repository import Repository, fingerprint, select
from poolserve.server.service import InferenceService

SAVED = Path(__file__).parent / "fixtures" / "saved_models"
POLL = 0.1
TOKEN = "lifecycle-token"
X = np.load(SAVED / "tf1_linear_v1.npz")["serving_default/in:x"]


class Loopback:
    """The app under uvicorn on 127.0.0.1 in a thread."""

    def __init__(self, config: Config) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.app = create_app(config)
        self.service: InferenceService = self.app.state.service
        self.server = uvicorn.Server(
            uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        )
        self.thread = serve_in_thread(self.server)

        self.client = httpx.Client(base_url=self.url, timeout=10)

    def get(self, path: str, **kw: Any) -> httpx.Response:
        return self.client.get(path, **kw)

    def post(self, path: str, **kw: Any) -> httpx.Response:
        return self.client.post(path, **kw)

    def stop(self) -> None:
        self.client.close()
        self.server.should_exit = True
        self.thread.join(timeout=15)


@pytest.fixture
def serve() -> Iterator[Callable[[Config], Loopback]]:
    servers: list[Loopback] = []

    def start(config: Config) -> Loopback:
        servers.append(Loopback(config))
        return servers[-1]

    yield start
    for s in servers:
        s.stop()


def put_version(base: Path, version: int, source: int | None = None) -> Path:
    """Copies tf1_linear's version ``source`` (default: the same) in as ``base/version``, atomically (a
    copy beside it, then a rename), as a deployment should."""
    staging = base.parent / f".staging-{base.name}-{version}"
    shutil.copytree(SAVED / "tf1_linear" / str(source or version), staging)
    staging.rename(base / str(version))
    return base / str(version)


def linear_config(base: Path, poll: float = POLL, **model: Any) -> Config:
    return make_config(
        {"server": {"poll_seconds": poll}, "models": [{"name": "m", "path": str(base), **model}]}
    )


def statuses(server: Loopback, name: str = "m") -> dict[str, tuple[str, str]]:
    r = server.get(f"/v1/models/{name}")
    assert r.status_code == 200, r.text
    return {
        s["version"]: (s["state"], s["status"]["error_message"]) for s in r.json()["model_version_status"]
    }


def wait_for(what: Callable[[], bool], seconds: float = 10.0) -> float:
    start = time.monotonic()
    while not what():
        assert time.monotonic() - start < seconds, "timed out waiting for the repository"
        time.sleep(0.01)
    return time.monotonic() - start


def infer_body() -> dict[str, Any]:
    return {"inputs": [{"name": "x", "shape": list(X.shape), "datatype": "FP32", "data": X.ravel().tolist()}]}


def add_graph(path: Path, k: float, gate: str | None = None) -> Any:
    """A .pb computing x * k + 1 (through a TestGate node when ``gate`` is named)."""
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [None, 2])
    if gate is not None:
        x, opened = gate_op(b, x, gate)
    b.identity(b.add(b.mul(x, b.constant(k)), b.constant(1.0)), name="out")
    staging = path.with_suffix(".tmp")
    staging.write_bytes(b.graph_def.SerializeToString())
    staging.replace(path)
    return opened if gate is not None else None


# --- version policy ---------------------------------------------------------------------------------------


def test_select_follows_the_version_policy() -> None:
    def policy(**kw: Any) -> Any:
        return make_config({"models": [{"name": "m", "path": "x", "version_policy": kw}]}).models[0]

    assert select(make_config({"models": [{"name": "m", "path": "x"}]}).models[0], [3, 1, 2]) == [3]
    assert select(policy(latest=2), [3, 1, 2]) == [2, 3]
    assert select(policy(all=True), [3, 1, 2]) == [1, 2, 3]
    assert select(policy(specific=[1, 5]), [3, 1, 2]) == [1]
    with pytest.raises(ValueError, match="exactly one of latest"):
        VersionPolicy(latest=1, all=True)
    with pytest.raises(ConfigError, match=r"models\.0\.labels: .*label 'a/b' must be non-empty"):
        make_config({"models": [{"name": "m", "path": "x", "labels": {"a/b": 1}}]})
    with pytest.raises(ConfigError, match=r"version_policy\.latest: Input should be greater than 0"):
        make_config({"models": [{"name": "m", "path": "x", "version_policy": {"latest": 0}}]})


@pytest.mark.parametrize(
    ("policy", "served"),
    [(None, ["2"]), ({"latest": 2}, ["2", "1"]), ({"all": True}, ["2", "1"]), ({"specific": [1]}, ["1"])],
)
def test_a_base_path_serves_the_versions_its_policy_picks(
    tmp_path: Path, policy: dict[str, Any] | None, served: list[str]
) -> None:
    base = tmp_path / "m"
    base.mkdir()
    put_version(base, 1)
    put_version(base, 2)
    config = linear_config(base, poll=0, **({"version_policy": policy} if policy else {}))
    service = InferenceService(config)
    service.start()
    try:
        assert [s["version"] for s in service.repository.status("m")] == served
        assert {s["state"] for s in service.repository.status("m")} == {"AVAILABLE"}
        assert service.model("m").version == int(served[0])
    finally:
        service.close()


# --- labels -------------------------------------------------------------------------------------------------


def test_labels_from_the_config_pick_versions(tmp_path: Path, serve: Callable[[Config], Loopback]) -> None:
    base = tmp_path / "m"
    base.mkdir()
    put_version(base, 1)
    put_version(base, 2)
    labels = {"stable": 1, "canary": 2, "next": 3}
    server = serve(linear_config(base, poll=0, version_policy={"all": True}, labels=labels))
    meta = server.get("/v1/models/m/labels/stable/metadata").json()
    assert meta["model_spec"]["version"] == "1"  # "stable" as configured, not the latest
    assert [
        s["version"] for s in server.get("/v1/models/m/labels/canary").json()["model_version_status"]
    ] == ["2"]
    body = {"instances": X.tolist()}
    got = server.post("/v1/models/m/labels/canary:predict", json=body)
    direct = server.post("/v1/models/m/versions/2:predict", json=body)
    assert got.status_code == 200 and got.json() == direct.json()
    assert got.json() != server.post("/v1/models/m/labels/stable:predict", json=body).json()
    r = server.post("/v1/models/m/labels/nope:predict", json=body)
    assert r.status_code == 404 and "Unrecognized servable version label: nope" in r.json()["error"]
    assert "canary, next, stable" in r.json()["error"]
    r = server.get("/v1/models/m/labels/next")
    assert r.status_code == 404 and "names version 3, which is not available" in r.json()["error"]
    listed = server.get("/v1/models").json()["models"]
    assert [(m["version"], m.get("labels")) for m in listed] == [(1, ["stable"]), (2, ["canary"])]
    index = server.post("/v2/repository/index").json()
    assert [(row["version"], row.get("labels")) for row in index] == [("1", ["stable"]), ("2", ["canary"])]


# --- polling the files ----------------------------------------------------------------------------------------


def test_a_new_version_folder_is_served_within_two_poll_intervals(
    tmp_path: Path, serve: Callable[[Config], Loopback]
) -> None:
    base = tmp_path / "m"
    base.mkdir()
    put_version(base, 1)
    poll = 0.3
    server = serve(linear_config(base, poll=poll))
    assert statuses(server) == {"1": ("AVAILABLE", "")}
    # what loading version 2 costs by itself, so the bound below is the polling's, not the load's
    config = linear_config(SAVED / "tf1_linear", poll=0)
    start = time.monotonic()
    load_model(config.models[0], config).session.close()
    load_seconds = time.monotonic() - start

    put_version(base, 2)
    waited = wait_for(
        lambda: server.post("/v2/models/m/infer", json=infer_body()).json()["model_version"] == "2"
    )
    assert waited < 2 * poll + 2 * load_seconds + 0.5, (waited, load_seconds)
    # latest 1: version 1 stops serving and goes once its requests are done
    wait_for(lambda: statuses(server) == {"2": ("AVAILABLE", "")})
    r = server.post("/v2/models/m/versions/1/infer", json=infer_body())
    assert r.status_code == 404 and "has no version 1; it has: 2" in r.json()["error"]
    # the folder removed: version 1, still on disk, is the latest again; with none left nothing serves
    shutil.rmtree(base / "2")
    wait_for(lambda: statuses(server) == {"1": ("AVAILABLE", "")})
    shutil.rmtree(base / "1")
    wait_for(lambda: server.get("/v2/models/m/ready").status_code == 503)
    r = server.post("/v2/models/m/infer", json=infer_body())
    assert r.status_code == 503 and "no version available" in r.json()["error"]


def test_swapping_versions_under_load_fails_no_request(
    tmp_path: Path, serve: Callable[[Config], Loopback]
) -> None:
    base = tmp_path / "m"
    base.mkdir()
    put_version(base, 1)
    server = serve(linear_config(base, poll=0.05))
    total, clients = 320, 8
    codes: list[int] = []
    versions: set[str] = set()
    done = threading.Event()

    async def client(n: int) -> None:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as c:
            for _ in range(n):
                r = await c.post("/v2/models/m/infer", json=infer_body())
                codes.append(r.status_code)
                if r.status_code == 200:
                    versions.add(r.json()["model_version"])

    def load() -> None:
        asyncio.run(asyncio.wait_for(_gather(client(total // clients) for _ in range(clients)), 60))
        done.set()

    thread = threading.Thread(target=load)
    thread.start()
    wait_for(lambda: len(codes) > 20)
    put_version(base, 2)  # 1 -> 2
    wait_for(lambda: "2" in versions or done.is_set())
    shutil.rmtree(base / "2")  # 2 -> 1 again
    wait_for(lambda: done.is_set() or statuses(server) == {"1": ("AVAILABLE", "")})
    thread.join(timeout=70)
    assert done.is_set() and len(codes) == total
    assert set(codes) == {200}, {c: codes.count(c) for c in set(codes)}
    assert versions == {"1", "2"}
    repository = server.service.repository
    wait_for(lambda: not repository._retiring)  # every retired version closed once its requests ended


async def _gather(coroutines: Any) -> None:
    await asyncio.gather(*coroutines)


def test_a_retired_version_closes_only_after_its_requests_finish(
    tmp_path: Path, serve: Callable[[Config], Loopback]
) -> None:
    pb = tmp_path / "add.pb"
    gate = add_graph(pb, 2.0, gate="held")
    model = {"name": "add", "path": str(pb), "file_system_poll_wait_seconds": 0.05}  # polls, the server not
    server = serve(make_config({"server": {"poll_seconds": 0}, "models": [model]}))
    old = server.service.model("add")
    feeds = {"feeds": {"x": [[1.0, 2.0]]}}
    result: list[httpx.Response] = []
    url = server.url + "/v1/models/add:run"
    blocked = threading.Thread(target=lambda: result.append(httpx.post(url, json=feeds, timeout=10)))
    blocked.start()
    assert gate.started.wait(10)
    add_graph(pb, 3.0)  # the .pb replaced: it reloads
    wait_for(lambda: server.service.model("add") is not old)
    r = server.post("/v1/models/add:run", json=feeds)
    assert r.status_code == 200 and r.json()["outputs"]["out"]["data"] == [4.0, 7.0]
    time.sleep(0.2)
    assert not old.session.closed  # the request in flight still holds it
    gate.open()
    blocked.join(timeout=10)
    assert result[0].status_code == 200 and result[0].json()["outputs"]["out"]["data"] == [3.0, 5.0]
    wait_for(lambda: old.session.closed)


def test_a_remote_session_bound_to_a_model_holds_its_version_through_a_run(
    tmp_path: Path, serve: Callable[[Config], Loopback]
) -> None:
    pb = tmp_path / "add.pb"
    gate = add_graph(pb, 2.0, gate="held_remote")
    model = {"name": "add", "path": str(pb), "file_system_poll_wait_seconds": 0.05}
    server = serve(make_config({"server": {"poll_seconds": 0}, "models": [model]}))
    old = server.service.model("add")
    x = np.array([[1.0, 2.0]], np.float32)
    with Session(f"{server.url}/v1/models/add") as bound:
        result: list[Any] = []
        blocked = threading.Thread(target=lambda: result.append(bound.run("out:0", {"x:0": x})))
        blocked.start()
        assert gate.started.wait(10)
        add_graph(pb, 3.0)  # the .pb replaced: it reloads while the bound session's run is in flight
        wait_for(lambda: server.service.model("add") is not old)
        time.sleep(0.2)
        assert not old.session.closed  # the remote run holds the version it started on
        gate.open()
        blocked.join(timeout=10)
        assert result[0].tolist() == [[3.0, 5.0]]
        wait_for(lambda: old.session.closed)
        assert bound.run("out:0", {"x:0": x}).tolist() == [[4.0, 7.0]]  # the same version, reloaded
        r = server.post("/v2/repository/models/add/unload")
        assert r.status_code == 200, r.text
        with pytest.raises(
            errors.OpError, match="bound to version 1 of model 'add', which is no longer served"
        ):
            bound.run("out:0", {"x:0": x})


def test_a_broken_version_leaves_the_previous_one_serving(
    tmp_path: Path, serve: Callable[[Config], Loopback]
) -> None:
    base = tmp_path / "m"
    base.mkdir()
    put_version(base, 1)
    server = serve(linear_config(base))
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "saved_model.pb").write_bytes(b"this is not a SavedModel")
    broken.rename(base / "2")
    wait_for(lambda: statuses(server).get("2", ("",))[0] == "END")  # LOADING, then END
    state = statuses(server)
    assert state["1"] == ("AVAILABLE", "")
    assert state["2"][0] == "END" and "saved_model.pb" in state["2"][1]
    r = server.post("/v2/models/m/infer", json=infer_body())
    assert r.status_code == 200 and r.json()["model_version"] == "1"
    assert server.get("/v2/models/m/ready").status_code == 200
    r = server.get("/v2/models/m/versions/2/ready")
    assert r.status_code == 503 and "failed to load" in r.json()["error"]
    row = next(r for r in server.post("/v2/repository/index").json() if r["version"] == "2")
    assert row["state"] == "UNAVAILABLE" and "saved_model.pb" in row["reason"]
    # fixed on disk: version 2 loads and takes over
    shutil.rmtree(base / "2")
    put_version(base, 2)
    wait_for(lambda: statuses(server) == {"2": ("AVAILABLE", "")})


def test_a_pb_emptied_while_copied_in_leaves_the_previous_version_serving(
    tmp_path: Path, serve: Callable[[Config], Loopback]
) -> None:
    pb = tmp_path / "add.pb"
    add_graph(pb, 2.0)
    server = serve(
        make_config({"server": {"poll_seconds": POLL}, "models": [{"name": "add", "path": str(pb)}]})
    )
    pb.write_bytes(b"")  # a copy truncates the file first
    wait_for(lambda: statuses(server, "add")["1"][1] != "")
    [(state, error)] = statuses(server, "add").values()
    assert state == "AVAILABLE" and "add.pb is a GraphDef with no nodes" in error
    r = server.post("/v1/models/add:run", json={"feeds": {"x": [[1.0, 1.0]]}})
    assert r.status_code == 200 and r.json()["outputs"]["out"]["data"] == [3.0, 3.0]
    add_graph(pb, 3.0)  # the copy completes: the new graph serves
    wait_for(lambda: statuses(server, "add") == {"1": ("AVAILABLE", "")})


# --- polling the config file ------------------------------------------------------------------------------------


def test_models_added_to_or_removed_from_the_config_file_load_and_unload(
    tmp_path: Path, serve: Callable[[Config], Loopback]
) -> None:
    add_graph(tmp_path / "a.pb", 2.0)
    add_graph(tmp_path / "b.pb", 3.0)
    config_file = tmp_path / "server.toml"
    head = f"[server]\npoll_seconds = {POLL}\n"
    config_file.write_text(head + '[[models]]\nname = "a"\npath = "a.pb"\n')
    server = serve(load_config(config_file))
    assert server.get("/v2/models/b/ready").status_code == 404
    config_file.write_text(
        head + '[[models]]\nname = "b"\npath = "b.pb"\n\n[[models]]\nname = "bad"\npath = "a.pb.nope"\n'
    )
    wait_for(lambda: server.get("/v2/models/b/ready").status_code == 200)
    wait_for(lambda: server.get("/v2/models/a/ready").status_code == 404)
    # a model that does not load leaves the others serving and says why
    r = server.get("/v2/models/bad/ready")
    assert r.status_code == 503 and "a.pb.nope not found" in r.json()["error"]
    assert server.post("/v1/models/b:run", json={"feeds": {"x": [[1.0, 1.0]]}}).status_code == 200
    # a label changed in the file: no reload
    entry = server.service.model("b")
    config_file.write_text(head + '[[models]]\nname = "b"\npath = "b.pb"\nlabels = {canary = 1}\n')
    wait_for(lambda: server.get("/v1/models/b/labels/canary").status_code == 200)
    assert server.service.model("b") is entry
    # a config that does not validate changes nothing
    config_file.write_text(head + '[[models]]\nname = "b"\n')
    wait_for(lambda: bool(server.service.repository.config_error))
    assert "path" in server.service.repository.config_error
    assert server.get("/v2/models/b/ready").status_code == 200


def test_a_load_call_with_an_invalid_config_file_answers_400_naming_the_error(
    tmp_path: Path, serve: Callable[[Config], Loopback]
) -> None:
    add_graph(tmp_path / "a.pb", 2.0)
    config_file = tmp_path / "server.toml"
    good = '[server]\npoll_seconds = 0\n[[models]]\nname = "a"\npath = "a.pb"\n'
    config_file.write_text(good)
    server = serve(load_config(config_file))
    config_file.write_text(good + "typo = 1\n")  # the load call re-reads it; its error went to the log only
    r = server.post("/v2/repository/models/a/load")
    assert r.status_code == 400, r.text
    assert "not loading 'a'" in r.json()["error"] and "server.toml" in r.json()["error"]
    assert "typo" in r.json()["error"]
    assert server.get("/v2/models/a/ready").status_code == 200  # what was loaded keeps serving
    config_file.write_text(good)
    assert server.post("/v2/repository/models/a/load").status_code == 200


# --- readiness ----------------------------------------------------------------------------------------------------


def test_a_model_that_failed_to_load_makes_the_server_unready(tmp_path: Path) -> None:
    """Triton's strict readiness (its default): the server is ready while every model of the config
    serves; a model unloaded by a call is as asked. TF Serving's status gives the model's state."""
    add_graph(tmp_path / "a.pb", 2.0)
    config_file = tmp_path / "server.toml"
    good = f'[server]\npoll_seconds = {POLL}\n[[models]]\nname = "a"\npath = "a.pb"\n'
    config_file.write_text(good)
    server = ServerProcess(config_file, tmp_path / "server.log")
    try:
        # closed however the test ends: a client left open is reported in whichever later test collects it
        with (
            httpx.Client(base_url=server.url, timeout=10) as http,
            grpc.insecure_channel(server.grpc_address) as channel,
        ):
            kserve = grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)
            (tmp_path / "b.pb").write_bytes(b"")  # a failed load: a GraphDef with no nodes
            config_file.write_text(good + '[[models]]\nname = "b"\npath = "b.pb"\n')
            # the server is unready from when b starts loading ("it is loading") until it failed
            wait_for(lambda: "no nodes" in http.get("/v2/health/ready").text)
            for path in ("/v2/health/ready", "/v1/health/ready"):
                error = http.get(path).json()["error"]
                assert "model 'b' is not ready" in error and "no nodes" in error, error
            assert not kserve.ServerReady(grpc_service_pb2.ServerReadyRequest(), timeout=10).ready
            assert kserve.ModelReady(grpc_service_pb2.ModelReadyRequest(name="a"), timeout=10).ready
            assert not kserve.ModelReady(grpc_service_pb2.ModelReadyRequest(name="b"), timeout=10).ready
            assert http.get("/v2/models/a/ready").status_code == 200
            assert http.get("/v2/models/b/ready").status_code == 503
            [status] = http.get("/v1/models/b").json()["model_version_status"]
            assert status["state"] == "END" and "no nodes" in status["status"]["error_message"]
            assert http.post("/v1/models/a:run", json={"feeds": {"x": [[1.0, 1.0]]}}).status_code == 200

            assert http.post("/v2/repository/models/b/unload").status_code == 200
            assert http.get("/v2/health/ready").status_code == 200
            assert kserve.ServerReady(grpc_service_pb2.ServerReadyRequest(), timeout=10).ready
            add_graph(tmp_path / "b.pb", 3.0)
            assert http.post("/v2/repository/models/b/load").status_code == 200
            assert http.get("/v2/health/ready").status_code == 200
    finally:
        server.stop()


def test_strict_readiness_off_reports_ready_whatever_the_models(
    tmp_path: Path, serve: Callable[[Config], Loopback]
) -> None:
    add_graph(tmp_path / "a.pb", 2.0)
    config_file = tmp_path / "server.toml"
    good = (
        f'[server]\npoll_seconds = {POLL}\nstrict_readiness = false\n[[models]]\nname = "a"\npath = "a.pb"\n'
    )
    config_file.write_text(good)
    server = serve(load_config(config_file))
    config_file.write_text(good + '[[models]]\nname = "b"\npath = "b.pb.nope"\n')
    wait_for(lambda: server.get("/v2/models/b/ready").status_code == 503)
    assert server.get("/v2/health/ready").status_code == 200
    assert server.get("/v1/health/ready").status_code == 200


# --- the repository extension -----------------------------------------------------------------------------------


def test_repository_index_load_and_unload_need_the_admin_token(
    tmp_path: Path, serve: Callable[[Config], Loopback]
) -> None:
    base = tmp_path / "m"
    base.mkdir()
    put_version(base, 1)
    config = linear_config(base, poll=0)
    config.server.admin_token = TOKEN
    server = serve(config)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert server.post("/v2/repository/index").status_code == 401
    assert server.post("/v2/repository/index", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert server.post("/v2/repository/models/m/unload").status_code == 401
    assert "model_repository" in server.get("/v2").json()["extensions"]

    r = server.post("/v2/repository/index", headers=auth)
    assert r.status_code == 200
    assert r.json() == [{"name": "m", "version": "1", "state": "READY", "reason": ""}]
    assert server.post("/v2/repository/models/m/unload", headers=auth).status_code == 200
    r = server.post("/v2/models/m/infer", json=infer_body())
    assert r.status_code == 503 and "unloaded" in r.json()["error"]
    wait_for(lambda: server.post("/v2/repository/index", headers=auth).json()[0]["state"] == "UNAVAILABLE")
    # the version the call unloaded, as Triton's index names it
    assert server.post("/v2/repository/index", headers=auth).json() == [
        {"name": "m", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded by a repository call"}
    ]
    assert server.post("/v2/repository/index", headers=auth, json={"ready": True}).json() == []
    put_version(base, 2)  # loaded by the call (polling is off), as the version policy says
    assert server.post("/v2/repository/models/m/load", headers=auth).status_code == 200
    r = server.post("/v2/models/m/infer", json=infer_body())
    assert r.status_code == 200 and r.json()["model_version"] == "2"
    for verb in ("load", "unload"):
        r = server.post(f"/v2/repository/models/nope/{verb}", headers=auth)
        assert r.status_code == 404 and "'nope' is not in the config" in r.json()["error"]
    r = server.post("/v2/repository/models/m/load", headers=auth, json={"parameters": {"config": "{}"}})
    assert r.status_code == 501


def test_repository_calls_without_a_token_configured_and_a_failed_load(
    tmp_path: Path, serve: Callable[[Config], Loopback]
) -> None:
    pb = tmp_path / "add.pb"
    add_graph(pb, 2.0)
    server = serve(make_config({"server": {"poll_seconds": 0}, "models": [{"name": "add", "path": str(pb)}]}))
    assert server.post("/v2/repository/index").json()[0]["state"] == "READY"
    pb.write_bytes(b"garbage")
    r = server.post("/v2/repository/models/add/load")
    assert r.status_code == 400 and "failed to load 'add'" in r.json()["error"]
    # the loaded version keeps serving, with the failed reload's error in its status
    assert server.post("/v1/models/add:run", json={"feeds": {"x": [[1.0, 1.0]]}}).status_code == 200
    [status] = server.get("/v1/models/add").json()["model_version_status"]
    assert status["state"] == "AVAILABLE" and status["status"]["error_message"]


def test_a_repeated_unload_keeps_the_unloaded_versions_in_the_index(
    tmp_path: Path, serve: Callable[[Config], Loopback]
) -> None:
    pb = tmp_path / "lin.pb"
    add_graph(pb, 2.0)
    models = [{"name": "lin", "path": str(pb), "version": 2}]
    server = serve(make_config({"server": {"poll_seconds": 0}, "models": models}))
    unloaded = [
        {"name": "lin", "version": "2", "state": "UNAVAILABLE", "reason": "unloaded by a repository call"}
    ]
    assert server.post("/v2/repository/models/lin/unload").status_code == 200
    wait_for(lambda: server.post("/v2/repository/index").json() == unloaded)
    assert server.post("/v2/repository/models/lin/unload").status_code == 200  # wiped the version list
    assert server.post("/v2/repository/index").json() == unloaded


def test_a_model_file_gone_while_it_is_fingerprinted_is_not_found(tmp_path: Path) -> None:
    # A poll that saw the file and then read no stat of it used to fingerprint nothing: a "change" that
    # started a load bound to fail, logged as a second error (a race seen in CI).
    pb = tmp_path / "a.pb"
    add_graph(pb, 2.0)
    assert fingerprint("a", pb)[1][1:] == (pb.stat().st_mtime_ns, pb.stat().st_size)
    pb.unlink()
    with pytest.raises(errors.NotFoundError, match=r"model 'a': .*a\.pb not found"):
        fingerprint("a", pb)
    with pytest.raises(errors.NotFoundError, match="not found"):
        fingerprint("a", tmp_path / "saved_model_gone")


def test_a_missing_model_file_is_logged_once_per_change(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="poolserve")
    pb = tmp_path / "a.pb"
    add_graph(pb, 2.0)
    repository = Repository(
        make_config({"server": {"poll_seconds": 0.01}, "models": [{"name": "a", "path": str(pb)}]}), {}
    )
    repository.start()

    def logged() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]

    try:
        pb.unlink()
        wait_for(lambda: bool(logged()))
        time.sleep(0.2)  # some 20 polls: it was an ERROR each, with the model named twice
        assert logged() == [f"model 'a': {pb} not found (its loaded versions keep serving)"]
        repository.unload("a")
        with pytest.raises(errors.FailedPreconditionError):
            repository.load("a")  # polled again, and nothing is loaded now
        wait_for(lambda: len(logged()) == 2)
        time.sleep(0.2)
        assert logged()[1:] == [f"model 'a': {pb} not found (no version of it is loaded)"]
        add_graph(pb, 2.0)
        wait_for(lambda: "a" in repository.models)
        assert "model 'a': its files are found again" in caplog.messages
    finally:
        repository.close()
