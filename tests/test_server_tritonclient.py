"""A real KServe v2 client (NVIDIA's tritonclient) against a real `poolserve serve` process."""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import tritonclient.http as triton
from support import ServerProcess
from test_server_kserve import CONFIG, write_models
from tritonclient.utils import InferenceServerException

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("triton")
    write_models(folder)
    (folder / "poolserve.toml").write_text(CONFIG)
    proc = ServerProcess(folder / "poolserve.toml", folder / "server.log", "--log-level", "warning")
    try:
        yield proc.address
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def client(server):
    c = triton.InferenceServerClient(server)
    try:
        yield c
    finally:
        c.close()


def test_health_and_metadata(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("calc")
    assert client.is_model_ready("calc", "1")
    assert not client.is_model_ready("nope")
    assert not client.is_model_ready("calc", "9")
    meta = client.get_server_metadata()
    assert meta["name"] == "poolserve" and "binary_tensor_data" in meta["extensions"]
    model = client.get_model_metadata("calc")
    assert model["versions"] == ["1", "2"] and model["platform"] == "tensorflow_graphdef"
    assert model["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 3]}]
    assert client.get_model_metadata("calc", "1")["name"] == "calc"


@pytest.mark.parametrize("binary_in", [True, False])
@pytest.mark.parametrize("binary_out", [True, False])
def test_infer(client, binary_in, binary_out):
    x = np.random.default_rng(1).standard_normal((5, 3)).astype(np.float32)
    inp = triton.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=binary_in)
    outputs = [triton.InferRequestedOutput(n, binary_data=binary_out) for n in ("y", "total")]
    result = client.infer("calc", [inp], outputs=outputs, request_id="req-7")
    y = result.as_numpy("y")
    assert y.dtype == np.float32 and y.shape == (5, 3)
    np.testing.assert_array_equal(y, x * 3 + 1)
    np.testing.assert_allclose(result.as_numpy("total"), x.sum(axis=1), rtol=1e-6)
    response = result.get_response()
    assert response["id"] == "req-7" and response["model_version"] == "2"
    assert ("data" in response["outputs"][0]) == (not binary_out)


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
@pytest.mark.parametrize("binary", [True, False])
def test_infer_with_a_compressed_request(client, algorithm, binary):
    x = np.random.default_rng(2).standard_normal((4, 3)).astype(np.float32)
    inp = triton.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=binary)
    result = client.infer("calc", [inp], request_compression_algorithm=algorithm)
    np.testing.assert_array_equal(result.as_numpy("y"), x * 3 + 1)


def test_infer_version_and_default_outputs(client):
    x = np.ones((2, 3), np.float32)
    inp = triton.InferInput("x", [2, 3], "FP32")
    inp.set_data_from_numpy(x)
    result = client.infer("calc", [inp], model_version="1")  # no outputs: all of them, in binary
    np.testing.assert_array_equal(result.as_numpy("y"), np.full((2, 3), 3.0, np.float32))
    np.testing.assert_array_equal(result.as_numpy("total"), [3.0, 3.0])
    assert result.get_response()["model_version"] == "1"


@pytest.mark.parametrize("binary", [True, False])
def test_infer_bytes_bool_int_half(client, binary):
    arrays = {
        "a": np.array([3, -4], np.int32),
        "flag": np.array([True, False, False]),
        "text": np.array(["héllo".encode(), b"", b"x"], dtype=np.object_),
        "half": np.array([1.5, -2], np.float16),
    }
    datatypes = {"a": "INT32", "flag": "BOOL", "text": "BYTES", "half": "FP16"}
    inputs = []
    for name, value in arrays.items():
        inp = triton.InferInput(name, list(value.shape), datatypes[name])
        inp.set_data_from_numpy(value, binary_data=binary)
        inputs.append(inp)
    outputs = [
        triton.InferRequestedOutput(n, binary_data=binary) for n in ("a2", "not_flag", "text_out", "half_out")
    ]
    result = client.infer("types", inputs, outputs=outputs)
    np.testing.assert_array_equal(result.as_numpy("a2"), [6, -8])
    np.testing.assert_array_equal(result.as_numpy("not_flag"), [False, True, True])
    text = result.as_numpy("text_out").tolist()
    # tritonclient hands JSON BYTES back as the str it parsed, binary ones as bytes
    assert text == (arrays["text"].tolist() if binary else ["héllo", "", "x"])
    half = result.as_numpy("half_out")
    assert half.dtype == np.float16
    np.testing.assert_array_equal(half, arrays["half"])


@pytest.mark.parametrize("binary_out", [True, False])
def test_infer_bfloat16(client, binary_out):
    # tritonclient sends BF16 as ml_dtypes.bfloat16 arrays, in binary data only over HTTP
    x = np.array([1.5, -2.25, 1 / 3, 1.0e38], ml_dtypes.bfloat16)
    inp = triton.InferInput("bf16", list(x.shape), "BF16")
    inp.set_data_from_numpy(x, binary_data=True)
    result = client.infer(
        "types", [inp], outputs=[triton.InferRequestedOutput("bf16_out", binary_data=binary_out)]
    )
    y = result.as_numpy("bf16_out")
    assert y.dtype == ml_dtypes.bfloat16 and result.get_response()["outputs"][0]["datatype"] == "BF16"
    np.testing.assert_array_equal(
        y.view(np.uint16), (x.astype(np.float32) * 2).astype(ml_dtypes.bfloat16).view(np.uint16)
    )


