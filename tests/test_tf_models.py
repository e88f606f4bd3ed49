"""Real TensorFlow-exported models (tests/fixtures/models, made by tools/make_model_fixtures.py) give
TensorFlow's outputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from evaluate import evaluate
from support import load_fixture_io

from poolserve.runtime.graph import Graph, load_graph_def

MODELS_DIR = Path(__file__).parent / "fixtures" / "models"
MANIFEST: dict[str, Any] = json.loads((MODELS_DIR / "models.json").read_text())


def load_io(name: str) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    return load_fixture_io(MODELS_DIR / f"{name}.npz")


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_model_matches_tensorflow(name: str) -> None:
    spec = MANIFEST[name]
    graph_def = load_graph_def(MODELS_DIR / f"{name}.pb")
    assert sorted({n.op for n in graph_def.node}) == spec["ops"]
    graph = Graph(graph_def)
    feeds, expected = load_io(name)
    assert sorted(feeds) == sorted(i["name"] for i in spec["inputs"])
    assert sorted(expected) == sorted(spec["outputs"])

    outputs = evaluate(graph, spec["outputs"], feeds)

    for tensor, actual in zip(spec["outputs"], outputs, strict=True):
        want = expected[tensor]
        actual = np.asarray(actual)
        assert actual.dtype == want.dtype, f"{tensor}: dtype {actual.dtype} != {want.dtype}"
        assert actual.shape == want.shape, f"{tensor}: shape {actual.shape} != {want.shape}"
        scale = max(1.0, float(np.max(np.abs(want))))
        np.testing.assert_allclose(actual, want, rtol=1e-4, atol=1e-5 * scale, err_msg=f"{name} {tensor}")


def test_model_inputs_match_manifest() -> None:
    for name, spec in MANIFEST.items():
        feeds, _ = load_io(name)
        for inp in spec["inputs"]:
            value = feeds[inp["name"]]
            assert value.dtype == np.dtype(inp["dtype"]), name
            assert [None, *value.shape[1:]] == inp["shape"], name


def test_text_graph_def_loads_like_binary() -> None:
    text = load_graph_def(MODELS_DIR / "mlp.pbtxt")
    binary = load_graph_def(MODELS_DIR / "mlp.pb")
    assert len(binary.node) > 0
    assert text == binary
