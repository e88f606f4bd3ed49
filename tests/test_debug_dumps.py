"""RunOptions.debug_options: DebugIdentity dumps in process, and what the server lets a client dump.

A dump writes files where its file:// URL says. In process that is the caller's business, as in
TensorFlow; at the server a request's options come from whoever can reach its port, so dumps are refused
(403) unless ``[server] debug_dump_dir`` names a folder, and then they stay under it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi import FastAPI

from poolserve.proto import config_pb2
from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.errors import FailedPreconditionError, InvalidArgumentError, PermissionDeniedError
from poolserve.runtime.session import Session
from poolserve.server.app import create_app
from poolserve.server.config import make_config

X = [[1.0, 2.0, 3.0]]


def add_graph() -> GraphBuilder:
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [None, 3])
    y = b.add(b.mul(x, b.constant(2.0)), b.constant(1.0), name="y")
    b.identity(y, name="out")
    return b


def watch(url: str, slot: int = 0) -> dict[str, Any]:
    return {
        "debug_options": {
            "debug_tensor_watch_opts": [{"node_name": "y", "output_slot": slot, "debug_urls": [url]}]
        }
    }


# --- in process -----------------------------------------------------------------------------------------


def test_a_negative_output_slot_is_refused_naming_the_watch() -> None:
    options = config_pb2.RunOptions()
    options.debug_options.debug_tensor_watch_opts.add(
        node_name="y", output_slot=-1, debug_urls=["file:///tmp"]
    )
    with (
        Session(add_graph().graph_def) as s,
        pytest.raises(InvalidArgumentError, match="output_slot must be 0"),
    ):
        s.run("out:0", {"x:0": X}, options=options)


def test_a_dump_that_cannot_be_written_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    options = config_pb2.RunOptions()
    options.debug_options.debug_tensor_watch_opts.add(node_name="y", debug_urls=[f"file://{blocker}/sub"])
    with (
        Session(add_graph().graph_def) as s,
        pytest.raises(FailedPreconditionError, match="Cannot write the debug dump of y:0"),
    ):
        s.run("out:0", {"x:0": X}, options=options)


# --- at the server --------------------------------------------------------------------------------------


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def make_app(root: Path, **server: Any) -> FastAPI:
    (root / "add.pb").write_bytes(add_graph().graph_def.SerializeToString())
    return create_app(
        make_config({"models": [{"name": "add", "path": str(root / "add.pb")}], "server": server})
    )


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, Path]]:
    dumps = tmp_path / "dumps"
    app = make_app(tmp_path, debug_dump_dir=str(dumps))
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://t") as c,
    ):
        yield c, dumps


@pytest.mark.anyio
async def test_the_server_refuses_dumps_by_default_and_writes_nothing(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    target = tmp_path / "anywhere"
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://t") as c,
    ):
        body = {"feeds": {"x": X}, "run_options": watch(f"file://{target}")}
        r = await c.post("/v1/models/add:run", json=body)
        assert r.status_code == 403, r.text
        assert "set [server] debug_dump_dir" in r.json()["error"]
        # without debug_options the same request runs
        r = await c.post("/v1/models/add:run", json={"feeds": {"x": X}})
        assert r.status_code == 200, r.text
    assert not target.exists()


@pytest.mark.anyio
async def test_dumps_go_under_debug_dump_dir_and_may_not_leave_it(
    served: tuple[httpx.AsyncClient, Path], tmp_path: Path
) -> None:
    client, dumps = served
    for url in ("file://run1", "file://run2/", f"file://{dumps}/run3"):
        r = await client.post("/v1/models/add:run", json={"feeds": {"x": X}, "run_options": watch(url)})
        assert r.status_code == 200, (url, r.text)
    for name in ("run1", "run2", "run3"):
        (f,) = (dumps / name).glob("y_0_DebugIdentity_*.npy")
        np.testing.assert_array_equal(np.load(f), [[3.0, 5.0, 7.0]])
    for url in (
        "file://../outside",
        f"file://{tmp_path}/outside",
        "file://run1/../../outside",
        "file:///outside",
    ):
        r = await client.post("/v1/models/add:run", json={"feeds": {"x": X}, "run_options": watch(url)})
        assert r.status_code == 403 and "leads out of the server's debug_dump_dir" in r.json()["error"], (
            r.text
        )
    assert not (tmp_path / "outside").exists()
    r = await client.post(
        "/v1/models/add:run", json={"feeds": {"x": X}, "run_options": watch("file://run4", -1)}
    )
    assert r.status_code == 400 and "output_slot must be 0 or more" in r.json()["error"], r.text


def test_a_remote_session_is_held_to_the_same_rule(tmp_path: Path) -> None:
    from test_remote import LoopbackServer

    (tmp_path / "add.pb").write_bytes(add_graph().graph_def.SerializeToString())
    server = LoopbackServer({"models": [{"name": "add", "path": str(tmp_path / "add.pb")}]})
    target = tmp_path / "anywhere"
    options = config_pb2.RunOptions()
    options.debug_options.debug_tensor_watch_opts.add(node_name="y", debug_urls=[f"file://{target}"])
    try:
        with Session(f"{server.url}/v1/models/add") as far:
            with pytest.raises(PermissionDeniedError, match="set \\[server\\] debug_dump_dir"):
                far.run("out:0", {"x:0": np.asarray(X, np.float32)}, options=options)
            np.testing.assert_array_equal(far.run("out:0", {"x:0": np.asarray(X, np.float32)}), [[3, 5, 7]])
    finally:
        server.stop()
    assert not target.exists()