def test_infer_parameters_and_trace(client):
    inp = triton.InferInput("x", [1, 3], "FP32")
    inp.set_data_from_numpy(np.ones((1, 3), np.float32))
    result = client.infer(
        "calc",
        [inp],
        priority=2,
        timeout=10_000_000,
        parameters={"trace": True, "use_run_handler_pool": False},
    )
    np.testing.assert_array_equal(result.as_numpy("y"), [[4.0, 4.0, 4.0]])
    trace = json.loads(result.get_response()["parameters"]["trace"])
    wait = next(e for e in trace["traceEvents"] if e.get("name") == "wait for run handler")
    assert wait["args"]["run_handler_pool"] is False


def test_errors_reach_the_client(client):
    bad = triton.InferInput("x", [2, 2], "FP32")
    bad.set_data_from_numpy(np.ones((2, 2), np.float32))
    with pytest.raises(
        InferenceServerException, match=r"Cannot feed value of shape \(2, 2\) for Tensor 'x:0'"
    ):
        client.infer("calc", [bad])
    wrong_type = triton.InferInput("x", [1, 3], "FP64")
    wrong_type.set_data_from_numpy(np.ones((1, 3), np.float64))
    with pytest.raises(
        InferenceServerException, match="input 'x' has datatype FP64 but model 'calc' expects FP32"
    ):
        client.infer("calc", [wrong_type])
    ok = triton.InferInput("x", [1, 3], "FP32")
    ok.set_data_from_numpy(np.ones((1, 3), np.float32))
    with pytest.raises(InferenceServerException, match="Model 'nope' not found"):
        client.infer("nope", [ok])
    with pytest.raises(InferenceServerException, match="has no output 'missing'"):
        client.infer("calc", [ok], outputs=[triton.InferRequestedOutput("missing")])
    scalar = triton.InferInput("x", [], "FP32")
    scalar.set_data_from_numpy(np.array(1.0, np.float32))
    with pytest.raises(InferenceServerException, match="deadline"):
        client.infer("slow", [scalar], timeout=1)
    with pytest.raises(InferenceServerException, match="Model 'nope' not found"):
        client.get_model_metadata("nope")


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (lambda c: c.get_system_shared_memory_status(), "shared memory is not supported by poolserve"),
        (lambda c: c.register_system_shared_memory("r0", "/r0", 64), "send the tensors in the request"),
        (lambda c: c.unregister_system_shared_memory("r0"), "shared memory is not supported"),
        (lambda c: c.unregister_system_shared_memory(), "shared memory is not supported"),
        (lambda c: c.get_cuda_shared_memory_status("r0"), "(system or CUDA)"),
        (lambda c: c.register_cuda_shared_memory("r0", b"handle", 0, 64), "shared memory is not supported"),
        (lambda c: c.unregister_cuda_shared_memory(), "shared memory is not supported"),
        (lambda c: c.get_trace_settings(), "GET /v1/traces/{request id}"),
        (lambda c: c.update_trace_settings("calc", {"trace_rate": "1"}), "trace settings"),
        (lambda c: c.get_log_settings(), "log settings"),
        (lambda c: c.update_log_settings({"log_verbose_level": 1}), "--log-level"),
    ],
)
def test_shared_memory_and_settings_calls_say_they_are_not_supported(client, call, says):
    with pytest.raises(InferenceServerException) as info:
        call(client)
    assert info.value.status() == "501" and says in info.value.message()


def test_get_inference_statistics(client):
    """tritonclient's get_inference_statistics: every model, a model, a version; the answer Triton's."""
    before = client.get_inference_statistics("calc", "1")["model_stats"][0]
    inp = triton.InferInput("x", [4, 3], "FP32")
    inp.set_data_from_numpy(np.ones((4, 3), np.float32))
    for _ in range(2):
        client.infer("calc", [inp], model_version="1")
    after = client.get_inference_statistics("calc", "1")["model_stats"]
    assert [(s["name"], s["version"]) for s in after] == [("calc", "1")]
    stat = after[0]
    assert stat["inference_stats"]["success"]["count"] == before["inference_stats"]["success"]["count"] + 2
    assert stat["execution_count"] == before["execution_count"] + 2
    assert set(stat["inference_stats"]) >= {
        "success",
        "fail",
        "queue",
        "compute_input",
        "compute_infer",
        "compute_output",
    }
    assert stat["batch_stats"][0]["batch_size"] == 1
    assert [(s["name"], s["version"]) for s in client.get_inference_statistics("calc")["model_stats"]] == [
        ("calc", "1"),
        ("calc", "2"),
    ]
    assert {s["name"] for s in client.get_inference_statistics()["model_stats"]} == {"calc", "slow", "types"}
    assert "statistics" in client.get_server_metadata()["extensions"]
    with pytest.raises(InferenceServerException, match="Model 'nope' not found") as info:
        client.get_inference_statistics("nope")
    assert info.value.status() == "404"
