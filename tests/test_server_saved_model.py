"""SavedModels served: loading from the config, and a real server on loopback over every protocol."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from support import ServerProcess

from poolserve.runtime.errors import InvalidArgumentError, NotFoundError
from poolserve.server.config import make_config
from poolserve.server.models import load_model

FIXTURES = Path(__file__).parent / "fixtures" / "saved_models"


def recorded(name: str, signature: str) -> tuple[dict[str, Any], dict[str, Any]]:
    with np.load(FIXTURES / f"{name}.npz") as data:
        ins = {k.split(":", 1)[1]: data[k] for k in data.files if k.startswith(f"{signature}/in:")}
        outs = {k.split(":", 1)[1]: data[k] for k in data.files if k.startswith(f"{signature}/out:")}
    return ins, outs


def load(**model: Any) -> Any:
    config = make_config({"models": [{"name": "m", **model}]}, FIXTURES)
    return load_model(config.models[0], config)


# --- loading from the config ----------------------------------------------------------------------------


def test_a_saved_model_with_control_flow_loads_from_the_config() -> None:
    config = make_config(
        {"models": [{"name": "loop", "path": "loop_model"}]}, FIXTURES.parent / "control_flow"
    )
    entry = load_model(config.models[0], config)
    try:
        assert entry.version == 1
        assert [s.name for s in entry.inputs] == ["n", "x"] and [s.name for s in entry.outputs] == ["y", "z"]
    finally:
        entry.session.close()


def test_base_path_serves_the_highest_version_as_its_version() -> None:
    entry = load(path="tf1_linear")
    try:
        assert entry.version == 2 and entry.path.endswith("tf1_linear/2")
        assert entry.signature_name == "serving_default" and list(entry.signatures) == ["serving_default"]
        assert [s.name for s in entry.inputs] == ["x"] and [s.name for s in entry.outputs] == ["scaled", "y"]
    finally:
        entry.session.close()


def test_configured_version_and_signature() -> None:
    entry = load(path="tf1_linear", version=1)
    assert entry.version == 1
    entry.session.close()
    entry = load(path="tf2_mlp/1", signature_name="hidden")
    try:
        assert entry.version == 1 and entry.signature_name == "hidden"
        assert [s.name for s in entry.outputs] == ["hidden", "logits"]
        other = entry.for_signature("serving_default")
        assert [s.name for s in other.outputs] == ["probabilities"] and other.session is entry.session
        with pytest.raises(InvalidArgumentError, match=r'"nope" not found.*hidden, serving_default'):
            entry.for_signature("nope")
    finally:
        entry.session.close()


def test_config_errors_name_the_model(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="model 'm': no signature 'nope'; its signatures: hidden"):
        load(path="tf2_mlp", signature_name="nope")
    with pytest.raises(InvalidArgumentError, match="model 'm': inputs/outputs aliases apply to GraphDefs"):
        load(path="tf2_mlp", inputs={"a": "x:0"})
    with pytest.raises(NotFoundError, match="model 'm': .*no version 3; its versions: 1, 2"):
        load(path="tf1_linear", version=3)
    with pytest.raises(NotFoundError, match=r"model 'm': .*no MetaGraphDef with tags \{gpu\}.*\{serve\}"):
        load(path="tf1_linear", tags=["gpu"])
    with pytest.raises(
        NotFoundError, match=r"model 'm': .* holds no saved_model\.pb and no numbered version"
    ):
        load(path=str(tmp_path))
    entry = load(path="tf1_linear/1/saved_model.pb")  # the file itself stands for its folder
    assert entry.version == 1
    entry.session.close()


# --- a server on loopback -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("saved_models")
    config = tmp / "server.toml"
    config.write_text(
        f'[[models]]\nname = "mlp"\npath = "{FIXTURES / "tf2_mlp"}"\n\n'
        f'[[models]]\nname = "linear"\npath = "{FIXTURES / "tf1_linear"}"\n\n'
        f'[[models]]\nname = "lookup"\npath = "{FIXTURES / "tf2_lookup"}"\n'
    )
    s = ServerProcess(config, tmp / "server.log")
    yield s
    s.stop()


def close(got: Any, want: Any) -> None:
    np.testing.assert_allclose(np.asarray(got, np.float32), want, atol=1e-4, rtol=1e-4)


def test_native(server: ServerProcess) -> None:
    x, want = recorded("tf2_mlp", "serving_default")
    r = httpx.post(f"{server.url}/v1/models/mlp:run", json={"feeds": {"x": x["x"].tolist()}}, timeout=10)
    assert r.status_code == 200, r.text
    out = r.json()["outputs"]["probabilities"]
    assert out["shape"] == [3, 3]
    close(np.reshape(out["data"], out["shape"]), want["probabilities"])


def test_kserve(server: ServerProcess) -> None:
    x, want = recorded("tf1_linear_v2", "serving_default")
    meta = httpx.get(f"{server.url}/v2/models/linear", timeout=10).json()
    assert meta["versions"] == ["2"] and [i["name"] for i in meta["inputs"]] == ["x"]
    body = {
        "inputs": [
            {"name": "x", "shape": list(x["x"].shape), "datatype": "FP32", "data": x["x"].ravel().tolist()}
        ]
    }
    r = httpx.post(f"{server.url}/v2/models/linear/infer", json=body, timeout=10)
    assert r.status_code == 200, r.text
    outputs = {o["name"]: o for o in r.json()["outputs"]}
    assert r.json()["model_version"] == "2" and sorted(outputs) == ["scaled", "y"]
    for name in ("scaled", "y"):
        close(np.reshape(outputs[name]["data"], outputs[name]["shape"]), want[name])


def test_tfserving_signature_name(server: ServerProcess) -> None:
    x, want = recorded("tf2_mlp", "hidden")
    body = {"signature_name": "hidden", "instances": x["x"].tolist()}
    r = httpx.post(f"{server.url}/v1/models/mlp:predict", json=body, timeout=10)
    assert r.status_code == 200, r.text
    rows = r.json()["predictions"]
    close([row["hidden"] for row in rows], want["hidden"])
    close([row["logits"] for row in rows], want["logits"])
    # no signature_name: serving_default
    x, want = recorded("tf2_mlp", "serving_default")
    r = httpx.post(f"{server.url}/v1/models/mlp:predict", json={"inputs": {"x": x["x"].tolist()}}, timeout=10)
    assert r.status_code == 200, r.text
    close(r.json()["outputs"], want["probabilities"])
    r = httpx.post(
        f"{server.url}/v1/models/mlp:predict", json={"signature_name": "nope", "instances": [[0] * 6]}
    )
    assert r.status_code == 400 and 'signature name: "nope" not found' in r.json()["error"]


def test_tfserving_metadata_lists_every_signature(server: ServerProcess) -> None:
    meta = httpx.get(f"{server.url}/v1/models/mlp/metadata", timeout=10).json()
    sigs = meta["metadata"]["signature_def"]["signature_def"]
    assert sorted(sigs) == ["hidden", "serving_default"]
    assert sorted(sigs["hidden"]["outputs"]) == ["hidden", "logits"]
    assert sigs["hidden"]["inputs"]["x"]["name"] == "hidden_x:0"
    status = httpx.get(f"{server.url}/v1/models/linear", timeout=10).json()
    assert [s["version"] for s in status["model_version_status"]] == ["2"]


def test_string_lookups_over_tf_serving_and_kserve(server: ServerProcess) -> None:
    """Keras' StringLookup and IntegerLookup (tables filled by the init op, one from an asset file): string
    inputs in JSON, TensorFlow's answers out."""
    with np.load(FIXTURES / "tf2_lookup.npz") as data:
        words = [[w.decode() for w in row] for row in data["in:words"].tolist()]
        ids = data["in:ids"].tolist()
        want = {k.split(":", 1)[1]: data[k].tolist() for k in data.files if k.startswith("out:")}
    instances = [{"words": w, "ids": i} for w, i in zip(words, ids, strict=True)]
    r = httpx.post(f"{server.url}/v1/models/lookup:predict", json={"instances": instances}, timeout=10)
    assert r.status_code == 200, r.text
    for key, rows in want.items():
        assert [p[key] for p in r.json()["predictions"]] == rows, key
    body = {
        "inputs": [
            {
                "name": "words",
                "shape": [2, 3],
                "datatype": "BYTES",
                "data": [w for row in words for w in row],
            },
            {"name": "ids", "shape": [2, 2], "datatype": "INT64", "data": [i for row in ids for i in row]},
        ]
    }
    r = httpx.post(f"{server.url}/v2/models/lookup/infer", json=body, timeout=10)
    assert r.status_code == 200, r.text
    outputs = {o["name"]: o for o in r.json()["outputs"]}
    for key, rows in want.items():
        assert np.reshape(outputs[key]["data"], outputs[key]["shape"]).tolist() == rows, key
    bad = httpx.post(
        f"{server.url}/v1/models/lookup:predict", json={"instances": [{"words": [1, 2, 3], "ids": [3, 5]}]}
    )
    assert bad.status_code == 400 and "input 'words'" in bad.json()["error"]
