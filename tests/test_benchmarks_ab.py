"""The A/B benchmark runs end to end as users run it (a smoke test: nothing is timed)."""

from __future__ import annotations

import json
from pathlib import Path

from support import run_module


def test_ab_benchmark_times_two_checkouts_in_turns(tmp_path: Path) -> None:
    out = tmp_path / "ab.json"
    args = [".", ".", "--model", "mlp_gelu", "--rounds", "3", "--runs", "2", "--json", str(out)]
    done = run_module("benchmarks.bench_ab", *args, timeout=120)
    assert done.returncode == 0, done.stderr
    (result,) = json.loads(out.read_text())["results"]
    assert result["model"] == "mlp_gelu" and result["intra_op_threads"] == 1
    old, new = result["round_medians_ms"]
    assert len(old) == len(new) == 3 and min(old + new) > 0
    lo, hi = result["ratio_range"]
    assert 0 < lo <= result["ratio"] <= hi
    assert "mlp_gelu" in done.stdout


def test_ab_benchmark_refuses_a_folder_that_is_no_checkout(tmp_path: Path) -> None:
    done = run_module("benchmarks.bench_ab", str(tmp_path), ".", "--rounds", "1", timeout=60)
    assert done.returncode == 2
    assert f"{tmp_path} is not a poolserve checkout" in done.stderr
