"""The hand-off benchmark runs end to end as users run it (a smoke test: nothing is timed)."""

from __future__ import annotations

import json
from pathlib import Path

from support import run_module


def test_handoff_benchmark_reports_both_modes_and_the_pools_hand_offs(tmp_path: Path) -> None:
    out = tmp_path / "handoff.json"
    args = ["--quick", "--workload", "short_long", "--rates", "400,20", "--json", str(out)]
    done = run_module("benchmarks.bench_handoff", *args, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert result["workload"] == "short_long"
    assert result["rates_rps"] == {"branches1.b1": 400.0, "branches8.b64": 20.0}
    for mode in ("no_pool", "pool"):
        assert len(result[mode]["cores"]) == 1 and result[mode]["cores"][0] > 0
        for graph in ("branches1.b1", "branches8.b64"):
            (served,) = result[mode]["graphs"][graph]
            assert served["throughput_rps"] > 0 and served["p99_ms"] >= served["p50_ms"] > 0
    # without the pool nothing is handed a slot; with it, every hand-off timed is a real wait
    assert result["no_pool"]["handoffs"]["count"] == 0
    pool = result["pool"]["handoffs"]
    assert pool["count"] == 0 or pool["p99_ms"] >= pool["p50_ms"] > 0
    assert "hand-off p50/p90/p99 ms" in done.stdout


def test_handoff_benchmark_refuses_rates_that_do_not_fit_the_workload(tmp_path: Path) -> None:
    done = run_module("benchmarks.bench_handoff", "--quick", "--rates", "400", timeout=60)
    assert done.returncode == 2
    assert "--rates needs 2 positive rates (branches1.b1, branches8.b64)" in done.stderr
