"""``Session("http://host:port")`` against a real server (uvicorn on loopback, in this process so that the
test kernels exist on both sides): the same outputs as in process, RunMetadata, deadlines and
cancellation across the wire, errors as the same OpError classes, model binding, extend, partial runs."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import uvicorn
from support import free_port, gate_op, load_fixture_io, serve_in_thread, sleep_op

from poolserve.proto import config_pb2, serving_pb2, tensor_pb2, types_pb2
from poolserve.runtime.builder import GraphBuilder, shape
from poolserve.runtime.deadline import Deadline
from poolserve.runtime.errors import (
    CancelledError,
    DeadlineExceededError,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
    UnauthenticatedError,
    UnavailableError,
)
from poolserve.runtime.graph import load_graph_def
from poolserve.runtime.remote import RemoteSession
from poolserve.runtime.session import InteractiveSession, Session, get_default_session
from poolserve.runtime.tensor import from_ndarray
from poolserve.server.app import create_app
from poolserve.server.config import make_config

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "models"
TOKEN = "s3cret"


class LoopbackServer:
    """The app under uvicorn on 127.0.0.1 in a thread; ``stop()`` shuts it down."""

    def __init__(self, sections: dict[str, object]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        app = self.app = create_app(make_config(sections))
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        )
        self.thread = serve_in_thread(self.server)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


def add_model(root: Path) -> dict[str, object]:
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [None, 3])
    b.identity(b.add(b.mul(x, b.constant(2.0)), b.constant(1.0)), name="out")
    (root / "add.pb").write_bytes(b.graph_def.SerializeToString())
    return {"name": "add", "path": str(root / "add.pb")}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackServer]:
    root = tmp_path_factory.mktemp("remote")
    s = LoopbackServer({"models": [add_model(root)], "server": {"admin_token": TOKEN}})
    try:
        yield s
    finally:
        s.stop()


def gone(server: LoopbackServer) -> bool:
    """The server answered a remote run with 499: its client went away."""
    text = httpx.get(f"{server.url}/metrics", timeout=5).text
    return 'endpoint="/v1/sessions/{handle}:run",model="",status="499"}' in text


def far_steps(server: LoopbackServer) -> int:
    """Steps of the server's remote sessions still running."""
    return int(server.app.state.sessions.steps_running)


def remote(server: LoopbackServer, graph: object = None, config: object = None) -> Session:
    return Session(server.url, graph, config, token=TOKEN)  # type: ignore[call-arg]


@pytest.mark.parametrize("name", ["mlp", "branches", "resnet", "transformer"])
def test_a_fixture_gives_the_same_outputs_remotely_as_in_process(server, name):
    graph = load_graph_def(FIXTURES / f"{name}.pb")
    feeds, expected = load_fixture_io(FIXTURES / f"{name}.npz")
    fetches = sorted(expected)
    with Session(graph) as local, remote(server, graph) as far:
        assert isinstance(far, RemoteSession)
        here, there = local.run(fetches, feeds), far.run(fetches, feeds)
    for a, b in zip(here, there, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


def test_fetch_structures_targets_and_duplicates_come_back_as_in_process(server):
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [2])
    y = b.identity(b.mul(x, b.constant(3.0)), name="y")
    v = b.op("VariableV2", [], {"dtype": np.float32, "shape": shape([2])}, name="v")
    b.op("Assign", [v, y], {"T": np.float32}, name="assign")
    feeds = {"x:0": np.asarray([1.0, 2.0], np.float32)}
    fetches = {"a": [y, y], "b": ("assign", y)}
    with Session(b.graph_def) as local, remote(server, b.graph_def) as far:
        want, got = local.run(fetches, feeds), far.run(fetches, feeds)
        assert got["b"][0] is None and want["b"][0] is None
        np.testing.assert_array_equal(got["a"][1], want["a"][1])
        np.testing.assert_array_equal(far.run("v:0"), [3.0, 6.0])  # the target ran on the server


def test_0_d_results_come_back_as_numpy_scalars_as_in_process(server):
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [2])
    axis = b.constant(np.int32(0), name="axis")
    total = b.op("Sum", [x, axis], {"T": np.float32, "Tidx": np.int32, "keep_dims": False}, name="total")
    word = b.constant(np.array(b"hello", object), name="word")
    i = b.placeholder("i", np.int32, ())
    fetches = [total, word, i, x]
    feeds = {"x:0": np.asarray([1.0, 2.0], np.float32), "i": np.int32(5)}  # "i": its output 0
    with Session(b.graph_def) as local, remote(server, b.graph_def) as far:
        want, got = local.run(fetches, feeds), far.run(fetches, feeds)
    assert [type(v) for v in got] == [type(v) for v in want] == [np.float32, bytes, np.ndarray, np.ndarray]
    assert got[0] == want[0] == 3 and got[1] == want[1] == b"hello" and got[2] == want[2] == 5


