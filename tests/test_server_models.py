"""server/models.py: ModelEntry over a runtime Signature (default inputs and outputs, aliases, name
resolution and its errors) and the errors of load_model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import add_graph

from poolserve.proto import types_pb2
from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.session import Session
from poolserve.runtime.signature import default_inputs, default_outputs
from poolserve.server.config import make_config
from poolserve.server.models import make_entry
from poolserve.server.service import InferenceService


def multi_graph() -> Any:
    """Two terminal nodes, one with two outputs; a NoOp and an unused Const are not outputs."""
    b = GraphBuilder()
    v = b.placeholder("v", np.int32, [None])
    b.op("Unique", [v], {"T": np.int32, "out_idx": np.int32}, name="uniq", num_outputs=2)
    b.op("Shape", [v], {"T": np.int32, "out_type": np.int64}, name="shape")
    b.constant(1.0, name="unused")
    b.no_op("init")
    return b.graph_def


def test_default_inputs_and_outputs() -> None:
    session = Session(multi_graph())
    entry = make_entry("multi", 1, session)
    assert [(s.name, s.tensor, s.dtype, s.shape) for s in entry.inputs] == [
        ("v", "v:0", types_pb2.DT_INT32, (-1,))
    ]
    outputs = {s.name: s for s in entry.outputs}
    assert list(outputs) == ["uniq", "uniq:1", "shape"]
    assert outputs["uniq:1"].tensor == "uniq:1"
    assert outputs["shape"].dtype == types_pb2.DT_INT64
    assert tuple(default_inputs(session.graph)) == entry.inputs
    assert tuple(default_outputs(session.graph)) == entry.outputs
    session.close()


def test_aliases_and_resolution_errors() -> None:
    session = Session(add_graph())
    entry = make_entry("add", 1, session, inputs={"in": "x"}, outputs={"double": "y:0", "final": "out"})
    assert [s.name for s in entry.inputs] == ["in"]
    assert entry.input_spec("in").tensor == "x:0"
    assert entry.input_spec("x:0").tensor == "x:0"  # graph tensor names work too
    assert entry.input_spec("x").name == "in"
    assert entry.output_spec("double").tensor == "y:0"
    assert entry.output_spec("mul").tensor == "mul:0"
    with pytest.raises(InvalidArgumentError, match=r"Model 'add' has no input 'nope'; its inputs are: in"):
        entry.input_spec("nope")
    with pytest.raises(InvalidArgumentError, match=r"no output 'ghost:7'; its outputs are: double, final"):
        entry.output_spec("ghost:7")
    with pytest.raises(InvalidArgumentError, match=r"model 'add': input 'bad': .*no node 'zzz'"):
        make_entry("add", 1, session, inputs={"bad": "zzz:0"})
    session.close()


def test_bad_model_file_names_the_model(tmp_path: Path) -> None:
    (tmp_path / "bad.pb").write_bytes(b"\x00garbage")
    rt = InferenceService(make_config({"models": [{"name": "broken", "path": "bad.pb"}]}, tmp_path))
    with pytest.raises(InvalidArgumentError, match="model 'broken'"):
        rt.start()


@pytest.mark.parametrize("content", [b"", b"\x22\x02\x08\x1a"], ids=["zero-byte", "no-nodes"])
def test_a_graph_without_nodes_is_refused_naming_the_file(tmp_path: Path, content: bytes) -> None:
    # an empty .pb parses as an empty GraphDef: served, it had no inputs or outputs and refused every request
    (tmp_path / "empty.pb").write_bytes(content)
    rt = InferenceService(make_config({"models": [{"name": "empty", "path": "empty.pb"}]}, tmp_path))
    with pytest.raises(InvalidArgumentError, match=r"model 'empty': .*empty\.pb is a GraphDef with no nodes"):
        rt.start()
