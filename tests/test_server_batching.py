"""server/batching.py through InferenceService (real runtime): concurrent requests run as one step, each
gets exactly its own rows, limits, deadlines, disconnects, traces and metrics, and the start-up checks."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import add_graph, sleep_op

from poolserve.proto import config_pb2
from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.errors import DeadlineExceededError, InvalidArgumentError
from poolserve.runtime.graph import load_graph_def
from poolserve.server import batching
from poolserve.server.config import make_config
from poolserve.server.service import InferenceService, InferRequest, InferResult

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "models"


def slow_add_graph(seconds: float) -> Any:
    """out = x * 2 + 1 after sleeping ``seconds`` (x float32 [None, 3])."""
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [None, 3])
    slept = sleep_op(b, x, seconds, "batch_sleep")
    b.identity(b.add(b.mul(slept, b.constant(2.0)), b.constant(1.0)), name="out")
    return b.graph_def


def service(
    tmp_path: Path, batching: dict[str, Any], graph: Any = None, name: str = "add"
) -> InferenceService:
    (tmp_path / f"{name}.pb").write_bytes((graph if graph is not None else add_graph()).SerializeToString())
    config = make_config({"models": [{"name": name, "path": f"{name}.pb", "batching": batching}]}, tmp_path)
    rt = InferenceService(config)
    rt.start()
    return rt


def rows(n: int, start: float) -> np.ndarray:
    return (np.arange(n * 3, dtype=np.float32).reshape(n, 3) + start).astype(np.float32)


async def infer_all(rt: InferenceService, inputs: list[np.ndarray], **kw: Any) -> list[InferResult]:
    return await asyncio.gather(*(rt.infer(InferRequest("add", {"x": x}, **kw)) for x in inputs))


def test_concurrent_requests_run_as_one_step_each_getting_its_own_rows(tmp_path):
    rt = service(tmp_path, {"max_batch_size": 64})
    inputs = [rows(1 + i % 3, 100.0 * i) for i in range(16)]

    async def two_bursts() -> tuple[list[InferResult], list[InferResult]]:
        return await infer_all(rt, inputs), await infer_all(rt, inputs)

    try:
        first, second = asyncio.run(two_bursts())
    finally:
        rt.close()
    for results in (first, second):
        for x, r in zip(inputs, results, strict=True):
            np.testing.assert_array_equal(r.outputs["out"], x * 2 + 1)  # exactly its rows, no others
    batches = [
        {r.timings.batch.batch_id: r.timings.batch for r in rs if r.timings.batch} for rs in (first, second)
    ]
    # nothing overlapped before the first burst: its first request runs at once, alone, the 15 others together
    assert [(b.members, b.rows) for b in batches[0].values()] == [
        (1, 1),
        (15, sum(len(x) for x in inputs) - 1),
    ]
    # requests overlapped a moment ago: those that reach the idle model in the same loop iteration run together
    assert [(b.members, b.rows) for b in batches[1].values()] == [(16, sum(len(x) for x in inputs))]


def test_auto_a_lone_request_runs_at_once_and_alone(tmp_path):
    rt = service(tmp_path, {"max_batch_size": 64})  # "auto"

    async def one_by_one() -> list[InferResult]:
        return [await rt.infer(InferRequest("add", {"x": rows(2, i)})) for i in range(5)]

    try:
        results = asyncio.run(one_by_one())
        alone = asyncio.run(asyncio.wait_for(rt.infer(InferRequest("add", {"x": rows(1, 0)})), 5.0))
    finally:
        rt.close()
    for i, r in enumerate(results):
        np.testing.assert_array_equal(r.outputs["out"], rows(2, i) * 2 + 1)
        assert r.timings.batch is not None and (r.timings.batch.members, r.timings.batch.rows) == (1, 2)
    assert len({r.timings.batch.batch_id for r in results if r.timings.batch}) == 5
    assert alone.timings.batch is not None and alone.timings.batch.members == 1


def test_auto_batches_again_when_requests_come_back_to_back_after_a_quiet_spell(tmp_path, monkeypatch):
    # a request whose step runs on the loop holds the loop to its answer: with no overlap seen lately, a
    # burst of requests then ran one at a time, each alone (a server after a spell of one client)
    monkeypatch.setattr(batching, "COMPANY_WINDOW_S", 0.05)
    monkeypatch.setattr(batching, "PROBE_EVERY_S", 0.05)
    rt = service(tmp_path, {"max_batch_size": 64})  # "auto"
    inputs = [rows(1, 10.0 * i) for i in range(16)]

    async def quiet_then_burst() -> list[InferResult]:
        for i in range(8):  # one client: the plan's cost is learned, its steps run on the loop
            await rt.infer(InferRequest("add", {"x": rows(1, i)}))
        await asyncio.sleep(0.1)  # longer than the company window, a probe's period and BACK_TO_BACK_S
        return await infer_all(rt, inputs)

    try:
        results = asyncio.run(quiet_then_burst())
    finally:
        rt.close()
    for x, r in zip(inputs, results, strict=True):
        np.testing.assert_array_equal(r.outputs["out"], x * 2 + 1)
    batches = {r.timings.batch.batch_id: r.timings.batch for r in results if r.timings.batch}
    # the first comes after the quiet spell and runs alone; the second comes back to back, waits a probe's
    # time, and the requests the loop reads meanwhile join it
    assert [b.members for b in batches.values()] == [1, 15]


def probe_due_then(rt: InferenceService, late: list[np.ndarray], after: float) -> Any:
    """One request, a second right after it (back to back: a probe is due), and ``late`` requests sent
    ``after`` seconds into the second one's probe; the second one's result and seconds, and the late ones'."""

    async def go() -> tuple[InferResult, float, list[InferResult]]:
        await rt.infer(InferRequest("add", {"x": rows(1, 0)}))
        t0 = time.monotonic()
        second = asyncio.ensure_future(rt.infer(InferRequest("add", {"x": rows(1, 1)})))
        await asyncio.sleep(after)
        others = await asyncio.gather(*(rt.infer(InferRequest("add", {"x": x})) for x in late))
        result = await second
        return result, time.monotonic() - t0, list(others)

    return asyncio.run(go())