def test_run_metadata_and_options_cross_the_wire(server):
    graph = load_graph_def(FIXTURES / "mlp.pb")
    feeds, expected = load_fixture_io(FIXTURES / "mlp.npz")
    options = config_pb2.RunOptions(trace_level=config_pb2.RunOptions.FULL_TRACE)
    options.output_partition_graphs = True
    local_md, remote_md = config_pb2.RunMetadata(), config_pb2.RunMetadata()
    with Session(graph) as local, remote(server, graph) as far:
        local.run(sorted(expected), feeds, options, local_md)
        far.run(sorted(expected), feeds, options, remote_md)
    names = {n.node_name for d in remote_md.step_stats.dev_stats for n in d.node_stats}
    assert names == {n.node_name for d in local_md.step_stats.dev_stats for n in d.node_stats}
    assert len(remote_md.partition_graphs) == 1
    assert len(remote_md.partition_graphs[0].node) == len(local_md.partition_graphs[0].node)


def test_a_run_of_fed_fetches_only_leaves_the_run_metadata_alone_remotely(server):
    """As in process (and in TensorFlow, whose client runs no step then): the RunMetadata keeps what it
    held when every fetch is fed."""
    graph = load_graph_def(FIXTURES / "mlp.pb")
    feeds, expected = load_fixture_io(FIXTURES / "mlp.npz")
    fetch = sorted(expected)[0]
    options = config_pb2.RunOptions(trace_level=config_pb2.RunOptions.FULL_TRACE)
    with remote(server, graph) as far:
        md = config_pb2.RunMetadata()
        far.run(fetch, feeds, options, md)
        before = md.SerializeToString()
        assert md.step_stats.dev_stats
        far.run(fetch, {fetch: expected[fetch]}, options, md)
        assert md.SerializeToString() == before


def test_a_deadline_stops_the_remote_step(server):
    b = GraphBuilder()
    out = sleep_op(b, None, 5.0, "remote_sleep")
    options = config_pb2.RunOptions(timeout_in_ms=100)
    with remote(server, b.graph_def) as far:
        t0 = time.monotonic()
        with pytest.raises(DeadlineExceededError):
            far.run(out, options=options)
        assert time.monotonic() - t0 < 3.0


def test_the_sessions_operation_timeout_bounds_a_remote_run(server):
    """ConfigProto.operation_timeout_in_ms bounds a run that sets no timeout_in_ms, remotely as in
    process (the server applied its own default_timeout_ms, 30 s, instead)."""
    b = GraphBuilder()
    out = sleep_op(b, None, 5.0, "remote_operation_timeout")
    config = config_pb2.ConfigProto(operation_timeout_in_ms=100)
    with Session(b.graph_def, config) as local, remote(server, b.graph_def, config) as far:
        with pytest.raises(DeadlineExceededError) as here:
            local.run(out)
        t0 = time.monotonic()
        with pytest.raises(DeadlineExceededError) as there:
            far.run(out)
        assert time.monotonic() - t0 < 3.0
        assert there.value.message == here.value.message


def test_closing_the_session_cancels_its_run_in_flight(server):
    b = GraphBuilder()
    out, gate = gate_op(b, None, "remote_gate")
    errors: list[BaseException] = []
    far = remote(server, b.graph_def)

    def run() -> None:
        try:
            far.run(out)
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    try:
        assert gate.started.wait(5)
        far.close()
    finally:
        gate.open()
    t.join(10)
    assert not t.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], CancelledError), errors
    assert str(errors[0]) == "Run call was cancelled"  # as a local session (and TensorFlow) says it
    with pytest.raises(RuntimeError, match="closed Session"):
        far.run(out)


