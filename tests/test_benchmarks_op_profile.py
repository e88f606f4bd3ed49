"""benchmarks/op_profile.py end to end, tiny: every executed node of a served (untraced) step is clocked, and
the per-op table adds its nodes up. A smoke test, nothing is timed."""

from __future__ import annotations

import json
from pathlib import Path

from support import run_module


def test_op_profile_clocks_every_node_and_groups_by_op(tmp_path: Path) -> None:
    out = tmp_path / "profile.json"
    args = ["--model", "bert_tiny", "--steps", "2", "--json", str(out)]
    proc = run_module("benchmarks.op_profile", *args)
    assert proc.returncode == 0, proc.stderr
    profile = json.loads(out.read_text())["poolserve"]
    nodes = profile["nodes"]
    ops = [op for op, _ in nodes.values()]
    # the optimized plan: fused layer norms and products, no Mean/Rsqrt left
    assert ops.count("_FusedLayerNorm") == 5 and "Mean" not in ops and "Rsqrt" not in ops
    assert all(0 < us < 1e6 for _, us in nodes.values())  # every node ran under the clock
    assert profile["step_ms"] > 0
    line = next(x for x in proc.stdout.splitlines() if x.strip().startswith("_FusedLayerNorm"))
    assert line.split()[1] == "5"
