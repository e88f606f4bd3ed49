"""SavedModels made by TensorFlow (``tools/make_saved_model_fixtures.py``) load and match TensorFlow's outputs."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import poolserve
from poolserve.proto import saved_model_pb2, types_pb2
from poolserve.runtime.errors import (
    DataLossError,
    InvalidArgumentError,
    NotFoundError,
    UnimplementedError,
)
from poolserve.runtime.saved_model import (
    DEFAULT_SIGNATURE,
    SavedModel,
    is_saved_model_path,
    load_saved_model,
    resolve_version,
)
from poolserve.runtime.tensor import from_ndarray

FIXTURES = Path(__file__).parent / "fixtures" / "saved_models"
TF2 = FIXTURES / "tf2_mlp"
TF1 = FIXTURES / "tf1_linear"


def recorded(name: str) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """signature -> (inputs, outputs) TensorFlow computed, by signature key."""
    out: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    with np.load(FIXTURES / f"{name}.npz") as data:
        for key in data.files:
            sig, rest = key.split("/", 1)
            kind, tensor = rest.split(":", 1)
            ins, outs = out.setdefault(sig, ({}, {}))
            (ins if kind == "in" else outs)[tensor] = data[key]
    return out


def check_matches(model: SavedModel, fixture: str) -> None:
    io = recorded(fixture)
    assert sorted(model.signatures) == sorted(io)
    for sig, (inputs, expected) in io.items():
        got = model.run(inputs, sig)
        assert sorted(got) == sorted(expected), sig
        for key, want in expected.items():
            assert got[key].dtype == want.dtype and got[key].shape == want.shape
            np.testing.assert_allclose(got[key], want, atol=1e-4, rtol=1e-4, err_msg=f"{sig}/{key}")


@pytest.fixture
def tf2() -> Any:
    model = load_saved_model(TF2)
    yield model
    model.close()


def test_tf2_keras_export_every_signature_matches(tf2: SavedModel) -> None:
    assert tf2.version == 1 and tf2.tags == ("serve",)
    check_matches(tf2, "tf2_mlp")
    # every call was inlined: the graph runs without the library
    ops = {n.op for n in tf2.session.graph.nodes.values()}
    assert "StatefulPartitionedCall" not in ops and {"VarHandleOp", "ReadVariableOp"} <= ops


def test_tf2_keras_model_export_at_default_settings() -> None:
    model = load_saved_model(FIXTURES / "tf2_cnn")
    try:
        assert sorted(model.signatures) == ["serve", "serving_default"]
        check_matches(model, "tf2_cnn")
    finally:
        model.close()


def test_tf2_signature_specs_come_from_the_signature_def(tf2: SavedModel) -> None:
    sig = tf2.signature("hidden")
    assert [s.name for s in sig.inputs] == ["x"]
    assert [(s.name, s.shape) for s in sig.outputs] == [("hidden", (-1, 8)), ("logits", (-1, 3))]
    assert tf2.default_signature == "serving_default"
    assert tf2.signature() is tf2.signatures["serving_default"]
    with pytest.raises(InvalidArgumentError, match=r"nope.*hidden, serving_default"):
        tf2.signature("nope")


def test_tf1_each_version_matches() -> None:
    for version in (1, 2):
        model = load_saved_model(TF1 / str(version))
        try:
            assert model.version == version
            assert {"VariableV2", "Assign", "RestoreV2"} <= {n.op for n in model.session.graph.nodes.values()}
            check_matches(model, f"tf1_linear_v{version}")
        finally:
            model.close()


def test_base_path_serves_the_highest_version() -> None:
    model = load_saved_model(TF1)
    try:
        assert model.version == 2 and model.path == TF1 / "2"
        check_matches(model, "tf1_linear_v2")
    finally:
        model.close()
    assert resolve_version(TF1, 1) == (TF1 / "1", 1)
    with pytest.raises(NotFoundError, match="no version 7; its versions: 1, 2"):
        resolve_version(TF1, 7)


def test_public_api() -> None:
    model = poolserve.load_saved_model(TF1 / "1", tags=["serve"])
    try:
        assert isinstance(model, poolserve.SavedModel)
        inputs, _ = recorded("tf1_linear_v1")["serving_default"]
        assert set(model.run(inputs)) == {"scaled", "y"}
    finally:
        model.close()


def test_is_saved_model_path(tmp_path: Path) -> None:
    assert is_saved_model_path(TF1) and is_saved_model_path(TF1 / "1")
    assert is_saved_model_path(TF1 / "1" / "saved_model.pb")  # the file stands for its folder
    assert not is_saved_model_path(tmp_path) and not is_saved_model_path(TF1 / "1" / "variables")


# --- errors name the file -----------------------------------------------------------------------------------


def copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "model" / "1"
    shutil.copytree(src, dst)
    return dst


def test_missing_variables_index_names_the_file(tmp_path: Path) -> None:
    path = copy(TF2 / "1", tmp_path)
    (path / "variables" / "variables.index").unlink()
    with pytest.raises(NotFoundError, match=r"checkpoint index is missing: .*variables/variables\.index"):
        load_saved_model(path)


def test_corrupt_saved_model_pb_names_the_file(tmp_path: Path) -> None:
    path = copy(TF1 / "1", tmp_path)
    (path / "saved_model.pb").write_bytes(b"\x0a\xff\xff\xff not a proto")
    with pytest.raises(InvalidArgumentError, match=r"saved_model\.pb is not a valid SavedModel"):
        load_saved_model(path)


def test_missing_serve_tag_lists_the_tags_present(tmp_path: Path) -> None:
    path = copy(TF1 / "1", tmp_path)
    proto = saved_model_pb2.SavedModel.FromString((path / "saved_model.pb").read_bytes())
    del proto.meta_graphs[0].meta_info_def.tags[:]
    proto.meta_graphs[0].meta_info_def.tags.extend(["train", "gpu"])
    (path / "saved_model.pb").write_bytes(proto.SerializeToString())
    with pytest.raises(
        NotFoundError, match=r"saved_model\.pb: no MetaGraphDef with tags \{serve\}.*\{gpu, train\}"
    ):
        load_saved_model(path)


def test_corrupt_checkpoint_data_is_data_loss(tmp_path: Path) -> None:
    path = copy(TF1 / "1", tmp_path)
    data = path / "variables" / "variables.data-00000-of-00001"
    raw = bytearray(data.read_bytes())
    raw[0] ^= 0xFF
    data.write_bytes(bytes(raw))
    with pytest.raises(DataLossError, match=r"variables\.data-00000-of-00001: checksum mismatch"):
        load_saved_model(path)


def test_not_a_saved_model_folder(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="holds no saved_model.pb and no numbered version folder"):
        load_saved_model(tmp_path)
    with pytest.raises(NotFoundError, match="not found or not a folder"):
        load_saved_model(tmp_path / "missing")


def test_unknown_op_names_the_node_and_the_model(tmp_path: Path) -> None:
    path = copy(TF1 / "1", tmp_path)
    proto = saved_model_pb2.SavedModel.FromString((path / "saved_model.pb").read_bytes())
    for node in proto.meta_graphs[0].graph_def.node:
        if node.name == "y":
            node.op = "FancyTanh"
    (path / "saved_model.pb").write_bytes(proto.SerializeToString())
    saved = load_saved_model(path)  # loads, as TensorFlow's does: the signature that needs it fails
    try:
        with pytest.raises(UnimplementedError, match=r"Op type not registered 'FancyTanh' \(node 'y'\)"):
            saved.signatures[DEFAULT_SIGNATURE].check_runnable()
    finally:
        saved.close()


def test_a_slice_spec_that_disagrees_with_the_checkpoint_is_an_error(tmp_path: Path) -> None:
    path = copy(TF1 / "1", tmp_path)
    proto = saved_model_pb2.SavedModel.FromString((path / "saved_model.pb").read_bytes())
    for node in proto.meta_graphs[0].graph_def.node:
        if node.name == "save/RestoreV2/shape_and_slices":
            node.attr["value"].tensor.string_val[0] = b"7 0,2"
    (path / "saved_model.pb").write_bytes(proto.SerializeToString())
    with pytest.raises(InvalidArgumentError, match=r"the slice spec '7 0,2' says \[7\]"):
        load_saved_model(path)


def test_tf1_main_op_runs_after_restore_with_asset_paths_fed(tmp_path: Path) -> None:
    """TF1's legacy_init_op / main_op runs once the variables are restored, with each asset's path fed."""
    path = copy(TF1 / "1", tmp_path)
    proto = saved_model_pb2.SavedModel.FromString((path / "saved_model.pb").read_bytes())
    mg = proto.meta_graphs[0]
    nodes = mg.graph_def.node
    nodes.add(name="asset_path", op="Placeholder").attr["dtype"].type = types_pb2.DT_STRING
    var = nodes.add(name="asset_var", op="VariableV2")
    var.attr["dtype"].type = types_pb2.DT_STRING
    var.attr["shape"].shape.SetInParent()
    nodes.add(name="init_asset", op="Assign", input=["asset_var", "asset_path"]).attr[
        "T"
    ].type = types_pb2.DT_STRING
    zeros = nodes.add(name="zeros", op="Const")
    zeros.attr["dtype"].type = types_pb2.DT_FLOAT
    zeros.attr["value"].tensor.CopyFrom(from_ndarray(np.zeros(2, np.float32)))
    nodes.add(name="init_b", op="Assign", input=["b", "zeros"]).attr["T"].type = types_pb2.DT_FLOAT
    nodes.add(name="main", op="NoOp", input=["^init_asset", "^init_b"])
    mg.collection_def["legacy_init_op"].node_list.value.append("main")
    mg.asset_file_def.add(filename="vocab.txt").tensor_info.name = "asset_path:0"
    (path / "saved_model.pb").write_bytes(proto.SerializeToString())
    model = load_saved_model(path)
    try:
        assert model.session.run("asset_var:0") == str(path / "assets" / "vocab.txt").encode()
        inputs, _ = recorded("tf1_linear_v1")["serving_default"]
        w = model.session.run("w:0")
        np.testing.assert_allclose(model.run(inputs)["y"], np.tanh(inputs["x"] @ w), atol=1e-6)
    finally:
        model.close()


def test_tf1_partitioned_variables_restore_by_slice_and_match() -> None:
    """TF1 partitioned variables (an embedding in 3 row parts, a weight in 2 column parts) restored from
    their checkpoint slices; lookups by both partition strategies (DynamicPartition, ResourceGather,
    DynamicStitch) give TensorFlow's numbers."""
    model = load_saved_model(FIXTURES / "tf1_partitioned")
    try:
        check_matches(model, "tf1_partitioned")
        ops = {n.op for n in model.session.graph.nodes.values()}
        assert {"DynamicPartition", "ResourceGather"} <= ops and ops & {
            "DynamicStitch",
            "ParallelDynamicStitch",
        }
    finally:
        model.close()