def test_a_bad_feed_raises_the_same_error_remotely(server):
    graph = load_graph_def(FIXTURES / "mlp.pb")
    feeds, expected = load_fixture_io(FIXTURES / "mlp.npz")
    name = next(iter(feeds))
    bad = {name: np.zeros((1, 2, 3), np.float32)}
    with Session(graph) as local, remote(server, graph) as far:
        with pytest.raises(InvalidArgumentError) as here:
            local.run(sorted(expected), bad)
        with pytest.raises(InvalidArgumentError) as there:
            far.run(sorted(expected), bad)
        assert there.value.message == here.value.message
        with pytest.raises(NotFoundError) as here:
            local.run("nope:0", feeds)
        with pytest.raises(NotFoundError) as there:
            far.run("nope:0", feeds)
        assert there.value.message == here.value.message


def test_make_callable_and_feed_keys_fail_as_in_process(server):
    """make_callable refuses unknown or twice-fed names when it is made (the remote one waited for the
    first call), and a feed_dict key that is not a name is InvalidArgumentTypeError, an OpError and a
    TypeError (the remote one raised a bare TypeError)."""
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [None, 3])
    out = b.identity(x, name="out")
    bad_calls = [
        lambda s: s.make_callable("nope:0"),
        lambda s: s.make_callable("nope"),
        lambda s: s.make_callable(out, ["q:0"]),
        lambda s: s.make_callable(out, [x, x]),
        lambda s: s.run(out, {3: np.zeros((1, 3), np.float32)}),
    ]
    with Session(b.graph_def) as local, remote(server, b.graph_def) as far:
        for call in bad_calls:
            with pytest.raises(Exception) as here:
                call(local)
            with pytest.raises(Exception) as there:
                call(far)
            assert type(there.value) is type(here.value) and str(there.value) == str(here.value)
        assert far.make_callable(out, [x])(np.ones((1, 3), np.float32)).tolist() == [[1, 1, 1]]


def test_a_kernel_error_names_its_node_remotely(server):
    """OpError.node_name (TensorFlow's error names its node: e.node_def, e.op) crosses the wire."""
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [None, None])
    y = b.matmul(x, b.constant(np.ones((3, 2), np.float32)), name="mm")
    bad = {x: np.ones((2, 4), np.float32)}
    with Session(b.graph_def) as local, remote(server, b.graph_def) as far:
        with pytest.raises(InvalidArgumentError) as here:
            local.run(y, bad)
        with pytest.raises(InvalidArgumentError) as there:
            far.run(y, bad)
    assert here.value.node_name == there.value.node_name == "mm"
    assert there.value.message == here.value.message


def test_errors_that_are_also_value_or_type_errors_stay_so_remotely(server):
    """TensorFlow's client raises a bad fetch or feed shape as ValueError and a feed it cannot convert or
    find as TypeError; in process these are OpErrors that are also that Python error, and a remote session
    raises the same classes (it raised the plain OpError, which ``except ValueError`` missed)."""
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [None, 3])
    out = b.identity(x, name="out")
    good = np.zeros((1, 3), np.float32)
    calls = [
        (out, {"x:0": np.zeros((1, 4), np.float32)}, ValueError),  # a feed of the wrong shape
        (out, {"x:0": np.array([["a", "b", "c"]])}, ValueError),  # a value that does not convert
        ("nope:0", {"x:0": good}, ValueError),  # a fetch the graph does not have
        (out, {"x:0": good, "q:0": good}, TypeError),  # a feed the graph does not have
    ]
    with Session(b.graph_def) as local, remote(server, b.graph_def) as far:
        for fetch, feeds, python in calls:
            with pytest.raises(python) as here:
                local.run(fetch, feeds)
            with pytest.raises(python) as there:
                far.run(fetch, feeds)
            assert type(there.value) is type(here.value) and str(there.value) == str(here.value)


def test_a_session_bound_to_a_served_model_ships_no_graph(server):
    with Session(f"{server.url}/v1/models/add") as far:  # no token: nothing is shipped
        out = far.run("out:0", {"x:0": np.asarray([[1, 2, 3]], np.float32)})
        np.testing.assert_array_equal(out, [[3, 5, 7]])
        assert far.graph_def.node == []
        assert [d.device_type for d in far.list_devices()] == ["CPU"]
    with pytest.raises(NotFoundError, match="nope"):
        Session(f"{server.url}/v1/models/nope")


def test_shipping_a_graph_needs_the_admin_token(server):
    b = GraphBuilder()
    b.constant(1.0, name="c")
    with pytest.raises(UnauthenticatedError):
        Session(server.url, b.graph_def)


