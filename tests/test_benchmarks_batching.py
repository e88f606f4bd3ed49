"""benchmarks/bench_batching.py's pieces that run nothing heavy: the generated wide MLP is a servable
dense stack, the configs differ only by batching, and the table pairs runs and leaves out failed loads."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np

from benchmarks.bench_batching import table, wide_mlp, write_config
from poolserve.runtime.graph import load_graph_def
from poolserve.runtime.session import Session


def test_the_wide_mlp_gives_one_probability_row_per_input_row(tmp_path: Path) -> None:
    path = tmp_path / "wide.pb"
    wide_mlp(path, width=16, inputs=8, layers=2)
    session = Session(load_graph_def(path))
    out = session.run("probabilities:0", {"features:0": np.ones((3, 8), np.float32)})
    assert out.shape == (3, 10)
    np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-5)


def test_the_two_configs_differ_only_by_batching(tmp_path: Path) -> None:
    models = {"a": tmp_path / "a.pb", "b": tmp_path / "b.pb"}
    write_config(tmp_path / "on.toml", models, True, "intra_op_parallelism_threads: 1")
    write_config(tmp_path / "off.toml", models, False, "intra_op_parallelism_threads: 1")
    on = tomllib.loads((tmp_path / "on.toml").read_text())
    off = tomllib.loads((tmp_path / "off.toml").read_text())
    assert [m["batching"] for m in on["models"]] == [{"max_batch_size": 64}] * 2
    for m in on["models"]:
        del m["batching"]
    assert on == off
    assert off["models"][0]["session_config"] == "intra_op_parallelism_threads: 1"


def row(run: int, mode: str, rps: float, errors: int = 0) -> dict[str, object]:
    return {
        "run": run,
        "batching": mode,
        "model": "m",
        "protocol": "native",
        "clients": 32,
        "rps": rps,
        "p50_ms": 1.0,
        "p99_ms": 2.0,
        "errors": errors,
        "batch_rows": 8.0 if mode == "on" else 0.0,
        "server_cpu_ms_per_request": 1.0,
        "generator_cpu_ms_per_request": 0.1,
    }


def test_the_table_pairs_runs_and_leaves_out_failed_loads() -> None:
    rows = [row(1, "off", 100), row(1, "on", 300), row(2, "off", 200), row(2, "on", 300), row(3, "on", 9, 5)]
    text = table(rows)
    line = next(x for x in text.splitlines() if x.startswith("| m |"))
    assert "| 300 / 100-200 |" in line and "| 1.50-3.00x |" in line  # ratios within a run, not across
    assert "left out: run 3, batching on, m native 32 clients: 5 failed requests, 9 req/s" in text
