"""The real KServe v2 gRPC client (tritonclient.grpc) against a real `poolserve serve` process.

tritonclient[grpc] pins a protobuf older than ours, so it cannot run in the test process: a subprocess runs
it with that protobuf first on its path (installed once, alone, into a folder cached under the temp folder;
tritonclient and grpcio are the test environment's), from a script that prints its results as JSON. The
answers are compared with tritonclient.http's, in this process, for the same requests."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as triton_http
from support import ServerProcess
from test_server_kserve import CONFIG, write_models

_NO_NETWORK = ("NewConnectionError", "Temporary failure in name resolution", "Network is unreachable")


def protobuf_requirement() -> str:
    """The protobuf tritonclient[grpc] asks for (``protobuf<7.0,>=6.30.0`` for 2.73)."""
    for requirement in importlib.metadata.requires("tritonclient") or ():
        spec, _, marker = requirement.partition(";")
        if spec.strip().startswith("protobuf") and "'grpc'" in marker:
            return spec.strip()
    raise AssertionError("tritonclient does not name the protobuf of its grpc extra")


@pytest.fixture(scope="module")
def protobuf_path() -> Path:
    """A folder holding only the protobuf tritonclient.grpc needs, to put first on a subprocess's path."""
    requirement = protobuf_requirement()
    folder = "tritonclient-" + re.sub(r"[^A-Za-z0-9.]+", "_", requirement)  # protobuf_7.0_6.30.0
    cache = Path(tempfile.gettempdir()) / "poolserve-test-cache" / folder
    if (cache / "google" / "protobuf").is_dir():
        return cache
    cache.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix="build-", dir=cache.parent))
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(building), requirement],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if pip.returncode != 0:
        shutil.rmtree(building, ignore_errors=True)
        if any(s in pip.stderr for s in _NO_NETWORK):
            pytest.skip(
                f"cannot install {requirement} for tritonclient.grpc (no network): {pip.stderr[-300:]}"
            )
        raise AssertionError(f"pip install {requirement} failed: {pip.stderr}")
    try:
        os.rename(building, cache)  # atomic: a parallel run that got there first keeps its own
    except OSError:
        shutil.rmtree(building, ignore_errors=True)
    return cache


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    folder = tmp_path_factory.mktemp("triton_grpc")
    write_models(folder)
    (folder / "poolserve.toml").write_text(CONFIG)
    proc = ServerProcess(folder / "poolserve.toml", folder / "server.log", "--log-level", "warning")
    try:
        yield proc
    finally:
        proc.stop()


CLIENT = r"""
import json, sys
import numpy as np
import tritonclient.grpc as tg
from tritonclient.utils import InferenceServerException

import google.protobuf
address, x = sys.argv[1], np.asarray(json.loads(sys.argv[2]), np.float32)
c = tg.InferenceServerClient(address)
out = {
    "protobuf": google.protobuf.__version__,
    "live": c.is_server_live(), "ready": c.is_server_ready(),
    "model_ready": [c.is_model_ready("calc"), c.is_model_ready("calc", "1"), c.is_model_ready("nope")],
    "server": c.get_server_metadata(as_json=True),
    "model": c.get_model_metadata("calc", as_json=True),
    "index": c.get_model_repository_index(as_json=True),
}
def infer(**kw):
    i = tg.InferInput("x", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    r = c.infer("calc", [i], **kw)
    return {"y": r.as_numpy("y").tolist(), "total": r.as_numpy("total").tolist(), "response": r.get_response(as_json=True)}
out["infer"] = infer(request_id="req-9", priority=2, timeout=5_000_000, outputs=[tg.InferRequestedOutput("y"), tg.InferRequestedOutput("total")])
out["infer_v1"] = infer(model_version="1")
def error(fn):
    try:
        fn()
    except InferenceServerException as e:
        return [e.status(), e.message()]
    return None
bad = tg.InferInput("x", list(x.shape), "INT32")
bad.set_data_from_numpy(x.astype(np.int32))
out["bad_datatype"] = error(lambda: c.infer("calc", [bad]))
out["unknown_model"] = error(lambda: c.infer("nope", [bad]))
slow = tg.InferInput("x", [], "FP32")
slow.set_data_from_numpy(np.asarray(1.0, np.float32))
out["deadline"] = error(lambda: c.infer("slow", [slow], client_timeout=0.005))
print(json.dumps(out))
"""


def test_tritonclient_grpc_unchanged(protobuf_path: Path, server: ServerProcess) -> None:
    x = np.random.default_rng(2).standard_normal((4, 3)).astype(np.float32)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(protobuf_path), os.environ.get("PYTHONPATH", "")]),
    }
    run = subprocess.run(
        [sys.executable, "-c", CLIENT, server.grpc_address, json.dumps(x.tolist())],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    assert not got["protobuf"].startswith("7."), got["protobuf"]  # the client's own, older protobuf
    assert got["live"] and got["ready"] and got["model_ready"] == [True, True, False]
    assert got["server"]["name"] == "poolserve"
    http = triton_http.InferenceServerClient(server.address)
    try:
        expected_model = http.get_model_metadata("calc")
        inp = triton_http.InferInput("x", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        expected = http.infer("calc", [inp])
    finally:
        http.close()
    model = got["model"]  # JSON of the protobuf: int64 shapes as strings
    for side in ("inputs", "outputs"):
        for t in model[side]:
            t["shape"] = [int(d) for d in t["shape"]]
    assert model == expected_model
    assert [m["name"] for m in got["index"]["models"]] == ["calc", "calc", "slow", "types"]
    infer = got["infer"]
    np.testing.assert_array_equal(np.asarray(infer["y"], np.float32), expected.as_numpy("y"))
    np.testing.assert_array_equal(np.asarray(infer["total"], np.float32), expected.as_numpy("total"))
    assert (infer["response"]["id"], infer["response"]["model_version"]) == ("req-9", "2")
    np.testing.assert_array_equal(np.asarray(got["infer_v1"]["y"], np.float32), x * 2 + 1)
    assert got["bad_datatype"] == [
        "StatusCode.INVALID_ARGUMENT",
        "input 'x' has datatype INT32 but model 'calc' expects FP32",
    ]
    assert got["unknown_model"][0] == "StatusCode.NOT_FOUND"
    assert "Model 'nope' not found" in got["unknown_model"][1]
    assert got["deadline"][0] == "StatusCode.DEADLINE_EXCEEDED"