def test_extend_and_partial_runs_work_remotely(server):
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [])
    y = b.placeholder("y", np.float32, [])
    s = b.add(x, b.constant(1.0), name="s")
    with remote(server, b.graph_def) as far:
        more = GraphBuilder()
        more.graph_def.node.add().CopyFrom(b.graph_def.node[0])  # names the builder knows about
        node = more.graph_def.node[0]
        node.name, node.op = "t", "Mul"
        node.ClearField("attr")
        node.attr["T"].type = 1
        node.input[:] = ["s", "y"]
        far.extend(more.graph_def)
        assert far.run("t:0", {x: 1.0, y: 3.0}) == 6.0
        handle = far.partial_run_setup(["s:0", "t:0"], [x, y])
        assert far.partial_run(handle, "s:0", {x: 2.0}) == 3.0
        assert far.partial_run(handle, "t:0", {y: 4.0}) == 12.0
    assert s == "s:0"


def test_bad_targets_are_clear_errors(server):
    with pytest.raises(NotFoundError, match="known targets are .*http://"):
        Session("ftp://example.com")
    with pytest.raises(InvalidArgumentError, match="/v1/models/NAME"):
        Session(f"{server.url}/somewhere")
    with pytest.raises(UnavailableError, match="Cannot reach"):
        Session(f"http://127.0.0.1:{free_port()}", timeout=2)  # type: ignore[call-arg]


def test_limits_and_idle_sessions(tmp_path):
    s = LoopbackServer(
        {"models": [add_model(tmp_path)], "sessions": {"max_sessions": 1, "idle_seconds": 0.2}}
    )
    try:
        b = GraphBuilder()
        b.constant(1.0, name="c")
        first = Session(s.url, b.graph_def)
        with pytest.raises(ResourceExhaustedError, match="max_sessions"):
            Session(s.url, b.graph_def)
        time.sleep(0.3)
        second = Session(s.url, b.graph_def)  # the idle first one was dropped to make room
        with pytest.raises(NotFoundError, match="idle"):
            first.run("c:0")
        assert second.run("c:0") == 1.0
        second.close()
        first.close()  # already gone on the server: closing still succeeds
    finally:
        s.stop()


def test_reset_ends_the_servers_remote_sessions_and_needs_the_token(server):
    b = GraphBuilder()
    b.constant(1.0, name="c")
    far = remote(server, b.graph_def)
    assert far.run("c:0") == 1.0
    with pytest.raises(UnauthenticatedError):
        Session.reset(server.url)
    assert far.run("c:0") == 1.0  # refused: nothing was reset
    Session.reset(server.url, ["a"], token=TOKEN)
    with pytest.raises(NotFoundError, match="not found"):
        far.run("c:0")
    far.close()
    with Session(f"{server.url}/v1/models/add") as bound:  # served models are not touched
        assert bound.run("out:0", {"x:0": np.zeros((1, 3), np.float32)}).tolist() == [[1, 1, 1]]


def run_step_raw(server, feeds: list[tuple[str, tensor_pb2.TensorProto]]) -> httpx.Response:
    """A RunStep of the served ``add`` model's session, fetching ``out:0``, sent as the raw protobuf a
    client could send (none of RemoteSession's own checks on the way)."""
    with Session(f"{server.url}/v1/models/add") as bound:
        assert isinstance(bound, RemoteSession)
        handle = bound._handle
        request = serving_pb2.RunStepRequest(session_handle=handle, fetch=["out:0"])
        for name, tensor in feeds:
            request.feed.add(name=name, tensor=tensor)
        return httpx.post(
            f"{server.url}/v1/sessions/{handle}:run",
            content=request.SerializeToString(),
            headers={"Content-Type": "application/x-protobuf"},
        )


def empty_float_tensor(*dims: int) -> tensor_pb2.TensorProto:
    """A float32 TensorProto of shape ``dims`` that holds no value."""
    tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT)
    for size in dims:
        tensor.tensor_shape.dim.add(size=size)
    return tensor


def test_a_run_step_that_feeds_a_tensor_twice_is_refused_naming_it(server):
    zeros = from_ndarray(np.zeros((1, 3), np.float32))
    answer = run_step_raw(server, [("x:0", zeros), ("x:0", zeros)])
    assert answer.status_code == 400
    assert answer.json() == {"error": "Tensor 'x:0' is fed twice", "code": "INVALID_ARGUMENT"}


def test_a_run_step_feeding_a_shape_no_array_can_have_is_refused_naming_it(server):
    answer = run_step_raw(server, [("x:0", empty_float_tensor(2**40, 2**40))])
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"].startswith(
        "x:0: shape [1099511627776, 1099511627776] is impossible: no array of float32 has that many elements"
    )


