"""Admission (server/admission.py): the queue's measured cost decides at arrival, before the body is read;
the request's own timeout is checked again after decoding; deadlines count from arrival. Under uvicorn the
HTTP protocol decides at the end of the headers, and a refused request never reaches the app."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import httpx
import numpy as np
import pytest
import uvicorn
from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from support import GATES, Gate, free_port, gate_op, serve_in_thread, sleep_op

from poolserve.runtime.builder import GraphBuilder
from poolserve.server.admission import COST_ANSWERS, Admission, InferPaths
from poolserve.server.app import create_app
from poolserve.server.config import make_config
from poolserve.server.protocol import BODY_VIEW_KEY, WholeBody, protocol_factory

pytestmark = pytest.mark.anyio
STEP_S = 0.1


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[FastAPI]:
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [None, 3])
    b.identity(sleep_op(b, x, STEP_S, "nap"), name="out")
    (tmp_path / "nap.pb").write_bytes(b.graph_def.SerializeToString())
    app = create_app(make_config({"models": [{"name": "nap", "path": str(tmp_path / "nap.pb")}]}))
    async with app.router.lifespan_context(app):
        yield app


def client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t", timeout=10)


BODY = {"feeds": {"x": [[1.0, 2.0, 3.0]]}}


def test_the_work_ahead_of_a_ticket_counts_the_open_ones_up_to_it_at_each_models_cost() -> None:
    a = Admission()
    a.cost.update(m=0.1, n=0.5)
    tickets = [a.admit(model, 1.0, 1000, header=False) for model in ("m", "n", "m", "n", "m")]
    assert [a.ahead(t) for t in tickets] == pytest.approx([0.1, 0.6, 0.7, 1.2, 1.3])
    a.release(tickets[1], ok=False, now=1.5)  # answered: no longer ahead of anyone, nor counted itself
    assert [a.ahead(t) for t in tickets] == pytest.approx([0.1, 0.1, 0.2, 0.7, 0.8])
    assert a.ahead(a.admit("other", 1.0, 1000, header=False)) == pytest.approx(0.8)  # its own: unmeasured


def test_costs_are_measured_per_model_from_answers() -> None:
    a = Admission()
    assert a.decide("m", 0.0, 1000, 0.0) is None  # nothing measured: admitted
    t = a.admit("m", 10.0, 1000, header=False)
    a.release(t, ok=True, now=10.2)  # idle before it: its whole time
    assert a.cost["m"] == pytest.approx(0.2) and a.pending == 0
    a.cost["m"] = 5.0
    assert a.decide("m", 11.0, 1000, 11.0) is None  # an idle server admits, whatever its stale costs say
    a.cost["m"] = 0.1
    tickets = [a.admit("m", 11.0, 1000, header=False) for _ in range(4)]
    assert a.pending == pytest.approx(0.4)
    assert a.ahead(tickets[1]) == pytest.approx(0.2)  # the one before it, and itself
    # 0.4 s queued + 0.1 s own, with the margin, is past half of a 1 s deadline by about 75 ms
    assert a.decide("m", 11.0, 1000, 11.0) == pytest.approx(75, abs=2)
    assert a.decide("m", 11.0, 2000, 11.0) is None
    assert a.decide("other", 11.0, 1000, 11.0) is None  # an unmeasured model's own cost is 0
    a.release(tickets[0], ok=True, now=11.3)  # idle until it arrived at 11.0: 0.3 s
    assert a.cost["m"] == pytest.approx((0.2 + 0.3) / 2)  # the mean share of the answers so far
    assert a.pending == pytest.approx(3 * 0.25)  # the queue is valued at today's cost
    a.release(tickets[1], ok=True, now=11.4)  # busy before: the time since the previous answer, 0.1 s
    assert a.cost["m"] == pytest.approx((0.2 + 0.3 + 0.1) / 3)
    a.release(tickets[2], ok=False, now=11.45)  # failures free the queue but teach no cost
    assert a.cost["m"] == pytest.approx(0.2) and a.pending == pytest.approx(0.2)


def test_a_batch_answering_together_does_not_make_the_cost_look_free() -> None:
    # a batch answers its members at once: one share of the batch's time, then zeros. The cost stays the
    # batch's time per member (an exponential average of the last ~10 fell to a tenth of it)
    a = Admission()
    now = 0.0
    for _ in range(4):  # batches of 16 rows, 64 ms each: 4 ms per answer
        tickets = [a.admit("m", now, 1000, header=False) for _ in range(16)]
        now += 0.064
        for t in tickets:
            a.release(t, ok=True, now=now)
            assert a.cost["m"] >= 0.9 * 0.004 or len(a.shares["m"]) < 16
    assert a.cost["m"] == pytest.approx(0.004)
    # only the last COST_ANSWERS answers count: a server that got faster is believed soon
    for _ in range(COST_ANSWERS):
        t = a.admit("m", now, 1000, header=False)
        now += 0.001
        a.release(t, ok=True, now=now)
    assert a.cost["m"] == pytest.approx(0.001)


async def test_a_burst_is_shed_at_arrival_and_the_accepted_finish_in_time(app: FastAPI) -> None:
    async with client(app) as c:
        assert (await c.post("/v1/models/nap:run", json=BODY)).status_code == 200  # measures the cost
        start = time.monotonic()

        async def one() -> tuple[httpx.Response, float]:
            r = await c.post("/v1/models/nap:run", json=BODY, headers={"X-Request-Timeout-Ms": "500"})
            return r, time.monotonic() - start

        got = await asyncio.gather(*(one() for _ in range(20)))
        statuses = sorted(r.status_code for r, _ in got)
        assert set(statuses) == {200, 503}, statuses
        for r, _ in got:
            if r.status_code == 503:
                assert int(r.headers["Retry-After-Ms"]) >= 1 and int(r.headers["Retry-After"]) >= 1
                assert "cannot answer a 'nap' request within 500 ms" in r.json()["error"]
        state = (await c.get("/v1/runtime/admission")).json()
        assert state["shed"] == statuses.count(503) and state["admitted_open"] == 0
        assert state["cost_ms"]["nap"] >= STEP_S * 1000 * 0.5
        # the server's own latencies, from its arrival stamp: every 200 (the first one too) and each shed
        assert state["accepted"]["count"] == statuses.count(200) + 1
        assert state["accepted"]["p99_ms"] >= STEP_S * 1000
        assert state["shed_at_arrival"]["count"] <= statuses.count(503)


async def test_the_event_loop_lag_is_sampled_and_shows_a_blocked_loop(app: FastAPI) -> None:
    async with client(app) as c:  # the app's lifespan runs on this test's event loop
        await asyncio.sleep(0.1)
        time.sleep(0.3)  # the loop blocked: the timer due meanwhile runs late by about that
        await asyncio.sleep(0.05)
        lag = (await c.get("/v1/runtime/admission")).json()["loop_lag"]
    assert lag["count"] >= 3 and lag["p50_ms"] < 250 <= lag["p99_ms"]


def busy(app: FastAPI, cost_s: float) -> None:
    """The model is known to take ``cost_s`` and one request is in flight."""
    app.state.admission.cost["nap"] = cost_s
    app.state.admission.admit("nap", time.monotonic(), 30000, header=False)


async def test_shedding_happens_before_the_body_is_read(app: FastAPI) -> None:
    busy(app, 2.0)  # 2 s queued + 2 s own: a 1 s timeout cannot be met
    async with client(app) as c:
        r = await c.post("/v1/models/nap:run", content=b"{not json", headers={"X-Request-Timeout-Ms": "1000"})
        assert r.status_code == 503
        # (2 + 2) x 1.15 - 0.5 s (half the deadline): about 4.1 s to wait
        assert r.headers["Retry-After"] == "5" and 4000 < int(r.headers["Retry-After-Ms"]) <= 4200
        # without the header the default (30 s) admits it: the body is read and found malformed
        r = await c.post("/v1/models/nap:run", content=b"{not json")
        assert r.status_code == 400


async def test_the_body_timeout_is_checked_again_after_decoding(app: FastAPI) -> None:
    busy(app, 2.0)
    async with client(app) as c:
        body: dict[str, Any] = {**BODY, "run_options": {"timeout_in_ms": 1000}}
        r = await c.post("/v1/models/nap:run", json=body)  # admitted on the default, shed once decoded
        assert r.status_code == 503 and "within the request's 1000 ms" in r.json()["error"]
        assert int(r.headers["Retry-After-Ms"]) > 0
        kserve = {"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}],
                  "parameters": {"timeout": 1_000_000}}  # fmt: skip
        r = await c.post("/v2/models/nap/infer", json=kserve)
        assert r.status_code == 503


async def test_an_idle_server_admits_a_decoded_request_whose_own_cost_passes_its_timeout(
    app: FastAPI,
) -> None:
    # the model is known to take 2 s and nothing is in flight: a retry would find the same server, so
    # the request runs, and its step stops at its deadline (504), with no 503 "retry later"
    app.state.admission.cost["nap"] = 2.0
    async with client(app) as c:
        body: dict[str, Any] = {**BODY, "run_options": {"timeout_in_ms": 30}}
        r = await c.post("/v1/models/nap:run", json=body)
        assert r.status_code == 504 and "Retry-After" not in r.headers, r.text
        kserve = {"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}],
                  "parameters": {"timeout": 1_000_000}}  # fmt: skip
        r = await c.post("/v2/models/nap/infer", json=kserve)
        assert r.status_code == 200, r.text
    assert app.state.admission.shed == 0


async def test_the_header_timeout_applies_when_the_body_sets_none(app: FastAPI) -> None:
    async with client(app) as c:
        r = await c.post("/v1/models/nap:run", json=BODY, headers={"X-Request-Timeout-Ms": "20"})
        assert r.status_code == 504 and "20 ms" in r.json()["error"]
        body = {**BODY, "run_options": {"timeout_in_ms": 5000}}  # the body's own wins
        r = await c.post("/v1/models/nap:run", json=body, headers={"X-Request-Timeout-Ms": "20"})
        assert r.status_code == 200


async def test_a_deadline_names_the_setting_the_client_used(app: FastAPI) -> None:
    # each became RunOptions.timeout_in_ms, which the message named whatever the client had set
    kserve = {"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}]}
    asks = [
        ("/v1/models/nap:run", BODY, {"X-Request-Timeout-Ms": "20"}, "(the X-Request-Timeout-Ms header)"),
        ("/v2/models/nap/infer", kserve, {"X-Request-Timeout-Ms": "20"}, "(the X-Request-Timeout-Ms header)"),
        ("/v2/models/nap/infer", {**kserve, "parameters": {"timeout": 20_000}}, {}, "(KServe's 'timeout' parameter)"),
        ("/v1/models/nap:predict", {"instances": [[1, 2, 3]]}, {"X-Request-Timeout-Ms": "20"},
         "(the X-Request-Timeout-Ms header)"),
        ("/v1/models/nap:run", {**BODY, "run_options": {"timeout_in_ms": 20}}, {}, "(RunOptions.timeout_in_ms)"),
    ]  # fmt: skip
    async with client(app) as c:
        for path, body, headers, source in asks:
            r = await c.post(path, json=body, headers=headers)
            assert r.status_code == 504 and source in r.json()["error"], (path, r.text)


async def test_the_timeout_header_applies_with_shedding_off(tmp_path: Path) -> None:
    # with shed = false and no per-client limit admission watches no request: the header went unread
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [None, 3])
    b.identity(sleep_op(b, x, STEP_S, "nap"), name="out")
    (tmp_path / "nap.pb").write_bytes(b.graph_def.SerializeToString())
    config = {"server": {"shed": False}, "models": [{"name": "nap", "path": str(tmp_path / "nap.pb")}]}
    app = create_app(make_config(config))
    async with app.router.lifespan_context(app), client(app) as c:
        r = await c.post("/v1/models/nap:run", json=BODY, headers={"X-Request-Timeout-Ms": "20"})
        assert r.status_code == 504 and "(the X-Request-Timeout-Ms header)" in r.json()["error"], r.text
        r = await c.post("/v1/models/nap:run", json=BODY, headers={"X-Request-Timeout-Ms": "soon"})
        assert r.status_code == 400 and "X-Request-Timeout-Ms must be a positive integer" in r.text
        r = await c.post("/v1/models/nap:run", json=BODY)
        assert r.status_code == 200


async def test_a_bad_timeout_header_gets_400_and_a_huge_one_is_capped(app: FastAPI) -> None:
    async with client(app) as c:
        for bad in ("soon", "-5", "0", "1.5"):
            r = await c.post("/v1/models/nap:run", json=BODY, headers={"X-Request-Timeout-Ms": bad})
            assert (
                r.status_code == 400
                and "X-Request-Timeout-Ms must be a positive integer" in r.json()["error"]
            )
        r = await c.post("/v1/models/nap:run", json=BODY, headers={"X-Request-Timeout-Ms": "9" * 30})
        assert r.status_code == 200


async def test_a_deadline_that_passed_before_the_app_ran_gets_504(app: FastAPI) -> None:
    sent: list[dict[str, Any]] = []
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": "/v1/models/nap:run", "raw_path": b"/v1/models/nap:run", "query_string": b"", "root_path": "",
        "headers": [(b"x-request-timeout-ms", b"100")], "client": ("127.0.0.1", 1), "server": ("t", 80),
        "poolserve.arrival": time.monotonic() - 0.2,  # the protocol read its headers 200 ms ago
    }  # fmt: skip

    async def receive() -> dict[str, Any]:
        raise AssertionError("the body must not be read")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    assert sent[0]["status"] == 504
    assert b"passed before the request was read" in sent[1]["body"]


async def test_a_client_past_its_in_flight_limit_gets_429_and_others_are_served(tmp_path: Path) -> None:
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [None, 3])
    b.identity(gate_op(b, x, "hold")[0], name="out")  # admitted requests stay in flight until it opens
    (tmp_path / "hold.pb").write_bytes(b.graph_def.SerializeToString())
    config = {
        "server": {"max_in_flight_per_client": 2},
        "models": [{"name": "hold", "path": str(tmp_path / "hold.pb")}],
    }
    app = create_app(make_config(config))
    async with app.router.lifespan_context(app), client(app) as c:

        async def one(who: str | None) -> httpx.Response:
            headers = {"X-Client-Id": who} if who is not None else {}
            return await c.post("/v1/models/hold:run", json=BODY, headers=headers)

        async def round_of(clients: list[str | None], refused: int) -> list[int]:
            """Sends one request per entry; once ``refused`` answers came back, opens the gate."""
            gate = GATES["hold"] = Gate()
            tasks = [asyncio.ensure_future(one(who)) for who in clients]
            for _ in range(500):  # the refusals come back at once, the others wait for the gate
                if sum(t.done() for t in tasks) >= refused:
                    break
                await asyncio.sleep(0.01)
            gate.open()
            return [(await t).status_code for t in tasks]

        got = await round_of(["greedy"] * 5 + ["polite"] * 2, refused=3)
        assert sorted(got[:5]) == [200, 200, 429, 429, 429]
        assert got[5:] == [200, 200]  # its own limit, untouched by greedy's
        r = await c.post("/v1/models/hold:run", json=BODY, headers={"X-Client-Id": "greedy"})
        assert r.status_code == 200  # answered requests freed its slots
        state = (await c.get("/v1/runtime/admission")).json()
        assert state["throttled"] == 3 and state["clients_open"] == 0 and state["admitted_open"] == 0
        # without the header, the peer's address is the client: one limit for all of them
        assert sorted(await round_of([None] * 3, refused=1)) == [200, 200, 429]


# --- at the end of the headers, inside the HTTP protocol ---------------------------------------------------

NAP_ROUTES = [
    "/v1/models/nap:run",
    "/v1/models/nap/versions/1:run",
    "/v1/models/nap:predict",
    "/v1/models/nap/versions/1:predict",
    "/v1/models/nap/labels/stable:predict",
    "/v2/models/nap/infer",
    "/v2/models/nap/versions/1/infer",
]


def test_the_inference_paths_give_the_model_and_the_route_template(tmp_path: Path) -> None:
    paths = InferPaths([r.path for r in make_app(tmp_path).hot_routes])  # type: ignore[attr-defined]
    assert paths.match("/v1/models/nap:run") == ("nap", "/v1/models/{model}:run")
    assert paths.match("/v1/models/nap/labels/stable:predict") == (
        "nap",
        "/v1/models/{model}/labels/{label}:predict",
    )
    assert paths.match("/v2/models/nap/versions/7/infer") == (
        "nap",
        "/v2/models/{model}/versions/{version}/infer",
    )
    for other in ("/v2/models/nap:run", "/v1/models/nap/labels/x:run", "/v1/models/a/b:run", "/v1/models/nap",
                  "/v1/sessions/abc:run", "/v1/models/nap:runx", "/v2/models/nap/infer/"):  # fmt: skip
        assert paths.match(other) is None, other
    assert all(paths.match(p) is not None for p in NAP_ROUTES)


class Seen:
    """The app, noting the path of every HTTP request that reaches it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.paths: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.paths.append(scope["path"])
        await self.app(scope, receive, send)


