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

from poolserve.proto import grpc_service_pb2, model_config_pb2

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
out["unsupported"] = {
    "system_status": error(lambda: c.get_system_shared_memory_status()),
    "system_register": error(lambda: c.register_system_shared_memory("r0", "/r0", 64)),
    "cuda_unregister": error(lambda: c.unregister_cuda_shared_memory("r0")),
    "trace": error(lambda: c.get_trace_settings()),
    "trace_update": error(lambda: c.update_trace_settings("calc", {"trace_rate": "1"})),
    "log": error(lambda: c.get_log_settings()),
    "log_update": error(lambda: c.update_log_settings({"log_verbose_level": 1})),
}
out["statistics"] = c.get_inference_statistics("calc", as_json=True)
out["statistics_v1"] = c.get_inference_statistics("calc", "1", as_json=True)
out["statistics_unknown"] = error(lambda: c.get_inference_statistics("nope"))
out["config"] = c.get_model_config("calc", as_json=True)
out["config_v1"] = c.get_model_config("calc", "1", as_json=True)
out["config_unknown"] = error(lambda: c.get_model_config("nope"))
# the streaming API: answers in order, a bad request's error in its place, the stream going on
import queue
answers = queue.Queue()
c.start_stream(callback=lambda result, error: answers.put((result, error)))
for i in range(4):
    good = tg.InferInput("x", list(x.shape), "FP32")
    good.set_data_from_numpy(x + i)
    c.async_stream_infer("calc", [bad] if i == 1 else [good], request_id=f"s{i}", enable_empty_final_response=i == 2)
c.stop_stream()  # waits for the answers
stream = []
while not answers.empty():
    result, err = answers.get()
    if err is not None:
        stream.append({"error": err.message()})
    else:
        r = result.get_response(as_json=True)
        stream.append({"id": r["id"], "y": result.as_numpy("y").tolist(), "final": r.get("parameters", {})})
out["stream"] = stream
# Triton's own descriptors of the messages our proto/model_config.proto and grpc_service.proto declare
from tritonclient.grpc import model_config_pb2, service_pb2
def fields(message):
    return {
        "fields": {f.name: [f.number, f.type, f.is_repeated, f.message_type.full_name if f.message_type else f.enum_type.full_name if f.enum_type else ""] for f in message.fields},
        "enums": {e.name: {v.name: v.number for v in e.values} for e in message.enum_types},
        "nested": {n.name: fields(n) for n in message.nested_types},
    }