def test_a_run_step_bounds_what_a_feed_filled_from_fewer_values_expands_to(server):
    """[6000000, 3] floats from no value: 72 MB of zeros, past the server's max_request_bytes (64 MiB)."""
    answer = run_step_raw(server, [("x:0", empty_float_tensor(6000000, 3))])
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"].startswith(
        "x:0: shape [6000000, 3] filled from 0 of its 18000000 values would take 72000000 bytes of float32, "
        "past max_request_bytes (67108864)"
    )


def test_submit_and_arun_run_remotely_and_cancel_the_servers_step(server):
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None,))
    y = b.mul(x, b.constant(np.float32(2.0)), name="y")
    gated, gate = gate_op(b, None, "remote_submit_gate")
    with remote(server, b.graph_def) as far:
        future = far.submit(y, {x: np.arange(3, dtype=np.float32)})
        np.testing.assert_array_equal(future.result(10), [0.0, 2.0, 4.0])

        async def both():
            return await asyncio.gather(
                far.arun(y, {x: np.ones(2, np.float32)}), far.arun([y], {x: np.full(1, 3.0, np.float32)})
            )

        first, second = asyncio.run(both())
        np.testing.assert_array_equal(first, [2.0, 2.0])
        np.testing.assert_array_equal(second[0], [6.0])

        blocked = far.submit(gated)
        try:
            assert gate.started.wait(5)
            assert far_steps(server) == 1
            assert blocked.cancel()
            with pytest.raises(CancelledError):
                blocked.result(10)
            # the server noticed the client leaving and cancelled the request (a 499), while the step's
            # kernel was still inside the gate
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline and not gone(server):
                time.sleep(0.02)
            assert gone(server) and far_steps(server) == 1
            cancelled = [
                s.status for e in server.app.state.sessions._entries.values() for s in e.session._active
            ]
            assert len(cancelled) == 1 and isinstance(cancelled[0], CancelledError)
        finally:
            gate.open()
        np.testing.assert_array_equal(far.run(y, {x: np.ones(1, np.float32)}), [2.0])


def test_a_remote_arun_takes_its_deadline(server):
    b = GraphBuilder()
    out = sleep_op(b, None, 5.0, "remote_arun_sleep")
    with remote(server, b.graph_def) as far:
        t0 = time.monotonic()
        with pytest.raises(DeadlineExceededError):
            asyncio.run(far.arun(out, deadline=Deadline(150)))
        assert time.monotonic() - t0 < 3.0


def test_an_interactive_session_with_a_target_is_remote_and_the_default(server):
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None,))
    y = b.mul(x, b.constant(np.float32(3.0)), name="y")
    s = InteractiveSession(server.url, b.graph_def, token=TOKEN)
    try:
        assert isinstance(s, RemoteSession) and isinstance(s, InteractiveSession)
        assert get_default_session() is s
        np.testing.assert_array_equal(s.run(y, {x: np.ones(2, np.float32)}), [3.0, 3.0])
    finally:
        s.close()
    assert get_default_session() is not s
    with pytest.raises(RuntimeError, match="closed Session"):
        s.run(y, {x: np.ones(1, np.float32)})


def test_a_remote_session_keeps_its_connection_between_runs(server):
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None,))
    y = b.identity(x, name="y")
    with remote(server, b.graph_def) as far:
        far.run(y, {x: np.ones(1, np.float32)})
        (conn,) = far._http._all
        for _ in range(5):
            far.run(y, {x: np.ones(1, np.float32)})
        assert far._http._all == [conn]  # one connection, kept alive (no connect per call)


def test_submitted_calls_queue_behind_the_sessions_submit_threads(server):
    from poolserve.runtime.remote import MAX_SUBMIT_THREADS

    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None,))
    y = b.mul(x, b.constant(np.float32(2.0)), name="y")
    with remote(server, b.graph_def) as far:
        futures = [far.submit(y, {x: np.full(1, i, np.float32)}) for i in range(2 * MAX_SUBMIT_THREADS)]
        assert [float(f.result(30)[0]) for f in futures] == [2.0 * i for i in range(2 * MAX_SUBMIT_THREADS)]
        names = {t.name for t in threading.enumerate() if t.name.startswith("remote_run")}
        assert 0 < len(names) <= MAX_SUBMIT_THREADS