def test_a_probe_that_finds_nobody_in_the_server_does_not_wait(tmp_path, monkeypatch):
    # a client alone paid the probe's whole wait once every PROBE_EVERY_S (1 ms, a tenth of its requests
    # at 40 a second); made 3 s here, it would hold the lone request that long
    monkeypatch.setattr(batching, "PROBE_WAIT_S", 3.0)
    rt = service(tmp_path, {"max_batch_size": 64})  # "auto"
    try:
        result, seconds, _ = probe_due_then(rt, [], 0.0)
    finally:
        rt.close()
    np.testing.assert_array_equal(result.outputs["out"], rows(1, 1) * 2 + 1)
    assert seconds < 1.5


def test_a_probe_waits_for_requests_still_on_their_way(tmp_path, monkeypatch):
    # other requests in the server (a body still being read or decoded): the probe waits its whole time,
    # and a request that reaches the model meanwhile joins the probing one
    monkeypatch.setattr(batching, "PROBE_WAIT_S", 3.0)
    rt = service(tmp_path, {"max_batch_size": 64})
    rt.model("add").batcher.busy = lambda: True
    try:
        result, _, (late,) = probe_due_then(rt, [rows(1, 2)], 0.1)
    finally:
        rt.close()
    np.testing.assert_array_equal(result.outputs["out"], rows(1, 1) * 2 + 1)
    np.testing.assert_array_equal(late.outputs["out"], rows(1, 2) * 2 + 1)
    assert result.timings.batch is not None and late.timings.batch is not None
    assert result.timings.batch.batch_id == late.timings.batch.batch_id
    assert result.timings.batch.members == 2