out["descriptors"] = {
    **{name: fields(m) for name, m in model_config_pb2.DESCRIPTOR.message_types_by_name.items()},
    **{name: fields(m) for name, m in service_pb2.DESCRIPTOR.message_types_by_name.items()},
}
out["data_type"] = {v.name: v.number for v in model_config_pb2.DESCRIPTOR.enum_types_by_name["DataType"].values}
print(json.dumps(out))
"""


X = np.random.default_rng(2).standard_normal((4, 3)).astype(np.float32)


@pytest.fixture(scope="module")
def client_run(protobuf_path: Path, server: ServerProcess) -> dict[str, Any]:
    """The client script's results (run once for the module's tests)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(protobuf_path), os.environ.get("PYTHONPATH", "")]),
    }
    run = subprocess.run(
        [sys.executable, "-c", CLIENT, server.grpc_address, json.dumps(X.tolist())],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    got: dict[str, Any] = json.loads(run.stdout)
    return got


def test_tritonclient_grpc_unchanged(client_run: dict[str, Any], server: ServerProcess) -> None:
    x, got = X, client_run
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

    # ModelConfig: the gRPC answer (JSON of the protobuf: int64s as strings) is the HTTP one
    http = triton_http.InferenceServerClient(server.address)
    try:
        expected_config = http.get_model_config("calc")
        expected_config_v1 = http.get_model_config("calc", "1")
    finally:
        http.close()
    assert expected_config["platform"] == "tensorflow_graphdef"
    assert expected_config["input"][0]["dims"] == [-1, 3]
    for config, expected in ((got["config"], expected_config), (got["config_v1"], expected_config_v1)):
        assert int64s_as_numbers(config["config"]) == without_defaults(expected)
    assert got["config_unknown"][0] == "StatusCode.NOT_FOUND"

    stream = got["stream"]
    assert [a.get("id") for a in stream] == ["s0", None, "s2", "s3"]
    assert stream[1] == {"error": "input 'x' has datatype INT32 but model 'calc' expects FP32"}
    for i in (0, 2, 3):
        np.testing.assert_array_equal(np.asarray(stream[i]["y"], np.float32), (x + i) * 3 + 1)
    assert stream[2]["final"] == {"triton_final_response": {"bool_param": True}}
    assert stream[0]["final"] == {}


def test_shared_memory_and_settings_calls_say_they_are_not_supported(client_run: dict[str, Any]) -> None:
    got = client_run["unsupported"]
    for name, says in {
        "system_status": "shared memory is not supported by poolserve",
        "system_register": "in raw_input_contents over gRPC",
        "cuda_unregister": "(system or CUDA)",
        "trace": "GET /v1/traces/{request id}",
        "trace_update": "x-request-id",
        "log": "does not support Triton's log settings",
        "log_update": "--log-level",
    }.items():
        assert got[name][0] == "StatusCode.UNIMPLEMENTED", (name, got[name])
        assert says in got[name][1], (name, got[name])


def test_statistics_over_grpc_are_the_http_numbers_in_tritons_message(client_run: dict[str, Any]) -> None:
    stats = client_run["statistics"]["model_stats"]
    assert [(s["name"], s["version"]) for s in stats] == [("calc", "1"), ("calc", "2")]
    latest = stats[1]
    # the client's run inferred on the latest version before it asked: counted, with Triton's fields
    assert int(latest["inference_count"]) >= 1 and int(latest["execution_count"]) >= 1
    assert int(latest["inference_stats"]["success"]["count"]) >= 1
    assert [(s["name"], s["version"]) for s in client_run["statistics_v1"]["model_stats"]] == [("calc", "1")]
    code, message = client_run["statistics_unknown"]
    assert code == "StatusCode.NOT_FOUND" and "Model 'nope' not found" in message


def assert_subset_of_triton(ours: Any, theirs: dict[str, Any], where: str) -> None:
    """Every field of our message (and its nested messages and enums) is Triton's: same number, type,
    repetition and message/enum type (the fields we leave out stay unknown to either side)."""
    for field in ours.fields:
        kind = field.message_type or field.enum_type
        described = [field.number, field.type, field.is_repeated, kind.full_name if kind else ""]
        assert theirs["fields"].get(field.name) == described, f"{where}.{field.name}"
    for enum in ours.enum_types:
        assert {v.name: v.number for v in enum.values} == theirs["enums"][enum.name], f"{where}.{enum.name}"
    for nested in ours.nested_types:
        if not nested.GetOptions().map_entry:
            assert_subset_of_triton(nested, theirs["nested"][nested.name], f"{where}.{nested.name}")


def test_our_kserve_messages_are_tritons(client_run: dict[str, Any]) -> None:
    got = client_run

    for module in (model_config_pb2, grpc_service_pb2):
        for name, message in module.DESCRIPTOR.message_types_by_name.items():
            assert name in got["descriptors"], name
            assert_subset_of_triton(message, got["descriptors"][name], name)
    ours = {v.name: v.number for v in model_config_pb2.DESCRIPTOR.enum_types_by_name["DataType"].values}
    assert ours == got["data_type"]


def int64s_as_numbers(value: Any) -> Any:
    """protobuf's JSON (tritonclient.grpc's as_json) with the int64 fields' strings as numbers."""
    if isinstance(value, dict):
        return {
            k: [int(d) for d in v]
            if k in ("dims", "versions")
            else int(v)
            if k in ("max_queue_delay_microseconds",)
            else int64s_as_numbers(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [int64s_as_numbers(v) for v in value]
    return value


def without_defaults(value: Any) -> Any:
    """Triton's HTTP JSON without the fields at their default (protobuf's JSON leaves them out)."""
    if isinstance(value, dict):
        kept = {k: without_defaults(v) for k, v in value.items()}
        defaults: tuple[Any, ...] = (0, False, "", [], {}, "FORMAT_NONE", "TYPE_INVALID", "KIND_AUTO")
        return {k: v for k, v in kept.items() if not any(v == d and type(v) is type(d) for d in defaults)}
    if isinstance(value, list):
        return [without_defaults(v) for v in value]
    return value
