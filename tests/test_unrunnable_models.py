"""A model with a node poolserve cannot run (an op with no kernel, a float8 dtype): refused at start-up
when the signature it serves needs the node, served otherwise. A SavedModel's other signature that needs it
answers 501 naming the op, as the runtime fails only the steps that need such a node (runtime/graph.py)."""

from __future__ import annotations

import base64
import shutil
from pathlib import Path

import httpx
import numpy as np
import pytest

from poolserve.proto import example_pb2, saved_model_pb2
from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.errors import UnimplementedError
from poolserve.server.app import create_app
from poolserve.server.config import make_config
from poolserve.server.models import load_model

CLASSIFY = Path(__file__).resolve().parent / "fixtures" / "saved_models" / "tf1_classify"


def test_a_graph_whose_outputs_need_an_unknown_op_is_refused_at_start_up(tmp_path: Path) -> None:
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [None, 3])
    b.identity(x, name="out")
    g = b.graph_def
    g.node.add(name="f", op="FrobnicateV7", input=["x"])
    (tmp_path / "bad.pb").write_bytes(g.SerializeToString())
    config = make_config({"models": [{"name": "bad", "path": "bad.pb"}]}, tmp_path)
    # "f" has no consumer: it is one of the graph's outputs, so the served signature needs it
    with pytest.raises(
        UnimplementedError, match="model 'bad': Op type not registered 'FrobnicateV7' \\(node 'f'\\)"
    ):
        load_model(config.models[0], config)
    # named outputs that do not need it: served
    config = make_config(
        {"models": [{"name": "ok", "path": "bad.pb", "outputs": {"out": "out:0"}}]}, tmp_path
    )
    entry = load_model(config.models[0], config)
    try:
        np.testing.assert_array_equal(entry.session.run("out:0", {"x:0": [[1, 2, 3]]}), [[1, 2, 3]])
    finally:
        entry.session.close()


def example(x: list[float]) -> str:
    ex = example_pb2.Example()
    ex.features.feature["x"].float_list.value.extend(x)
    return base64.b64encode(ex.SerializeToString()).decode()


@pytest.mark.anyio
async def test_a_saved_models_other_signature_that_needs_one_answers_501_and_the_rest_is_served(
    tmp_path: Path,
) -> None:
    path = tmp_path / "classify" / "1"
    shutil.copytree(CLASSIFY / "1", path)
    proto = saved_model_pb2.SavedModel.FromString((path / "saved_model.pb").read_bytes())
    for node in proto.meta_graphs[0].graph_def.node:
        if node.name == "value":  # only the regress signature reads it
            node.op = "FancySum"
    (path / "saved_model.pb").write_bytes(proto.SerializeToString())
    app = create_app(make_config({"models": [{"name": "classify", "path": str(path.parent)}]}))
    body = {"signature_name": "predict", "instances": [{"b64": example([1.0, 2.0])}]}
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://t") as c,
    ):
        r = await c.post("/v1/models/classify:predict", json=body)
        assert r.status_code == 200, r.text
        r = await c.post("/v1/models/classify:predict", json={**body, "signature_name": "regress"})
        assert r.status_code == 501, r.text
        assert "Op type not registered 'FancySum' (node 'value')" in r.json()["error"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