def test_a_batched_mlp_gives_what_each_request_gets_alone(tmp_path):
    graph = load_graph_def(FIXTURES / "mlp.pb")
    rng = np.random.default_rng(0)
    (tmp_path / "mlp.pb").write_bytes(graph.SerializeToString())
    config = make_config({"models": [{"name": "mlp", "path": "mlp.pb", "batching": {}}]}, tmp_path)
    rt = InferenceService(config)
    rt.start()
    try:
        entry = rt.model("mlp")
        spec = entry.inputs[0]
        inputs = [rng.standard_normal((1, spec.shape[1])).astype(np.float32) for _ in range(12)]

        async def go() -> list[InferResult]:
            return await asyncio.gather(*(rt.infer(InferRequest("mlp", {spec.name: x})) for x in inputs))

        results = asyncio.run(go())
        out = entry.outputs[0].name
        for x, r in zip(inputs, results, strict=True):
            alone = entry.session.run(entry.outputs[0].tensor, {spec.tensor: x})
            np.testing.assert_allclose(r.outputs[out], alone, rtol=1e-5, atol=1e-6)
        assert max(r.timings.batch.members for r in results) > 1
    finally:
        rt.close()


def test_max_batch_size_bounds_a_batch_and_a_larger_request_runs_alone(tmp_path):
    rt = service(tmp_path, {"max_batch_size": 8})
    try:
        results = asyncio.run(infer_all(rt, [rows(3, i) for i in range(10)] + [rows(9, 0)]))
    finally:
        rt.close()
    assert all(r.timings.batch.rows <= 8 for r in results[:10])
    assert results[10].timings.batch is None  # 9 rows > max_batch_size
    np.testing.assert_array_equal(results[10].outputs["out"], rows(9, 0) * 2 + 1)


def test_a_member_whose_deadline_passes_while_queued_is_answered_without_running(tmp_path):
    rt = service(tmp_path, {}, slow_add_graph(0.4))
    try:

        async def go() -> tuple[Any, Any, float]:
            busy = asyncio.ensure_future(rt.infer(InferRequest("add", {"x": rows(1, 0)})))
            await asyncio.sleep(0.05)  # the first batch runs; the next request queues behind it
            options = config_pb2.RunOptions(timeout_in_ms=50)
            t0 = time.monotonic()
            late = await asyncio.gather(
                rt.infer(InferRequest("add", {"x": rows(1, 1)}, run_options=options)), return_exceptions=True
            )
            waited = time.monotonic() - t0
            return await busy, late[0], waited

        first, late, waited = asyncio.run(go())
    finally:
        rt.close()
    np.testing.assert_array_equal(first.outputs["out"], rows(1, 0) * 2 + 1)
    assert isinstance(late, DeadlineExceededError)
    assert waited < 0.3  # answered at its deadline, not when the running batch ended


def test_a_member_whose_client_went_away_is_dropped_and_the_others_answered(tmp_path):
    rt = service(tmp_path, {}, slow_add_graph(0.2))
    try:

        async def go() -> list[Any]:
            busy = asyncio.ensure_future(rt.infer(InferRequest("add", {"x": rows(1, 0)})))
            await asyncio.sleep(0.05)
            queued = [asyncio.ensure_future(rt.infer(InferRequest("add", {"x": rows(1, i)}))) for i in (1, 2)]
            await asyncio.sleep(0.01)
            queued[0].cancel()  # the disconnect of a queued member
            return [await busy, *(await asyncio.gather(*queued, return_exceptions=True))]

        busy, gone, kept = asyncio.run(go())
    finally:
        rt.close()
    assert isinstance(gone, asyncio.CancelledError)
    np.testing.assert_array_equal(kept.outputs["out"], rows(1, 2) * 2 + 1)
    assert kept.timings.batch.members == 1  # the cancelled member was left out


def test_a_traced_member_shows_its_wait_and_the_batch_and_metrics_count_batches(tmp_path):
    rt = service(tmp_path, {})
    try:
        results = asyncio.run(infer_all(rt, [rows(1, i) for i in range(4)], trace=True))
        exposition = rt.metrics.exposition()[0].decode()
    finally:
        rt.close()
    last = results[-1]
    names = [e["name"] for e in last.trace["traceEvents"] if e.get("ph") == "X"]
    assert "wait for batch" in names and "compute" in names
    assert last.run_metadata is not None and last.run_metadata.step_stats.dev_stats
    assert 'poolserve_batch_size_count{model="add"} 4.0' in exposition


