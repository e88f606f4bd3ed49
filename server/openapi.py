"""The OpenAPI contract: ``/openapi.json`` and ``/docs`` describe every endpoint.

FastAPI describes the routes it owns (metadata, health, runtime, traces, sessions). The inference routes
are plain Starlette routes that read their own bodies (server/app.py: cheaper than FastAPI's per-request
validation), so their request and answer schemas are declared here, from pydantic models that serve the
document only and never run on a request: native ``:run``, KServe v2 ``infer`` (as the Open Inference
Protocol defines it) and TF Serving ``:predict``, ``:classify`` and ``:regress``. Every operation documents
the JSON error body, and the ``model`` path parameter lists the served models, so a client generator (or a
fuzzer) knows them.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import models_json_schema

from poolserve.server import kserve
from poolserve.server.admission import TIMEOUT_HEADER
from poolserve.server.service import InferenceService

JSON = "application/json"
PROTOBUF = "application/x-protobuf"


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Error(BaseModel):
    """Every error: a message naming what was wrong, and the canonical code."""

    error: str
    code: str = Field(description="INVALID_ARGUMENT, NOT_FOUND, DEADLINE_EXCEEDED, UNAVAILABLE, ...")
    request_id: str | None = None
    node_name: str | None = Field(None, description="The graph node the error happened in, if any.")
    python_error: str | None = Field(
        None, description="ValueError or TypeError: the Python error TensorFlow's client raises for it too."
    )


# --- native --------------------------------------------------------------------------------------------


class NativeTensor(_Doc):
    dtype: str | None = Field(None, description="float32, int64, string, ... (default: the input's)")
    shape: list[int] | None = None
    data: Any = Field(description="nested lists, or flat with a shape; strings as text or {'b64': ...}")


class RunRequest(_Doc):
    feeds: dict[str, NativeTensor | Any] = Field(default_factory=dict, description="input name -> tensor")
    fetches: list[str] | None = None
    targets: list[str] | None = None
    run_options: dict[str, Any] | None = Field(None, description="TensorFlow RunOptions as protobuf JSON")
    trace: Literal["none", "response"] | None = None
    use_run_handler_pool: bool | None = None


class NativeOutput(BaseModel):
    dtype: str
    shape: list[int]
    data: list[Any]


class RunResponse(BaseModel):
    outputs: dict[str, NativeOutput]
    request_id: str
    run_metadata: dict[str, Any] | None = None
    trace: dict[str, Any] | None = None


# --- KServe v2 / Open Inference Protocol ---------------------------------------------------------------

Datatype = Literal[
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "BF16", "FP32",
    "FP64", "BYTES",
]  # fmt: skip


class InferInput(BaseModel):
    name: str
    shape: list[int]
    datatype: Datatype
    parameters: dict[str, Any] | None = None
    data: Any = Field(None, description="row-major, flat or nested (absent with binary_data_size)")


class InferRequestedOutput(BaseModel):
    name: str
    parameters: dict[str, Any] | None = None


class InferRequest(BaseModel):
    id: str | None = None
    parameters: dict[str, Any] | None = Field(
        None, description="timeout (microseconds), priority, binary_data_output, use_run_handler_pool, trace"
    )
    inputs: list[InferInput]
    outputs: list[InferRequestedOutput] | None = None


class InferOutput(BaseModel):
    name: str
    shape: list[int]
    datatype: Datatype
    parameters: dict[str, Any] | None = None
    data: list[Any] | None = None


class InferResponse(BaseModel):
    model_name: str
    model_version: str | None = None
    id: str
    parameters: dict[str, Any] | None = None
    outputs: list[InferOutput]


class WorkerApplied(_Doc):
    pid: int
    applied: bool
    error: str = Field(description="why this worker did not apply the call (empty when it did)")


class RepositoryAnswer(_Doc):
    """A load or unload call's 200 under ``poolserve serve --workers``: which workers applied it (one
    process answers it empty, as Triton does)."""

    workers: list[WorkerApplied]
    applied_by_all: bool


# --- TF Serving REST -------------------------------------------------------------------------------------


class PredictRequest(_Doc):
    signature_name: str | None = None
    instances: list[Any] | None = Field(None, description="row format (not with inputs)")
    inputs: Any = Field(None, description="columnar format: one tensor or {name: tensor}")


class PredictResponse(BaseModel):
    predictions: Any = None
    outputs: Any = None


class ExamplesRequest(_Doc):
    signature_name: str | None = None
    context: dict[str, Any] | None = Field(None, description="an Example whose features every example gets")
    examples: list[dict[str, Any]] = Field(
        description="tf.Examples as {feature: value or list}: whole numbers int64, decimals float, "
        "text or {'b64': ...} bytes"
    )


class ClassifyResponse(BaseModel):
    results: list[list[tuple[str, float]]] = Field(description="per example, its [label, score] pairs")


class RegressResponse(BaseModel):
    results: list[float] = Field(description="per example, its value")


DOC_MODELS: tuple[type[BaseModel], ...] = (
    Error, RunRequest, RunResponse, InferRequest, InferResponse, PredictRequest, PredictResponse,
    ExamplesRequest, ClassifyResponse, RegressResponse, RepositoryAnswer,
)  # fmt: skip

_ERRORS = {
    "400": "malformed request (the message names the field)",
    "401": "the endpoint needs 'Authorization: Bearer <admin_token>' with the current token",
    "404": "no such model or version",
    "408": "the body did not arrive within body_timeout_ms",
    "413": "the body is larger than max_request_bytes",
    "429": "the client has max_in_flight_per_client requests in flight (Retry-After, Retry-After-Ms), or a "
    "resource is exhausted",
    "499": "the client went away",
    "501": "not implemented",
    "503": "shed: cannot finish by the deadline (Retry-After, Retry-After-Ms), or draining",
    "504": "the deadline passed",
}


_EMPTY_OK = frozenset(
    {
        "/v2/health/live",
        "/v2/health/ready",
        "/v2/models/{model}/ready",
        "/v2/models/{model}/versions/{version}/ready",
    }
)
# Triton answers the repository's load and unload empty, as one poolserve process does; with --workers the
# answer says which workers applied the call (SharedCalls in server/workers.py)
_REPOSITORY_CALLS = ("/v2/repository/models/{model}/load", "/v2/repository/models/{model}/unload")


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


_RETRY_CODES = ("429", "503")  # answers that say when to retry


def _errors(*codes: str) -> dict[str, Any]:
    body = {JSON: {"schema": _ref(Error)}}
    retry = {
        "Retry-After": {"schema": {"type": "integer"}, "description": "seconds, rounded up"},
        "Retry-After-Ms": {"schema": {"type": "integer"}, "description": "milliseconds"},
    }
    return {
        code: {
            "description": _ERRORS[code],
            "content": body,
            **({"headers": retry} if code in _RETRY_CODES else {}),
        }
        for code in codes
    }


def _path_params(path: str, models: list[str]) -> list[dict[str, Any]]:
    params = []
    for name in ("model", "version", "label", "handle", "region"):
        if "{" + name + "}" in path:
            schema: dict[str, Any] = {"type": "string"}
            if name == "model" and models:
                schema["enum"] = models
            params.append({"name": name, "in": "path", "required": True, "schema": schema})
    return params


def _inference(
    summary: str, request: type[BaseModel], response: type[BaseModel], protobuf: bool = False
) -> dict[str, Any]:
    content: dict[str, Any] = {JSON: {"schema": _ref(request)}}
    answer: dict[str, Any] = {JSON: {"schema": _ref(response)}}
    if protobuf:
        content[PROTOBUF] = {"schema": {"type": "string", "format": "binary"}}
        answer[PROTOBUF] = {"schema": {"type": "string", "format": "binary"}}
    return {
        "summary": summary,
        "parameters": [
            {
                "name": TIMEOUT_HEADER,
                "in": "header",
                "required": False,
                "schema": {"type": "integer", "minimum": 1},
                "description": "the deadline in ms, read before the body (the body's own timeout wins)",
            }
        ],
        "requestBody": {"required": True, "content": content},
        "responses": {
            "200": {"description": "the outputs", "content": answer},
            **_errors("400", "404", "408", "413", "429", "499", "501", "503", "504"),
        },
    }


INFERENCE: dict[str, tuple[str, type[BaseModel], type[BaseModel], bool]] = {
    "/v1/models/{model}:run": ("Native: Session.run over HTTP", RunRequest, RunResponse, True),
    "/v1/models/{model}/versions/{version}:run": ("Native, one version", RunRequest, RunResponse, True),
    "/v1/models/{model}:predict": ("TF Serving REST predict", PredictRequest, PredictResponse, False),
    "/v1/models/{model}/versions/{version}:predict": (
        "TF Serving REST predict, one version", PredictRequest, PredictResponse, False,
    ),
    "/v1/models/{model}/labels/{label}:predict": (
        "TF Serving REST predict, by label", PredictRequest, PredictResponse, False,
    ),
    "/v1/models/{model}:classify": ("TF Serving REST classify", ExamplesRequest, ClassifyResponse, False),
    "/v1/models/{model}/versions/{version}:classify": (
        "TF Serving REST classify, one version", ExamplesRequest, ClassifyResponse, False,
    ),
    "/v1/models/{model}/labels/{label}:classify": (
        "TF Serving REST classify, by label", ExamplesRequest, ClassifyResponse, False,
    ),
    "/v1/models/{model}:regress": ("TF Serving REST regress", ExamplesRequest, RegressResponse, False),
    "/v1/models/{model}/versions/{version}:regress": (
        "TF Serving REST regress, one version", ExamplesRequest, RegressResponse, False,
    ),
    "/v1/models/{model}/labels/{label}:regress": (
        "TF Serving REST regress, by label", ExamplesRequest, RegressResponse, False,
    ),
    "/v2/models/{model}/infer": ("KServe v2 inference", InferRequest, InferResponse, False),
    "/v2/models/{model}/versions/{version}/infer": (
        "KServe v2 inference, one version", InferRequest, InferResponse, False,
    ),
}  # fmt: skip


def build(app: FastAPI, service: InferenceService) -> dict[str, Any]:
    """The whole document: FastAPI's routes, plus the inference routes, every operation with its errors."""
    routes = [r for r in app.routes if isinstance(r, APIRoute)]
    doc = get_openapi(
        title="poolserve",
        version="0.1.0",
        summary="TensorFlow GraphDefs on numpy kernels: native, KServe v2 and TF Serving REST",
        routes=routes,
    )
    models = sorted(service.models)
    _, defs = models_json_schema(
        [(m, "validation") for m in DOC_MODELS], ref_template="#/components/schemas/{model}"
    )
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    schemas.update(defs.get("$defs", {}))
    paths = doc.setdefault("paths", {})
    for path, (summary, request, response, protobuf) in INFERENCE.items():
        operation = _inference(summary, request, response, protobuf)
        operation["parameters"] = _path_params(path, models) + operation["parameters"]
        paths[path] = {"post": operation}
    paths["/v1/sessions/{handle}:run"] = {
        "post": {
            "summary": "Remote session: one step (RunStepRequest, proto/serving.proto)",
            "parameters": _path_params("{handle}", models),
            "requestBody": {
                "required": True,
                "content": {PROTOBUF: {"schema": {"type": "string", "format": "binary"}}},
            },
            "responses": {
                "200": {
                    "description": "RunStepResponse",
                    "content": {PROTOBUF: {"schema": {"type": "string", "format": "binary"}}},
                },
                **_errors("400", "404", "413", "499", "503", "504"),
            },
        }
    }
    for item in paths.values():
        for operation in item.values():
            responses = operation.setdefault("responses", {})
            # FastAPI's own routes: the errors any of them can answer, and the served models' names
            for code, value in _errors("400", "404", "408", "413", "503").items():
                responses.setdefault(code, value)
            responses.pop("422", None)  # the app answers validation errors 400 (server/errors.py)
            for param in operation.get("parameters", []):
                if param.get("in") == "path" and param["name"] == "model" and models:
                    param["schema"] = {"type": "string", "enum": models}
    # answers that are not JSON: KServe's health and readiness (an empty 200), metrics, protobuf sessions
    binary = {PROTOBUF: {"schema": {"type": "string", "format": "binary"}}}
    for path, item in paths.items():
        for method, operation in item.items():
            ok = operation.get("responses", {}).get("200")
            if ok is None:
                continue
            if path in _EMPTY_OK:
                ok.pop("content", None)
            elif path in _REPOSITORY_CALLS:
                ok["description"] = (
                    "applied; an empty body from one process, and with --workers which workers applied it"
                )
                ok["content"] = {JSON: {"schema": _ref(RepositoryAnswer)}}
            elif path == "/metrics":
                ok["content"] = {"text/plain": {"schema": {"type": "string"}}}
            elif path.startswith("/v1/sessions"):
                ok["content"] = binary
                if method == "post":
                    operation["requestBody"] = {"required": True, "content": binary}
    pool = paths.get("/v1/runtime/run_handler_pool", {}).get("put")
    if pool is not None:  # the route reads its body itself (a bare curl -d sends it form-encoded)
        enabled = {"type": "object", "properties": {"enabled": {"type": "boolean"}}, "required": ["enabled"]}
        pool["requestBody"] = {"required": True, "content": {JSON: {"schema": enabled}}}
    for path, method in (("/v1/runtime/run_handler_pool", "put"), ("/v1/sessions", "post")):
        if method in paths.get(path, {}):
            paths[path][method]["responses"].update(_errors("401"))
    for path in _REPOSITORY_CALLS:  # admin calls; with --workers, 504 when a worker has not applied it
        if "post" in paths.get(path, {}):
            paths[path]["post"]["responses"].update(_errors("401", "504"))
    for path in kserve.UNSUPPORTED:  # Triton's calls poolserve does not serve: never a 200
        for operation in paths.get(path, {}).values():
            operation["parameters"] = _path_params(path, models)  # the routes read none of them
            operation["responses"] = _errors("501")
    return doc


def install(app: FastAPI, service: InferenceService) -> None:
    """Serves the document at /openapi.json (built once, at the first request) and the docs at /docs."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build(app, service)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
