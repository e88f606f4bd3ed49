"""benchmarks/bench_latency.py end to end, tiny: the engines take turns and the JSON has each one's median.
A smoke test, nothing is timed. The baseline engine is this checkout itself (any poolserve tree works)."""

from __future__ import annotations

import json
from pathlib import Path

from support import ROOT, run_module


def test_bench_latency_runs_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "latency.json"
    args = ["--model", "mlp_gelu", "--rounds", "2", "--runs", "2", "--batch", "2", "--baseline", str(ROOT)]
    proc = run_module("benchmarks.bench_latency", *args, "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "mlp_gelu" in proc.stdout and "baseline" in proc.stdout
    (result,) = json.loads(out.read_text())["models"]
    assert result["batch"] == 2
    for engine in ("poolserve", "poolserve_unoptimized", "baseline"):
        assert result[f"{engine}_ms"] > 0
        assert len(result[f"{engine}_round_medians_ms"]) == 2
    assert result["ratio_to_baseline"] > 0


def test_bench_latency_times_every_graph_of_a_fixtures_folder(tmp_path: Path) -> None:
    # --fixtures: <model>.pb and <model>.npz (tools/export_keras_fixtures.py writes keras.applications so);
    # with no models.json and no --model, every .pb there is a model
    realistic = ROOT / "tests" / "fixtures" / "models" / "realistic"
    folder = tmp_path / "fixtures"
    folder.mkdir()
    for suffix in (".pb", ".npz"):
        (folder / f"tiny{suffix}").write_bytes((realistic / f"mlp_gelu{suffix}").read_bytes())
    out = tmp_path / "latency.json"
    args = ["--fixtures", str(folder), "--rounds", "1", "--runs", "1", "--json", str(out)]
    proc = run_module("benchmarks.bench_latency", *args)
    assert proc.returncode == 0, proc.stderr
    (result,) = json.loads(out.read_text())["models"]
    assert result["model"] == "tiny" and result["poolserve_ms"] > 0
