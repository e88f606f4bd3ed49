"""KServe's ModelConfig (server/kserve_config.py) over gRPC and its HTTP twin, on the real app and runtime
(the app of test_server_grpc_stream.py), checked equal to each other and to Triton's JSON form."""

from __future__ import annotations

from typing import Any

import grpc
import httpx
import pytest
import test_server_grpc_stream as stream

from poolserve.proto import grpc_service_pb2 as pb
from poolserve.server.kserve_config import to_json

pytestmark = pytest.mark.anyio
# the stream tests' fixtures: an app serving batched, unbatched and SavedModel models, its gRPC stub, HTTP
anyio_backend, app, kserve, http = stream.anyio_backend, stream.app, stream.kserve, stream.http


async def config_of(kserve: Any, http: httpx.AsyncClient, name: str, version: str = "") -> dict[str, Any]:
    """The model's configuration over gRPC, checked equal to the HTTP answer (Triton's JSON form)."""
    response = await kserve.ModelConfig(pb.ModelConfigRequest(name=name, version=version))
    path = f"/v2/models/{name}/versions/{version}/config" if version else f"/v2/models/{name}/config"
    answer = await http.get(path)
    assert answer.status_code == 200, answer.text
    got: dict[str, Any] = answer.json()
    assert to_json(response.config) == got
    return got


async def test_config_of_a_graph_def_without_batching(kserve: Any, http: httpx.AsyncClient) -> None:
    config = await config_of(kserve, http, "calc")
    assert (config["name"], config["platform"], config["max_batch_size"]) == (
        "calc",
        "tensorflow_graphdef",
        0,
    )
    assert config["input"] == [
        {
            "name": "x",
            "data_type": "TYPE_FP32",
            "format": "FORMAT_NONE",
            "dims": [-1, 3],
            "optional": False,
        }
    ]
    meta = (await http.get("/v2/models/calc")).json()  # the shapes the metadata reports, whole
    assert [(o["name"], o["data_type"], o["dims"]) for o in config["output"]] == [
        (o["name"], f"TYPE_{o['datatype']}", o["shape"]) for o in meta["outputs"]
    ]
    assert "dynamic_batching" not in config
    # two [[models]] entries, one version each
    assert config["version_policy"] == {"specific": {"versions": [1, 2]}}
    assert config["instance_group"] == [{"name": "calc", "kind": "KIND_CPU", "count": 1}]
    assert config["parameters"] == {}
    assert (await config_of(kserve, http, "calc", "1"))["name"] == "calc"


async def test_config_of_a_batching_model_leaves_out_the_batch_dimension(
    kserve: Any, http: httpx.AsyncClient
) -> None:
    config = await config_of(kserve, http, "batched")
    assert config["max_batch_size"] == 8
    assert config["input"][0]["dims"] == [3]
    # the outputs' rank is unknown (the runtime's shape inference leaves it open): [-1], as in the metadata
    assert [o["dims"] for o in config["output"]] == [[-1], [-1]]
    assert config["dynamic_batching"] == {
        "preferred_batch_size": [4, 8],
        "max_queue_delay_microseconds": 20000,
        "preserve_ordering": False,
    }
    assert config["parameters"] == {"max_concurrent_batches": {"string_value": "2"}}
    auto = await config_of(kserve, http, "auto")
    assert (auto["max_batch_size"], auto["dynamic_batching"]["max_queue_delay_microseconds"]) == (32, 0)
    assert auto["parameters"]["max_queue_delay_us"] == {"string_value": "auto"}
    assert auto["version_policy"] == {"specific": {"versions": [1]}}


async def test_config_of_a_saved_model(kserve: Any, http: httpx.AsyncClient) -> None:
    config = await config_of(kserve, http, "classify")
    assert config["platform"] == "tensorflow_savedmodel"
    # the model metadata says the same, over both protocols
    assert (await http.get("/v2/models/classify")).json()["platform"] == "tensorflow_savedmodel"
    meta = await kserve.ModelMetadata(pb.ModelMetadataRequest(name="classify"))
    assert meta.platform == "tensorflow_savedmodel"
    assert config["parameters"]["signature_name"] == {"string_value": "serving_default"}
    assert config["version_policy"] == {"latest": {"num_versions": 1}}
    assert [i["data_type"] for i in config["input"]] == ["TYPE_STRING"]


async def test_config_names_every_datatype_as_triton_does(kserve: Any, http: httpx.AsyncClient) -> None:
    config = await config_of(kserve, http, "types")
    assert {i["name"]: i["data_type"] for i in config["input"]} == {
        "a": "TYPE_INT32",
        "flag": "TYPE_BOOL",
        "text": "TYPE_STRING",
        "half": "TYPE_FP16",
        "bf16": "TYPE_BF16",
    }


@pytest.mark.parametrize(
    ("name", "version", "code", "status", "message"),
    [
        ("nope", "", grpc.StatusCode.NOT_FOUND, 404, "Model 'nope' not found"),
        ("calc", "9", grpc.StatusCode.NOT_FOUND, 404, "version 9"),
        ("calc", "x", grpc.StatusCode.INVALID_ARGUMENT, 400, "'x'"),
    ],
)
async def test_config_of_an_unknown_model_or_version(
    kserve: Any,
    http: httpx.AsyncClient,
    name: str,
    version: str,
    code: grpc.StatusCode,
    status: int,
    message: str,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await kserve.ModelConfig(pb.ModelConfigRequest(name=name, version=version))
    assert info.value.code() == code and message in info.value.details(), info.value.details()
    answer = await http.get(
        f"/v2/models/{name}/versions/{version}/config" if version else f"/v2/models/{name}/config"
    )
    assert answer.status_code == status and message in answer.json()["error"], answer.text
