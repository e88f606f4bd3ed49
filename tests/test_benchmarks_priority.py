"""The priority benchmark runs end to end as users run it and reports both priorities (a smoke test:
nothing is timed)."""

from __future__ import annotations

import json
from pathlib import Path

from support import run_module


def test_priority_benchmark_reports_both_priorities(tmp_path: Path) -> None:
    out = tmp_path / "priority.json"
    args = ["--quick", "--workloads", "branches1_b64", "--clients", "4", "--json", str(out)]
    done = run_module("benchmarks.bench_priority", *args, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())["results"]["branches1_b64"]
    for mode in ("no_pool", "pool"):
        for priority in ("0", "1"):
            assert result[mode][priority]["requests"] > 0
            assert result[mode][priority]["p99_ms"] >= result[mode][priority]["p50_ms"] > 0
    assert result["ratio"] == result["pool"]["1"]["p99_ms"] / result["pool"]["0"]["p99_ms"]
    assert "priority-1 p99" in done.stdout
