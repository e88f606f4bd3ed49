"""The embedded default configuration and its example models (configs/)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from poolserve.configs import make_models
from poolserve.runtime.graph import Graph
from poolserve.runtime.session import Session
from poolserve.server.config import load_config

MODELS = Path(make_models.__file__).resolve().parent / "models"

# name -> (input shape with a batch of 3, output node, output shape, is a softmax)
SPECS = {
    "mlp": ((3, 64), "probabilities", (3, 10), True),
    "cnn": ((3, 28, 28, 1), "probabilities", (3, 10), True),
    "attention": ((3, 16, 32), "output", (3, 16, 32), False),
    "branches": ((3, 256), "output", (3, 256), False),
}


@pytest.mark.parametrize("name", SPECS)
def test_model_runs(name: str) -> None:
    in_shape, out_node, out_shape, softmax = SPECS[name]
    graph = Graph.load(MODELS / f"{name}.pb")
    x = np.random.default_rng(1).standard_normal(in_shape).astype(np.float32)
    with Session(graph) as sess:
        y = sess.run(f"{out_node}:0", {"input:0": x})
        # a batch of one gives the first row of the batch of three
        y0 = sess.run(f"{out_node}:0", {"input:0": x[:1]})
    assert y.dtype == np.float32
    assert y.shape == out_shape
    assert np.isfinite(y).all()
    np.testing.assert_allclose(y0, y[:1], rtol=1e-5, atol=1e-6)
    if softmax:
        assert (y >= 0).all()
        np.testing.assert_allclose(y.sum(axis=-1), np.ones(3, np.float32), rtol=1e-5)
    else:
        assert y.std() > 0.1  # not collapsed to a constant


@pytest.mark.parametrize("name", SPECS)
def test_model_signature(name: str) -> None:
    """One float32 Placeholder "input" with an unknown batch dim; one terminal node, a named Identity."""
    in_shape, out_node, out_shape, _ = SPECS[name]
    graph = Graph.load(MODELS / f"{name}.pb")
    placeholders = [n for n in graph.nodes.values() if n.op == "Placeholder"]
    assert [p.name for p in placeholders] == ["input"]
    assert placeholders[0].attr_shape("shape") == (-1, *in_shape[1:])
    consumed = {src for n in graph.nodes.values() for src, _ in n.inputs}
    terminals = [n for n in graph.nodes.values() if n.name not in consumed]
    assert [(n.name, n.op) for n in terminals] == [(out_node, "Identity")]
    assert terminals[0].attr("_output_shapes") == [(-1, *out_shape[1:])]
    assert (MODELS / f"{name}.pb").stat().st_size < 1 << 20


def test_committed_models_are_current(tmp_path: Path) -> None:
    make_models.main([str(tmp_path)])
    built = sorted(p.name for p in tmp_path.iterdir())
    assert built == sorted(f"{name}.pb" for name in SPECS)
    for file in built:
        committed = MODELS / file
        assert committed.exists(), (
            f"configs/models/{file} is missing: run `python -m poolserve.configs.make_models`"
        )
        assert committed.read_bytes() == (tmp_path / file).read_bytes(), (
            f"configs/models/{file} is stale: run `python -m poolserve.configs.make_models`"
        )


def test_make_models_is_deterministic() -> None:
    assert make_models.build_all() == make_models.build_all()


def test_default_config_validates() -> None:
    config = load_config()  # the embedded configs/default.toml
    assert (config.server.host, config.server.port, config.server.default_timeout_ms) == (
        "127.0.0.1",
        8500,
        30000,
    )
    assert config.run_handler_pool.enabled
    assert (config.traces.capacity, config.traces.sample_rate) == (1000, 0.0)
    assert [(m.name, m.version) for m in config.models] == [(name, 1) for name in SPECS]
    for m in config.models:
        assert m.path == MODELS / f"{m.name}.pb"
        assert m.path.is_file()


def test_the_benchmark_config_names_the_realistic_fixtures() -> None:
    """benchmarks/configs/realistic.toml (the overload benchmark's server) points at models that exist,
    with every server setting at its default but the gRPC port."""
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "configs" / "realistic.toml"
    config = load_config(path)
    default = load_config()
    assert [m.name for m in config.models] == ["residual_cnn", "mobilenet_v2", "bert_tiny"]
    for m in config.models:
        assert m.path.is_file() and m.path.parent.name == "realistic", m.path
    assert config.server.grpc_port == 0
    assert config.server.model_copy(update={"grpc_port": default.server.grpc_port}) == default.server
    assert config.run_handler_pool == default.run_handler_pool and config.runtime == default.runtime
