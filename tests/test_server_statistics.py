"""Triton's statistics extension (server/statistics.py): the counters, Triton's JSON, the workers' numbers
added up, and GET /v2/models[/{m}[/versions/{v}]]/stats on the real app and runtime. tritonclient's
get_inference_statistics is in test_server_tritonclient.py."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from test_server_kserve import calc_request, write_models

from poolserve.server.app import create_app
from poolserve.server.config import load_config
from poolserve.server.statistics import ModelStats, Statistics, write_numbers

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


class Phases:
    def __init__(self, received: float, decoded: float, started: float, computed: float) -> None:
        self.received_at, self.decoded_at, self.handler_at, self.compute_end = (
            received,
            decoded,
            started,
            computed,
        )


def duration(count: int, ns: int) -> dict[str, int]:
    return {"count": count, "ns": ns}


NONE = duration(0, 0)


def test_counters_in_tritons_json() -> None:
    stats = ModelStats()
    stats.succeeded(Phases(10.0, 10.001, 10.004, 10.010), end=10.012)  # 12 ms: 3 queued, 6 computing
    stats.succeeded(Phases(11.0, 11.002, 11.002, 11.003), end=11.004)
    stats.failed(12.0, 12.0005)
    stats.executed(1, 0.006)
    stats.executed(1, 0.001)
    stats.executed(4, 0.002)
    before = time.time()
    [got] = Statistics().report([("m", 3, stats)])["model_stats"]
    # ms since the epoch of the last answer (the failure, 12.0005 on the monotonic clock)
    last = got.pop("last_inference")
    assert abs(last - ((before - time.monotonic() + 12.0005) * 1000)) < 50
    assert got == {
        "name": "m",
        "version": "3",
        "inference_count": 6,
        "execution_count": 3,
        "inference_stats": {
            "success": duration(2, 16_000_000),
            "fail": duration(1, 500_000),
            "queue": duration(2, 3_000_000),
            "compute_input": NONE,
            "compute_infer": duration(2, 7_000_000),
            "compute_output": NONE,
            "cache_hit": NONE,
            "cache_miss": NONE,
        },
        "batch_stats": [
            {
                "batch_size": 1,
                "compute_input": NONE,
                "compute_infer": duration(2, 7_000_000),
                "compute_output": NONE,
            },
            {
                "batch_size": 4,
                "compute_input": NONE,
                "compute_infer": duration(1, 2_000_000),
                "compute_output": NONE,
            },
        ],
    }
    fresh = Statistics().report([("m", 1, ModelStats())])["model_stats"][0]
    assert fresh["last_inference"] == 0 and fresh["inference_stats"]["success"] == NONE


def test_a_worker_reports_every_workers_numbers(tmp_path: Path) -> None:
    """Under --workers each worker counts its own requests; the one asked adds the others' (their files in
    the shared folder) to its own, by model and version and batch size."""
    mine, theirs, gone = ModelStats(), ModelStats(), ModelStats()
    mine.succeeded(Phases(1.0, 1.0, 1.0, 1.001), 1.002)
    mine.executed(2, 0.001)
    theirs.succeeded(Phases(5.0, 5.0, 5.0, 5.004), 5.005)
    theirs.executed(2, 0.004)
    theirs.executed(8, 0.010)
    gone.failed(2.0, 2.5)
    folder = tmp_path / "statistics"
    folder.mkdir()
    write_numbers(folder / "111.json", [("m", 1, theirs), ("other", 1, theirs)])
    write_numbers(folder / "222.json", [("m", 1, gone), ("m", 2, gone)])  # a worker that has died
    (folder / "333.tmp").write_text("half a file")  # a worker writing: not read
    statistics = Statistics()
    statistics.share(folder, lambda: [("m", 1, mine)])
    try:
        [got] = statistics.report([("m", 1, mine)])["model_stats"]
        assert (got["inference_count"], got["execution_count"]) == (12, 3)
        assert got["inference_stats"]["success"] == duration(2, 7_000_000)
        assert got["inference_stats"]["fail"] == duration(1, 500_000_000)
        assert got["inference_stats"]["compute_infer"] == duration(2, 5_000_000)
        assert [(b["batch_size"], b["compute_infer"]) for b in got["batch_stats"]] == [
            (2, duration(2, 5_000_000)),
            (8, duration(1, 10_000_000)),
        ]
        assert abs(got["last_inference"] - theirs.numbers()["last_inference"]) <= 1  # the latest, in ms
    finally:
        statistics.close()
    # this worker's own file, written at close, for the others
    deadline = time.monotonic() + 5
    while not (folder / f"{os.getpid()}.json").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert (folder / f"{os.getpid()}.json").exists()


# --- the endpoints -----------------------------------------------------------------------------------------

CONFIG = """
[server]
default_timeout_ms = 20000

[[models]]
name = "calc"
path = "calc1.pb"
version = 1
[[models]]
name = "calc"
path = "calc2.pb"
version = 2

[[models]]
name = "stats"
path = "calc1.pb"

