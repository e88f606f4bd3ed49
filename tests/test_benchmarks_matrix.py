"""The pool benchmark matrix: its realistic fixtures give TensorFlow's outputs, its load generator keeps its
promises (schedule, round order, bounds), and one tiny run goes end to end. Smoke tests: nothing is timed.

``benchmarks/`` is not a package of the wheel: the harness is loaded from its file, the matrix run as users
run it (``python -m benchmarks.bench_pool_matrix`` from the repository root)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from support import ROOT, load_fixture_io, run_module

from poolserve import Session, load_graph_def

REALISTIC = ROOT / "tests" / "fixtures" / "models" / "realistic"
MANIFEST = json.loads((REALISTIC / "models.json").read_text())


def _load_harness() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pool_harness", ROOT / "benchmarks" / "pool_harness.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


harness = _load_harness()


def load_io(name: str) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    return load_fixture_io(REALISTIC / f"{name}.npz")


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_realistic_fixture_matches_tensorflow(name: str) -> None:
    spec = MANIFEST[name]
    graph_def = load_graph_def(REALISTIC / f"{name}.pb")
    assert sorted({n.op for n in graph_def.node}) == spec["ops"]
    feeds, expected = load_io(name)
    assert sorted(feeds) == sorted(i["name"] for i in spec["inputs"])
    assert all(len(v) == spec["batch"] for v in feeds.values())
    with Session(graph_def) as s:  # the default configuration, as the benchmark serves it
        outputs = s.run(spec["outputs"], feeds)
    for tensor, actual in zip(spec["outputs"], outputs, strict=True):
        want = expected[tensor]
        assert actual.dtype == want.dtype and actual.shape == want.shape, tensor
        scale = max(1.0, float(np.max(np.abs(want))))
        np.testing.assert_allclose(actual, want, rtol=1e-4, atol=1e-5 * scale, err_msg=f"{name} {tensor}")


def test_realistic_fixtures_stay_small() -> None:
    sizes = {p.name: p.stat().st_size for p in REALISTIC.iterdir()}
    assert max(sizes.values()) < 3 << 20, sizes
    assert sum(sizes.values()) < 10 << 20, sizes
    assert {p.stem for p in REALISTIC.glob("*.pb")} == set(MANIFEST)


def test_poisson_schedule_rates_and_order() -> None:
    arrivals = harness.poisson_schedule([1000.0, 0.0, 250.0], 2.0, np.random.default_rng(0))
    times = [t for t, _ in arrivals]
    assert times == sorted(times) and all(0 <= t < 2.0 for t in times)
    counts = np.bincount([g for _, g in arrivals], minlength=3)
    assert 1800 < counts[0] < 2200 and counts[1] == 0 and 400 < counts[2] < 600


def test_rounds_alternate_abba() -> None:
    assert [harness.mode_of_round(r) for r in range(6)] == [
        "no_pool",
        "pool",
        "pool",
        "no_pool",
        "no_pool",
        "pool",
    ]


@pytest.mark.parametrize("spec", ["closed", "closed:0", "closed:2.5", "open:-1", "poisson:3"])
def test_bad_load_is_refused(spec: str) -> None:
    with pytest.raises(ValueError, match="load"):
        harness.Load.parse(spec)


def test_loops_count_every_request_of_their_graph() -> None:
    calls: list[tuple[int, bool]] = []

    def run(g: int, pool: bool) -> None:
        calls.append((g, pool))

    tally = harness.closed_loop(run, 2, 3, 0.05, True)
    assert [len(lat) for lat in tally.latencies] == [sum(1 for g, _ in calls if g == i) for i in range(2)]
    assert all(pool for _, pool in calls) and tally.seconds >= 0.05 and not tally.errors

    calls.clear()
    tally = harness.open_loop(run, [400.0, 100.0], 0.1, False, np.random.default_rng(1), senders=4)
    assert [len(lat) for lat in tally.latencies] == [sum(1 for g, _ in calls if g == i) for i in range(2)]
    assert sum(tally.dropped) == 0 and not any(pool for _, pool in calls)


def test_failing_graph_is_reported() -> None:
    def run(g: int, pool: bool) -> None:
        raise ValueError("boom")

    tally = harness.closed_loop(run, 1, 2, 0.05, False)
    assert tally.errors and "boom" in tally.errors[0]


def test_matrix_runs_end_to_end(tmp_path: Path) -> None:
    """Realistic and generated graphs, a closed and an open loop, the JSON report and the verdicts."""
    out = tmp_path / "matrix.json"
    args = ["--workloads", "mlp_gelu,chain200_b1", "--loads", "closed:2,open:0.5", "--rounds", "2"]
    args += ["--seconds", "0.05", "--probe-seconds", "0.05", "--json", str(out)]
    proc = run_module("benchmarks.bench_pool_matrix", *args)
    assert proc.returncode == 0, proc.stderr
    assert "median p99 ratio" in proc.stdout
    report = json.loads(out.read_text())
    assert set(report["poolserve"]) == {"mlp_gelu", "chain200_b1"}
    for result in report["poolserve"].values():
        assert set(result["loads"]) == {"closed:2", "open:0.5"}
        for load in result["loads"].values():
            for mode in ("no_pool", "pool"):
                assert {"p50_ms", "p99_ms", "throughput_rps"} <= set(load[mode]["all"])
    assert "median_p99" in report["targets"]


def test_matrix_graphs_all_build(tmp_path: Path) -> None:
    """Every workload has 1-3 graphs; each is a realistic fixture or a generated graph that runs."""
    script = f"""