class Served:
    """The app under uvicorn with poolserve's protocol and its admission gate, on 127.0.0.1 in a thread."""

    def __init__(self, app: FastAPI, keep_alive_s: int = 5) -> None:
        self.app = app
        self.admission: Admission = app.state.admission
        self.seen = Seen(app)
        self.port = free_port()
        config = app.state.service.config
        self.server = uvicorn.Server(
            uvicorn.Config(
                self.seen,
                host="127.0.0.1",
                port=self.port,
                log_level="warning",
                lifespan="on",
                timeout_keep_alive=keep_alive_s,
                http=protocol_factory(config.server, app.state.early_admission),
            )
        )
        self.thread = serve_in_thread(self.server)

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=10)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


def make_app(tmp_path: Path, **server: Any) -> FastAPI:
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [None, 3])
    b.identity(sleep_op(b, x, 0.01, "nap"), name="out")
    (tmp_path / "nap.pb").write_bytes(b.graph_def.SerializeToString())
    model = {"name": "nap", "path": str(tmp_path / "nap.pb")}
    return create_app(make_config({"server": server, "models": [model]}))


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    s = Served(make_app(tmp_path))
    yield s
    s.stop()


def settled(admission: Admission, seconds: float = 5.0) -> Admission:
    """The admission once its tickets are freed: the server frees a ticket just after the answer's send,
    which a client in another thread can read first."""
    end = time.monotonic() + seconds
    while admission.open and time.monotonic() < end:
        time.sleep(0.005)
    return admission