def test_auto_a_lone_request_is_a_batch_of_one_in_its_trace_and_the_metrics(tmp_path):
    # it runs as an unbatched request would (no member, no batch options), and still counts as a batch
    rt = service(tmp_path, {"max_batch_size": 64})  # "auto"
    try:
        result = asyncio.run(rt.infer(InferRequest("add", {"x": rows(2, 0)}, trace=True)))
        exposition = rt.metrics.exposition()[0].decode()
    finally:
        rt.close()
    np.testing.assert_array_equal(result.outputs["out"], rows(2, 0) * 2 + 1)
    assert result.timings.batch is not None
    assert (result.timings.batch.members, result.timings.batch.rows) == (1, 2)
    spans = {e["name"]: e["args"] for e in result.trace["traceEvents"] if e.get("ph") == "X"}
    assert spans["wait for batch"]["members"] == 1 and spans["compute"]["rows"] == 2
    assert result.run_metadata is not None and result.run_metadata.step_stats.dev_stats
    assert 'poolserve_batch_size_sum{model="add"} 2.0' in exposition


def test_auto_a_lone_request_cancelled_in_its_step_gives_the_model_back(tmp_path):
    rt = service(tmp_path, {"max_batch_size": 64}, slow_add_graph(0.2))  # "auto"
    try:

        async def go() -> tuple[Any, InferResult, InferResult]:
            lone = asyncio.ensure_future(rt.infer(InferRequest("add", {"x": rows(1, 0)})))
            await asyncio.sleep(0.05)  # it runs alone, in its step
            queued = asyncio.ensure_future(rt.infer(InferRequest("add", {"x": rows(1, 1)})))
            await asyncio.sleep(0.01)  # this one waits for the model
            lone.cancel()
            gone = await asyncio.gather(lone, return_exceptions=True)
            after = await asyncio.wait_for(queued, 5.0)
            again = await asyncio.wait_for(rt.infer(InferRequest("add", {"x": rows(1, 2)})), 5.0)
            return gone[0], after, again

        gone, after, again = asyncio.run(go())
    finally:
        rt.close()
    assert isinstance(gone, asyncio.CancelledError)
    np.testing.assert_array_equal(after.outputs["out"], rows(1, 1) * 2 + 1)
    np.testing.assert_array_equal(again.outputs["out"], rows(1, 2) * 2 + 1)


def test_a_fixed_delay_waits_for_company_and_a_preferred_size_does_not(tmp_path):
    # a long delay, so that a preferred size going at once is told apart from waiting on a loaded machine
    rt = service(tmp_path, {"max_queue_delay_us": 200_000, "preferred_batch_sizes": [2]})
    try:

        async def one() -> float:
            t0 = time.monotonic()
            await rt.infer(InferRequest("add", {"x": rows(1, 0)}))
            return time.monotonic() - t0

        alone = asyncio.run(one())
        t0 = time.monotonic()
        pair = asyncio.run(infer_all(rt, [rows(1, 0), rows(1, 1)]))
        together = time.monotonic() - t0
    finally:
        rt.close()
    assert alone >= 0.2  # waited the delay for company
    assert pair[0].timings.batch.members == 2 and together < 0.1  # a preferred size goes at once


def test_a_model_without_a_batch_dimension_is_refused_at_start_up(tmp_path):
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [3])
    b.identity(x, name="out")
    with pytest.raises(InvalidArgumentError, match=r"input 'x' has shape \[3\]"):
        service(tmp_path, {}, b.graph_def)
    with pytest.raises(ValueError, match="preferred_batch_sizes"):
        make_config({"models": [{"name": "m", "path": "m.pb", "batching": {"preferred_batch_sizes": [64]}}]})