from pathlib import Path
from benchmarks.bench_pool_matrix import WORKLOADS, materialize
assert len(WORKLOADS) >= 12 and all(1 <= len(gs) <= 3 for gs in WORKLOADS.values())
for g in sorted({{g for gs in WORKLOADS.values() for g in gs}}):
    materialize(g, Path({str(tmp_path)!r}))
"""
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert {p.stem for p in tmp_path.glob("*.pb")} >= {"branches1.b1", "branches8.b64", "chain200.b1"}


def test_matrix_refuses_unknown_workload() -> None:
    proc = run_module("benchmarks.bench_pool_matrix", "--workloads", "nope", timeout=120)
    assert proc.returncode != 0 and "unknown workloads ['nope']" in proc.stderr


def test_matrix_ranges_spans_the_runs(tmp_path: Path) -> None:
    def run(p99_on: float, tput_on: float) -> dict:
        load = {
            "no_pool": {"g": {"requests": 10, "p99_ms": 10.0, "throughput_rps": 100.0}},
            "pool": {"g": {"requests": 10, "p99_ms": p99_on, "throughput_rps": tput_on}},
        }
        target = {"met": False, "text": "every cell", "detail": "1 of 2 cells"}
        return {"poolserve": {"w": {"graphs": ["g"], "loads": {"closed:8": load}}}, "targets": {"t": target}}

    paths = []
    for i, (p99, tput) in enumerate([(5.0, 120.0), (7.0, 90.0)]):
        paths.append(tmp_path / f"run{i}.json")
        paths[-1].write_text(json.dumps(run(p99, tput)))
    done = run_module("benchmarks.matrix_ranges", *map(str, paths), timeout=60)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "| w | closed:8 | g | 0.50-0.70x | 0.90-1.20x | - | - |" in out
    assert "- run 2: every cell: NOT met (1 of 2 cells)" in out


def test_capacity_is_what_an_open_loop_sustains_not_what_a_closed_loop_claims(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """probe_capacity offers the closed-loop probe's rates as an open loop and scales them, mix kept, to
    the share served: an engine of ~200 requests a second (one at a time, 5 ms each) whose closed loop
    claimed 800 and 200 a second for its two graphs is probed near 160 and 40; an engine that keeps up
    keeps the closed loop's rates."""
    gate = threading.Lock()

    def slow(g: int, pool: bool) -> None:
        with gate:
            time.sleep(0.005)

    def claimed(run: object, graphs: int, clients: int, seconds: float, pool: bool) -> object:
        tally = harness.Tally.empty(graphs)
        tally.latencies = [[0.001] * int(800 * seconds), [0.001] * int(200 * seconds)]
        tally.seconds = seconds
        return tally

    monkeypatch.setattr(harness, "closed_loop", claimed)
    capacity, probed = harness.probe_capacity(slow, 2, 0.5)
    assert probed["closed_loop_rps"] == [800.0, 200.0]
    assert 0.1 < probed["scale"] < 0.35 and capacity[0] == pytest.approx(4 * capacity[1])
    assert 120 < sum(capacity) < 260

    capacity, probed = harness.probe_capacity(lambda g, pool: None, 2, 0.5)
    assert probed["scale"] == 1.0 and capacity == [800.0, 200.0]