[[models]]
name = "batched"
path = "calc2.pb"
[models.batching]
max_batch_size = 8
preferred_batch_sizes = [4]
max_queue_delay_us = 5000000
"""


@pytest.fixture(scope="module")
async def client(tmp_path_factory: pytest.TempPathFactory) -> Any:
    folder = tmp_path_factory.mktemp("statistics")
    write_models(folder)
    (folder / "poolserve.toml").write_text(CONFIG)
    app = create_app(load_config(folder / "poolserve.toml"))
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://s") as c,
    ):
        yield c


async def stats_of(client: httpx.AsyncClient, path: str) -> list[dict[str, Any]]:
    r = await client.get(path)
    assert r.status_code == 200, r.text
    stats: list[dict[str, Any]] = r.json()["model_stats"]
    return stats


async def test_requests_of_every_protocol_count_for_their_version(client: httpx.AsyncClient) -> None:
    [before] = await stats_of(client, "/v2/models/calc/versions/1/stats")
    x = np.ones((3, 3), np.float32)
    assert (await client.post("/v2/models/calc/versions/1/infer", json=calc_request(x))).status_code == 200
    r = await client.post("/v1/models/calc/versions/1:predict", json={"instances": x.tolist()})
    assert r.status_code == 200
    r = await client.post("/v1/models/calc/versions/1:run", json={"feeds": {"x": x.tolist()}})
    assert r.status_code == 200
    # refused while decoding, and failed at the model: failures of the version
    assert (await client.post("/v2/models/calc/versions/1/infer", json={"inputs": []})).status_code == 400
    bad = calc_request(np.ones((2, 2), np.float32))
    assert (await client.post("/v2/models/calc/versions/1/infer", json=bad)).status_code == 400
    [after] = await stats_of(client, "/v2/models/calc/versions/1/stats")
    assert (after["name"], after["version"]) == ("calc", "1")
    took = {
        k: after["inference_stats"][k]["count"] - before["inference_stats"][k]["count"]
        for k in ("success", "fail", "queue", "compute_infer")
    }
    assert took == {"success": 3, "fail": 2, "queue": 3, "compute_infer": 3}
    # a model without batching: each request one execution of batch size 1, whatever its rows
    assert after["execution_count"] - before["execution_count"] == 3
    assert after["inference_count"] - before["inference_count"] == 3
    assert [b["batch_size"] for b in after["batch_stats"]] == [1]
    spent = after["inference_stats"]
    assert spent["success"]["ns"] >= spent["queue"]["ns"] + spent["compute_infer"]["ns"] > 0
    assert spent["compute_input"] == spent["compute_output"] == NONE  # never collected apart from the step
    assert after["last_inference"] >= before["last_inference"] and after["last_inference"] > 1.7e12
    # version 2 has its own numbers
    [v2] = await stats_of(client, "/v2/models/calc/versions/2/stats")
    assert v2["inference_stats"]["success"]["count"] == 0


async def test_a_batching_model_counts_its_batches_by_size(client: httpx.AsyncClient) -> None:
    one = calc_request(np.ones((1, 3), np.float32))
    # eight rows make a full batch alone, at once; it comes first as its step shows the outputs' batch
    # dimension (they have no static shape: else the first batch's members run alone once, as
    # server/batching.py says); then four requests of one row make one batch of the preferred size 4
    r = await client.post("/v2/models/batched/infer", json=calc_request(np.ones((8, 3), np.float32)))
    assert r.status_code == 200
    answers = await asyncio.gather(*(client.post("/v2/models/batched/infer", json=one) for _ in range(4)))
    assert [a.status_code for a in answers] == [200] * 4
    [got] = await stats_of(client, "/v2/models/batched/stats")
    assert (got["execution_count"], got["inference_count"]) == (2, 12)
    assert got["inference_stats"]["success"]["count"] == 5
    assert [(b["batch_size"], b["compute_infer"]["count"]) for b in got["batch_stats"]] == [(4, 1), (8, 1)]
    # each member's wait for its batch is its queue time: the three first waited for the fourth
    assert got["inference_stats"]["queue"]["ns"] > 0


async def test_all_models_a_model_and_a_version(client: httpx.AsyncClient) -> None:
    every = await stats_of(client, "/v2/models/stats")
    assert [(s["name"], s["version"]) for s in every] == [
        ("batched", "1"),
        ("calc", "1"),
        ("calc", "2"),
        ("stats", "1"),
    ]
    assert [(s["name"], s["version"]) for s in await stats_of(client, "/v2/models/calc/stats")] == [
        ("calc", "1"),
        ("calc", "2"),
    ]
    # a model named "stats": its own statistics under its name (/v2/models/stats is everyone's, as in Triton)
    assert [s["name"] for s in await stats_of(client, "/v2/models/stats/stats")] == ["stats"]
    head = await client.head("/v2/models/stats")
    assert head.status_code == 200 and head.headers["content-type"] == "application/json"


@pytest.mark.parametrize(
    ("path", "status", "message"),
    [
        ("/v2/models/nope/stats", 404, "Model 'nope' not found"),
        ("/v2/models/calc/versions/7/stats", 404, "Model 'calc' has no version 7; it has: 1, 2"),
        ("/v2/models/calc/versions/one/stats", 400, "The model version must be an integer, got 'one'"),
    ],
)
async def test_unknown_model_or_version(
    client: httpx.AsyncClient, path: str, status: int, message: str
) -> None:
    r = await client.get(path)
    assert r.status_code == status and message in r.json()["error"]


async def test_the_server_lists_the_statistics_extension(client: httpx.AsyncClient) -> None:
    assert "statistics" in (await client.get("/v2")).json()["extensions"]