class Taken:
    """A request's ``WholeBody`` that records what the app takes through it (the inference routes take a
    large body whole, as a view of the protocol's buffer, without receive())."""

    def __init__(self, whole: WholeBody, bodies: list[bytes]) -> None:
        self.whole, self.bodies = whole, bodies

    async def wait(self) -> None:
        await self.whole.wait()

    def take(self) -> memoryview | None:
        view = self.whole.take()
        if view is not None:
            self.bodies.append(bytes(view))
        return view


def read_answer(answers: BinaryIO) -> tuple[int, dict[str, str], dict[str, Any]]:
    """The next HTTP/1.1 answer (with a Content-Length body) of a connection (its ``makefile("rb")``):
    status, headers (lower-case names), JSON body."""
    status = answers.readline()
    assert status.startswith(b"HTTP/1.1 "), f"not an answer: {status!r}"
    headers = {}
    while (line := answers.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    body = answers.read(int(headers["content-length"]))
    return int(status.split()[1]), headers, json.loads(body)


def head_of(path: str, length: int, *extra: str) -> bytes:
    lines = [
        f"POST {path} HTTP/1.1",
        "Host: t",
        "Content-Type: application/json",
        f"Content-Length: {length}",
    ]
    return ("\r\n".join([*lines, *extra]) + "\r\n\r\n").encode()


NAP_BODY = json.dumps(BODY).encode()


def test_a_refused_request_is_answered_at_its_headers_and_its_body_never_read(served: Served) -> None:
    busy(served.app, 2.0)  # 2 s queued + 2 s own: a 1 s timeout cannot be met
    with served.connect() as s, s.makefile("rb") as f:
        # a body of a megabyte announced and not sent: the answer does not wait for it
        s.sendall(
            head_of("/v1/models/nap:run", 1_000_000, "X-Request-Timeout-Ms: 1000", "X-Request-Id: shed-1")
        )
        status, headers, body = read_answer(f)
        assert status == 503 and body["code"] == "UNAVAILABLE"
        assert "cannot answer a 'nap' request within 1000 ms" in body["error"]
        assert headers["retry-after"] == "5" and 4000 < int(headers["retry-after-ms"]) <= 4200
        assert headers["x-request-id"] == "shed-1" and headers["content-type"] == "application/json"
        assert "connection" not in headers  # kept alive
        assert served.seen.paths == []  # the app never saw it
        # the body comes after all: it is dropped as it arrives, and the connection serves the next request
        for _ in range(10):
            s.sendall(b"x" * 100_000)
        s.sendall(b"GET /v1/health/live HTTP/1.1\r\nHost: t\r\n\r\n")
        assert read_answer(f)[::2] == (200, {"live": True})
    assert served.seen.paths == ["/v1/health/live"]
    r = httpx.get(f"http://127.0.0.1:{served.port}/metrics", timeout=10)
    line = 'poolserve_requests_total{endpoint="/v1/models/{model}:run",model="nap",status="503"} 1.0'
    assert line in r.text and "poolserve_rejected_total 1.0" in r.text


def test_every_inference_route_is_refused_as_the_app_refuses_it(served: Served, tmp_path: Path) -> None:
    """The protocol's answer is the middleware's: the same status, headers and error, for every route."""
    (tmp_path / "asgi").mkdir()
    other = make_app(tmp_path / "asgi")  # the same app, answering through its middleware only
    busy(served.app, 2.0)
    busy(other, 2.0)

    async def by_the_app(path: str) -> httpx.Response:
        async with client(other) as c:
            return await c.post(path, content=NAP_BODY, headers={"X-Request-Timeout-Ms": "1000"})

    with served.connect() as s, s.makefile("rb") as f:
        for path in NAP_ROUTES:
            s.sendall(head_of(path, len(NAP_BODY), "X-Request-Timeout-Ms: 1000") + NAP_BODY)
            status, headers, body = read_answer(f)
            expected = asyncio.run(by_the_app(path))
            assert status == expected.status_code == 503, path
            assert set(headers) - {"date", "server"} == set(expected.headers), path
            assert (
                body["code"] == expected.json()["code"]
                and body["error"][:60] == expected.json()["error"][:60]
            )
    assert served.seen.paths == []
    state = httpx.get(f"http://127.0.0.1:{served.port}/v1/runtime/admission", timeout=10).json()
    assert state["shed"] == len(NAP_ROUTES) and state["shed_at_arrival"]["count"] == len(NAP_ROUTES)


def test_a_deadline_passed_while_the_headers_came_is_504_without_the_app(served: Served) -> None:
    with served.connect() as s, s.makefile("rb") as f:
        s.sendall(b"POST /v1/models/nap:run HTTP/1.1\r\nHost: t\r\n")  # the arrival
        time.sleep(0.3)
        s.sendall(b"X-Request-Timeout-Ms: 100\r\nContent-Length: 5\r\n\r\n")
        status, headers, body = read_answer(f)
        assert status == 504 and "passed before the request was read" in body["error"]
        assert "retry-after" not in headers and len(headers["x-request-id"]) == 32
        s.sendall(b"xxxxx" + head_of("/v1/models/nap:run", len(NAP_BODY)) + NAP_BODY)  # the same connection
        assert read_answer(f)[0] == 200
    assert served.seen.paths == ["/v1/models/nap:run"]
    assert settled(served.admission).open == {} and served.admission.pending == 0


def test_a_client_over_its_limit_gets_429_from_the_protocol(tmp_path: Path) -> None:
    served = Served(make_app(tmp_path, max_in_flight_per_client=1))
    try:
        held = served.admission.admit("nap", time.monotonic(), 30000, header=False, client="greedy")
        served.admission.cost["nap"] = 0.5
        with served.connect() as s, s.makefile("rb") as f:
            s.sendall(head_of("/v1/models/nap:run", len(NAP_BODY), "X-Client-Id: greedy") + NAP_BODY)
            status, headers, body = read_answer(f)
            assert status == 429 and body["code"] == "RESOURCE_EXHAUSTED" and "'greedy'" in body["error"]
            assert headers["retry-after"] == "1" and int(headers["retry-after-ms"]) > 0
            s.sendall(head_of("/v1/models/nap:run", len(NAP_BODY), "X-Client-Id: polite") + NAP_BODY)
            assert read_answer(f)[0] == 200
        assert served.seen.paths == ["/v1/models/nap:run"]  # polite's
        served.admission.release(held, ok=False, now=time.monotonic())
        assert served.admission.open == {} and not served.admission.clients
        assert served.admission.throttled == 1
    finally:
        served.stop()


def test_a_refusal_closes_the_connection_when_the_client_waits_to_send_its_body(served: Served) -> None:
    busy(served.app, 2.0)
    with (
        served.connect() as s,
        s.makefile("rb") as f,
    ):  # Expect: 100-continue: the client sends no body until told to
        s.sendall(head_of("/v1/models/nap:run", 1000, "Expect: 100-continue", "X-Request-Timeout-Ms: 1000"))
        status, headers, _ = read_answer(f)
        assert status == 503 and headers["connection"] == "close"
        assert f.read(1) == b""  # closed, and no 100 Continue was sent
    with served.connect() as s, s.makefile("rb") as f:  # the client asked for the connection to close
        s.sendall(head_of("/v1/models/nap:run", 0, "Connection: close", "X-Request-Timeout-Ms: 1000"))
        status, headers, _ = read_answer(f)
        assert status == 503 and headers["connection"] == "close" and f.read(1) == b""


def test_a_connection_idle_after_a_refused_body_is_closed_as_any_idle_one(tmp_path: Path) -> None:
    served = Served(make_app(tmp_path), keep_alive_s=1)
    try:
        busy(served.app, 2.0)
        with served.connect() as s, s.makefile("rb") as f:
            s.sendall(head_of("/v1/models/nap:run", 5000, "X-Request-Timeout-Ms: 1000"))
            assert read_answer(f)[0] == 503
            time.sleep(0.2)
            s.sendall(b"x" * 5000)  # the body, after the answer: its bytes stop the keep-alive timer
            start = time.monotonic()
            assert f.read(1) == b""  # the timer starts again once the body is in: closed as idle
            assert time.monotonic() - start < 8
    finally:
        served.stop()


def test_pipelined_requests_around_a_refusal_are_answered_in_order(served: Served) -> None:
    busy(served.app, 2.0)
    with served.connect() as s, s.makefile("rb") as f:
        s.sendall(
            b"GET /v1/health/live HTTP/1.1\r\nHost: t\r\n\r\n"
            + head_of("/v2/models/nap/infer", 7, "X-Request-Timeout-Ms: 1000")
            + b"{bad js"
            + b"GET /v1/health/ready HTTP/1.1\r\nHost: t\r\n\r\n"
        )
        assert [read_answer(f)[0] for _ in range(3)] == [200, 503, 200]
    assert served.seen.paths == ["/v1/health/live", "/v1/health/ready"]


def test_a_refused_body_is_dropped_by_its_length_whatever_it_holds_and_however_it_comes(
    served: Served,
) -> None:
    """Past the part that came with the headers, a refused body is counted off the reads, unparsed: its
    Content-Length alone says where the next request starts, even when that request comes in the same
    read and the body looks like requests itself."""
    busy(served.app, 2.0)
    fake = b"GET /v1/health/ready HTTP/1.1\r\nHost: t\r\n\r\n"
    body = fake * 8000  # 344 KB of requests that are not
    live = b"GET /v1/health/live HTTP/1.1\r\nHost: t\r\n\r\n"
    with served.connect() as s, s.makefile("rb") as f:
        for _ in range(2):  # the connection's parser is fresh after a dropped body: a second round works
            s.sendall(head_of("/v1/models/nap:run", len(body), "X-Request-Timeout-Ms: 1000") + body[:1000])
            assert read_answer(f)[0] == 503
            s.sendall(body[1000:1001])
            s.sendall(body[1001:200_000])
            s.sendall(body[200_000:] + live)  # the body's end and the next request in one send
            assert read_answer(f)[::2] == (200, {"live": True})
        s.sendall(head_of("/v1/models/nap:run", 0, "X-Request-Timeout-Ms: 1000"))  # no body to drop
        assert read_answer(f)[0] == 503
        s.sendall(live)
        assert read_answer(f)[0] == 200
    assert served.seen.paths == ["/v1/health/live"] * 3


def test_an_admitted_body_reaches_the_app_whole_and_a_chunked_one_as_it_comes(tmp_path: Path) -> None:
    """An admitted request of declared length gets its body in one message, however the client sends
    it (uvicorn alone hands it over 64 KiB at a time); a chunked body has no declared length, so it comes
    as it arrives and the app's size limit stops it while it is read."""
    served = Served(make_app(tmp_path, max_request_bytes=200_000))
    messages: list[int] = []
    taken: list[bytes] = []
    app = served.seen.app

    async def recording(scope: Scope, receive: Receive, send: Send) -> None:
        async def counted() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                messages.append(len(message["body"]))
            return message

        if BODY_VIEW_KEY in scope:
            scope[BODY_VIEW_KEY] = Taken(scope[BODY_VIEW_KEY], taken)
        await app(scope, counted, send)

    served.seen.app = recording
    try:
        body = NAP_BODY + b" " * 150_000  # JSON may end in blanks
        with served.connect() as s, s.makefile("rb") as f:
            s.sendall(head_of("/v1/models/nap:run", len(body)) + body[:1000])
            for piece in (body[1000:70_000], body[70_000:140_000], body[140_000:]):
                time.sleep(0.05)
                s.sendall(piece)
            assert read_answer(f)[0] == 200
            assert messages == [] and taken == [body]  # whole, and taken as the buffer it was read into
            s.sendall(b"POST /v1/models/nap:run HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
            for _ in range(6):
                time.sleep(0.05)
                s.sendall(b"%x\r\n" % 50_000 + b" " * 50_000 + b"\r\n")
            status, _, answer = read_answer(f)
            assert status == 413 and "max_request_bytes (200000)" in answer["error"]
            assert len(messages) >= 4 and sum(messages) <= 250_000
    finally:
        served.stop()


def test_a_large_admitted_body_read_past_the_parser_is_the_one_sent_and_the_next_request_follows(
    tmp_path: Path,
) -> None:
    """The rest of a large admitted body is read straight into a buffer of its declared length, past the
    parser: the app gets exactly the bytes sent (taken whole from that buffer), however they are split,
    and the next request, sent in the same write as the body's end, is parsed and answered after it."""
    served = Served(make_app(tmp_path))
    bodies: list[bytes] = []
    app = served.seen.app

    async def recording(scope: Scope, receive: Receive, send: Send) -> None:
        parts: list[bytes] = []

        async def kept() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                parts.append(message["body"])
                if not message.get("more_body"):
                    bodies.append(b"".join(parts))
            return message

        if BODY_VIEW_KEY in scope:
            scope[BODY_VIEW_KEY] = Taken(scope[BODY_VIEW_KEY], bodies)
        await app(scope, kept, send)

    served.seen.app = recording
    rng = np.random.default_rng(7)
    blanks = np.frombuffer(b" \t\r\n", np.uint8)  # JSON's whitespace: each byte's place is checked
    try:
        with served.connect() as s, s.makefile("rb") as f:
            for size, cuts in ((300_000, (500, 70_001, 200_000)), (1_000_000, (90_000, 650_000))):
                body = NAP_BODY + blanks[rng.integers(0, 4, size)].tobytes()
                data = (
                    head_of("/v1/models/nap:run", len(body))
                    + body
                    + head_of("/v1/models/nap:run", len(NAP_BODY))
                    + NAP_BODY
                )
                for a, b in zip((0, *cuts), (*cuts, len(data)), strict=True):
                    s.sendall(data[a:b])
                    time.sleep(0.02)
                assert read_answer(f)[0] == 200
                assert read_answer(f)[0] == 200
                assert bodies == [body, NAP_BODY]
                bodies.clear()
    finally:
        served.stop()


def test_admitted_requests_free_their_tickets_whoever_answers_them(served: Served) -> None:
    gate = served.app.state.early_admission
    with served.connect() as s, s.makefile("rb") as f:
        for _ in range(3):
            s.sendall(head_of("/v1/models/nap:run", len(NAP_BODY)) + NAP_BODY)
            assert read_answer(f)[0] == 200
        # one whose body is malformed: admitted, answered 400 by the app
        s.sendall(head_of("/v1/models/nap:run", 7) + b"{bad js")
        assert read_answer(f)[0] == 400
    assert served.seen.paths == ["/v1/models/nap:run"] * 4
    assert settled(served.admission).open == {} and served.admission.cost["nap"] > 0
    # the ticket the protocol gives is freed when the request's task ends, should the app not free it
    scope = {"type": "http", "method": "POST", "path": "/v1/models/nap:run", "headers": [],
             "client": ("127.0.0.1", 1), "poolserve.arrival": time.monotonic()}  # fmt: skip
    done = gate(scope)
    assert callable(done) and len(served.admission.open) == 1
    done()
    assert served.admission.open == {}
    done()  # freed once only
    assert served.admission.open == {} and served.admission.pending == 0


def test_a_large_binary_tensor_is_taken_as_an_aligned_view_and_answered_without_joining(
    tmp_path: Path,
) -> None:
    """A KServe binary body read whole by the protocol is taken as a read-only view of its buffer, laid out
    so that the tensor after the JSON header (whatever the header's length) is 64-byte aligned: the model
    reads it in place, with no copy. The binary answer goes out as its header and the output's own bytes,
    one after the other, and reads back as the same numbers, as does the JSON answer to the same input."""
    served = Served(make_app(tmp_path))
    taken: list[bytes] = []
    offsets: list[int] = []
    app = served.seen.app

    async def recording(scope: Scope, receive: Receive, send: Send) -> None:
        whole = scope.get(BODY_VIEW_KEY)
        if whole is not None:
            recorded = Taken(whole, taken)
            take = recorded.take

            def take_and_check() -> memoryview | None:
                view = take()
                if view is not None:
                    assert view.readonly
                    length = int(dict(scope["headers"])[b"inference-header-content-length"])
                    offsets.append(np.frombuffer(view, np.uint8)[length:].ctypes.data % 64)
                return view

            recorded.take = take_and_check  # type: ignore[method-assign]
            scope[BODY_VIEW_KEY] = recorded
        await app(scope, receive, send)

    served.seen.app = recording
    # 480 KB: more than one read (256 KiB) holds, so that the rest is read straight into the body's buffer
    x = np.random.default_rng(5).standard_normal((40_000, 3)).astype(np.float32)
    sent: list[bytes] = []
    try:
        with served.connect() as s, s.makefile("rb") as f:
            for pad in (0, 1, 7, 63):  # header lengths that put the tensor at every kind of offset
                head = json.dumps(
                    {
                        "id": "p" * pad,
                        "inputs": [
                            {
                                "name": "x",
                                "shape": [40_000, 3],
                                "datatype": "FP32",
                                "parameters": {"binary_data_size": x.nbytes},
                            },
                        ],
                        "parameters": {"binary_data_output": True},
                    }
                ).encode()
                body = head + x.tobytes()
                sent.append(body)
                s.sendall(
                    head_of(
                        "/v2/models/nap/infer",
                        len(body),
                        f"Inference-Header-Content-Length: {len(head)}",
                    ).replace(b"application/json", b"application/octet-stream")
                    + body
                )
                status = f.readline()
                assert status.startswith(b"HTTP/1.1 200"), status
                headers = {}
                while (line := f.readline()) != b"\r\n":
                    name, _, value = line.decode("latin-1").partition(":")
                    headers[name.strip().lower()] = value.strip()
                answer = f.read(int(headers["content-length"]))
                length = int(headers["inference-header-content-length"])
                meta = json.loads(answer[:length])
                assert meta["outputs"][0]["parameters"]["binary_data_size"] == x.nbytes
                assert np.array_equal(np.frombuffer(answer[length:], np.float32).reshape(x.shape), x)
            assert taken == sent and offsets == [0, 0, 0, 0]
        small = x[:2]
        as_json = httpx.post(
            f"http://127.0.0.1:{served.port}/v2/models/nap/infer",
            json={
                "inputs": [{"name": "x", "shape": [2, 3], "datatype": "FP32", "data": small.ravel().tolist()}]
            },
        )
        assert as_json.status_code == 200
        assert np.array_equal(np.asarray(as_json.json()["outputs"][0]["data"], np.float32), small.ravel())
    finally:
        served.stop()


def test_an_admitted_client_that_waits_to_send_its_large_body_is_told_to_send_it(served: Served) -> None:
    """``Expect: 100-continue``: the client sends its body only after ``100 Continue``. An admitted request
    whose body is taken whole (``WholeBody``) is told so, as receive() tells it, then answered."""
    body = NAP_BODY + b" " * 300_000  # large enough to be read whole, past the parser
    with served.connect() as s, s.makefile("rb") as f:
        s.sendall(head_of("/v1/models/nap:run", len(body), "Expect: 100-continue"))
        assert f.readline() == b"HTTP/1.1 100 Continue\r\n" and f.readline() == b"\r\n"
        s.sendall(body)
        status, _, answer = read_answer(f)
        assert status == 200 and answer["outputs"]["out"]["shape"] == [1, 3]
