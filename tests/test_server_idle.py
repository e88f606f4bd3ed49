"""server/idle.py: the memory kept for reuse goes back to the system once the server has been idle after
serving, only when the resident set grew past the margin, at most once per interval; and the server's
lifespan runs it (``server.release_memory_idle_s``)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest

from poolserve.runtime.builder import GraphBuilder
from poolserve.server import idle
from poolserve.server.app import create_app
from poolserve.server.config import make_config
from poolserve.server.idle import IdleMemoryRelease, resident_bytes

IDLE_S = 0.1


class World:
    """What the watcher reads: arrivals, whether work is in flight, the resident set; and its releases."""

    def __init__(self) -> None:
        self.arrivals = 0
        self.busy = False
        self.rss = 100
        self.released: list[int] = []

    def watcher(self) -> IdleMemoryRelease:
        return IdleMemoryRelease(
            IDLE_S,
            arrivals=lambda: self.arrivals,
            busy=lambda: self.busy,
            release=self.release,
            resident=lambda: self.rss,
        )

    def release(self) -> bool:
        self.released.append(self.rss)
        self.rss = 100
        return True


async def _idle(seconds: float = 3 * IDLE_S) -> None:
    await asyncio.sleep(seconds)


def test_a_burst_is_released_once_the_server_is_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(idle, "MIN_INTERVAL_S", 0.0)

    async def go() -> tuple[list[int], list[int], int | None]:
        world = World()
        watcher = world.watcher()
        watcher.start()
        await _idle()
        before_any_request = list(world.released)  # nothing served: nothing to hand back
        for _ in range(5):  # a burst: requests keep arriving, memory grows
            world.arrivals += 10
            world.rss += 10
            await asyncio.sleep(IDLE_S / 2)
        await _idle()
        watcher.stop()
        return before_any_request, world.released, watcher.floor

    before, released, floor = asyncio.run(go())
    assert before == [] and released == [150] and floor == 100


def test_no_release_while_requests_arrive_or_work_is_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(idle, "MIN_INTERVAL_S", 0.0)

    async def go() -> tuple[list[int], list[int]]:
        world = World()
        watcher = world.watcher()
        watcher.start()
        world.rss = 200
        for _ in range(8):  # a request every idle_s / 3: never idle for idle_s
            world.arrivals += 1
            await asyncio.sleep(IDLE_S / 3)
        arriving = list(world.released)
        world.busy = True  # a long step: no arrivals, but not idle
        await _idle()
        busy = list(world.released)
        world.busy = False
        await _idle()
        watcher.stop()
        return arriving + busy, world.released

    while_busy, released = asyncio.run(go())
    assert while_busy == [] and released == [200]


def test_light_traffic_within_the_margin_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(idle, "MIN_INTERVAL_S", 0.0)

    async def go() -> list[int]:
        world = World()
        watcher = world.watcher()
        watcher.start()
        for _ in range(3):  # a request now and then: its working set, under 10% of the floor
            world.arrivals += 1
            world.rss = 100 + int(idle.MARGIN * 100) - 1
            await _idle()
        watcher.stop()
        return world.released

    assert asyncio.run(go()) == []


def test_releases_are_at_least_the_interval_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(idle, "MIN_INTERVAL_S", 60.0)

    async def go() -> list[int]:
        world = World()
        watcher = world.watcher()
        watcher.start()
        for rss in (150, 160):  # two bursts, each followed by an idle moment
            world.arrivals += 1
            world.rss = rss
            await _idle()
        watcher.stop()
        return world.released

    assert asyncio.run(go()) == [150]


def test_a_burst_within_the_interval_is_released_once_it_has_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(idle, "MIN_INTERVAL_S", 6 * IDLE_S)

    async def go() -> tuple[list[int], list[int]]:
        world = World()
        watcher = world.watcher()
        watcher.start()
        world.arrivals += 1
        world.rss = 150
        await _idle()  # released: 150
        world.arrivals += 1
        world.rss = 170
        await _idle(2 * IDLE_S)  # idle again, but within the interval: kept for now
        early = list(world.released)
        await _idle(10 * IDLE_S)  # no request since: released once the interval has passed
        watcher.stop()
        return early, world.released

    early, released = asyncio.run(go())
    assert early == [150] and released == [150, 170]


def test_zero_turns_it_off() -> None:
    async def go() -> list[int]:
        world = World()
        watcher = IdleMemoryRelease(0.0, lambda: world.arrivals, lambda: False, world.release)
        watcher.start()
        world.arrivals += 1
        world.rss = 500
        await _idle()
        watcher.stop()
        return world.released

    assert asyncio.run(go()) == []


def test_resident_bytes_reads_this_process() -> None:
    if resident_bytes() is None:
        pytest.skip("no /proc")
    # in a process of its own: servers other tests left in threads may hand memory back meanwhile
    code = (
        "import numpy as np; from poolserve.server.idle import resident_bytes; before = resident_bytes(); "
        "block = np.ones(48 << 20, np.uint8); print((resident_bytes() - before) >> 20)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert 40 <= int(out.stdout) <= 60  # the 48 MiB just touched


@pytest.mark.anyio
async def test_the_server_hands_memory_back_after_serving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(idle, "MIN_INTERVAL_S", 0.0)
    monkeypatch.setattr(idle, "MARGIN", -1.0)  # whatever the growth: this test serves one small request
    b = GraphBuilder()
    b.identity(b.placeholder("x", np.float32, [None, 3]), name="out")
    (tmp_path / "m.pb").write_bytes(b.graph_def.SerializeToString())
    config = make_config(
        {
            "server": {"release_memory_idle_s": IDLE_S},
            "models": [{"name": "m", "path": str(tmp_path / "m.pb")}],
        }
    )
    app = create_app(config)
    async with app.router.lifespan_context(app):
        watcher = app.state.idle_memory
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=10) as c:
            await asyncio.sleep(3 * IDLE_S)
            assert watcher.releases == 0  # idle since the start: nothing served
            r = await c.post("/v1/models/m:run", json={"feeds": {"x": [[1.0, 2.0, 3.0]]}})
            assert r.status_code == 200
            for _ in range(40):
                await asyncio.sleep(IDLE_S)
                if watcher.releases:
                    break
        assert watcher.releases == 1 and watcher.floor is not None


def test_the_setting_is_validated() -> None:
    assert make_config({}).server.release_memory_idle_s == 1.0
    with pytest.raises(ValueError, match="release_memory_idle_s"):
        make_config({"server": {"release_memory_idle_s": -1}})