def test_auto_a_lone_request_runs_its_step_in_its_own_task_and_a_cancelled_one_runs_none(tmp_path):
    rt = service(tmp_path, {"max_batch_size": 64}, slow_add_graph(0.2))  # "auto"
    try:

        async def go() -> tuple[int, InferResult, Any]:
            lone = asyncio.ensure_future(rt.infer(InferRequest("add", {"x": rows(1, 0)})))
            await asyncio.sleep(0.05)
            tasks = len(asyncio.all_tasks())  # this one and the request's: no batch task beside them
            result = await lone
            gone = asyncio.ensure_future(rt.infer(InferRequest("add", {"x": rows(1, 1)})))
            await asyncio.sleep(0)  # it holds the model's slot for one loop iteration ...
            gone.cancel()  # ... and its client goes away then
            after = await asyncio.gather(gone, return_exceptions=True)
            # the slot came back: the next request runs (a slot kept would queue it for ever)
            await asyncio.wait_for(rt.infer(InferRequest("add", {"x": rows(1, 2)})), 5.0)
            return tasks, result, after[0]

        tasks, result, gone = asyncio.run(go())
    finally:
        rt.close()
    assert tasks == 2
    np.testing.assert_array_equal(result.outputs["out"], rows(1, 0) * 2 + 1)
    assert result.timings.batch is not None and result.timings.batch.members == 1
    assert isinstance(gone, asyncio.CancelledError)


def table_graph(static: bool) -> Any:
    """out = x * 2 + 1 (x float32 [None, 3]) and ``table``: ten values that do not depend on x (a
    lookup table, a bias), with its static shape [10] in ``_output_shapes`` when ``static``."""
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [None, 3])
    b.identity(b.add(b.mul(x, b.constant(2.0)), b.constant(1.0)), name="out")
    b.identity(b.constant(np.arange(10, dtype=np.float32)), name="table")
    graph = b.graph_def
    if static:
        node = next(n for n in graph.node if n.name == "table")
        node.attr["_output_shapes"].list.shape.add().dim.add(size=10)
    return graph


@pytest.mark.parametrize("static", [True, False])
def test_an_output_without_a_batch_dimension_is_never_split_between_members(tmp_path, static):
    # ten one-row requests make a batch of ten rows, as many as the table has values: it used to be handed
    # out one value per request
    rt = service(tmp_path, {"max_batch_size": 16, "max_queue_delay_us": 50_000}, table_graph(static))
    inputs = [rows(1, 10.0 * i) for i in range(10)]

    async def burst(fetches: list[str]) -> list[InferResult]:
        return await asyncio.gather(
            *(rt.infer(InferRequest("add", {"x": x}, fetches=fetches)) for x in inputs)
        )

    try:
        first = asyncio.run(burst(["out", "table"]))
        second = asyncio.run(burst(["out", "table"]))
        plain = asyncio.run(burst(["out"]))  # without the table the requests still batch
    finally:
        rt.close()
    for results in (first, second):
        for x, r in zip(inputs, results, strict=True):
            np.testing.assert_array_equal(r.outputs["table"], np.arange(10, dtype=np.float32))
            np.testing.assert_array_equal(r.outputs["out"], x * 2 + 1)
    assert all(r.timings.batch is None or r.timings.batch.members == 1 for r in second)
    for x, r in zip(inputs, plain, strict=True):
        np.testing.assert_array_equal(r.outputs["out"], x * 2 + 1)
    assert max(r.timings.batch.members for r in plain) > 1


def test_an_output_of_unknown_static_shape_is_split_once_two_row_counts_showed_its_batch_dimension(tmp_path):
    rt = service(tmp_path, {"max_batch_size": 16, "max_queue_delay_us": 50_000})  # no _output_shapes
    inputs = [rows(1 + i % 2, 10.0 * i) for i in range(8)]
    try:
        first = asyncio.run(infer_all(rt, inputs))
        second = asyncio.run(infer_all(rt, inputs))
    finally:
        rt.close()
    for results in (first, second):
        for x, r in zip(inputs, results, strict=True):
            np.testing.assert_array_equal(r.outputs["out"], x * 2 + 1)
    # the first batch was the first step seen: its members ran alone, which showed the batch dimension
    assert all(r.timings.batch.members == 1 for r in first)
    assert [r.timings.batch.members for r in second] == [8] * 8
