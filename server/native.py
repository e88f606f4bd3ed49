"""poolserve's own endpoint: ``POST /v1/models/{model}[/versions/{v}]:run``, Session.run over HTTP.

JSON body ``{"feeds": {name: tensor}, "fetches": [...], "targets": [...], "run_options": {RunOptions as
protobuf JSON}, "trace": "none"|"response", "use_run_handler_pool": bool}``. A tensor is
``{"dtype": "float32", "shape": [2, 3], "data": [...]}`` (data flat or nested, row-major) or plain nested
lists (the input's dtype). Strings are str (UTF-8) or ``{"b64": ...}``. The answer is
``{"outputs": {name: {"dtype", "shape", "data"}}, "request_id"}`` plus ``run_metadata`` and ``trace``
(Chrome trace) when traced. With ``Content-Type: application/x-protobuf`` the same request and answer are
``RunRequest``/``RunResponse`` (proto/serving.proto).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from fastapi import APIRouter, Request
from google.protobuf import json_format, message

from poolserve.proto import config_pb2, serving_pb2
from poolserve.runtime import dtypes
from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.signature import TensorSpec
from poolserve.runtime.tensor import from_ndarray
from poolserve.runtime.types import Array
from poolserve.server import codec
from poolserve.server.adapter import Adapter, Encoded, route
from poolserve.server.models import ModelEntry
from poolserve.server.protocol import header
from poolserve.server.routes import Route
from poolserve.server.service import InferenceService, InferRequest, InferResult

PROTOBUF = "application/x-protobuf"
_FIELDS = ("feeds", "fetches", "targets", "run_options", "trace", "use_run_handler_pool")
_TRACE_MODES = ("none", "response")


# --- decoding -------------------------------------------------------------------------------------------


def parse_body(body: bytes | memoryview) -> dict[str, Any]:
    data = codec.loads_tensors(body)
    if not isinstance(data, dict):
        raise InvalidArgumentError("The request body must be a JSON object")
    unknown = sorted(set(data) - set(_FIELDS))
    if unknown:
        raise InvalidArgumentError(
            f"Unknown field(s) in the request: {', '.join(unknown)}; expected: {', '.join(_FIELDS)}"
        )
    return data


def decode_tensor(where: str, value: Any, spec: TensorSpec | None) -> Array:
    """A feed: ``{"dtype", "shape", "data"}`` or plain nested lists of the input's dtype."""
    if isinstance(value, dict) and "data" in value:
        extra = sorted(set(value) - {"dtype", "shape", "data"})
        if extra:
            raise InvalidArgumentError(
                f"{where}: unknown field(s) {', '.join(extra)} (expected dtype, shape, data)"
            )
        name = value.get("dtype")
        if name is None:
            dtype = codec.spec_dtype(spec.dtype) if spec is not None else None
            if dtype is None:
                raise InvalidArgumentError(f"{where}: give a dtype (the input's dtype is unknown)")
        elif not isinstance(name, str) or name not in codec.TF_DTYPES:
            raise InvalidArgumentError(
                f"{where}: unknown dtype {name!r}; use one of: {', '.join(sorted(codec.TF_DTYPES))}"
            )
        else:
            dtype = codec.TF_DTYPES[name]
        shape = value.get("shape")
        if shape is not None and (
            not isinstance(shape, list)
            or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
        ):
            raise InvalidArgumentError(
                f"{where}: shape must be a list of non-negative integers, got {shape!r}"
            )
        return codec.from_json(where, value["data"], dtype, None if shape is None else tuple(shape))
    if isinstance(value, dict) and not codec.is_b64(value):
        raise InvalidArgumentError(f"{where}: a tensor is nested lists or {{'dtype', 'shape', 'data'}}")
    return codec.from_json(where, value, codec.spec_dtype(spec.dtype) if spec is not None else None)


def _run_options(raw: Any) -> tuple[config_pb2.RunOptions | None, bool | None]:
    """RunOptions from protobuf JSON, and use_run_handler_pool when the request spelled it out."""
    if raw is None:
        return None, None
    if not isinstance(raw, dict):
        raise InvalidArgumentError("run_options must be an object (RunOptions in protobuf JSON)")
    options = config_pb2.RunOptions()
    try:
        json_format.ParseDict(raw, options)
    except json_format.ParseError as e:
        raise InvalidArgumentError(f"run_options: {e}") from None
    experimental = raw.get("experimental")
    explicit: bool | None = None
    if isinstance(experimental, dict):
        for key in ("use_run_handler_pool", "useRunHandlerPool"):
            if key in experimental:
                explicit = options.experimental.use_run_handler_pool
    return options, explicit


def _names(raw: Any, field: str) -> list[str]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(n, str) for n in raw):
        raise InvalidArgumentError(f"{field} must be a list of tensor names")
    return raw


def decode_json(body: bytes | memoryview, entry: ModelEntry, version: int | None) -> InferRequest:
    data = parse_body(body)
    feeds_raw = data.get("feeds", {})
    if not isinstance(feeds_raw, dict):
        raise InvalidArgumentError("feeds must be an object: {name: tensor}")
    feeds = {}
    for name, value in feeds_raw.items():
        spec = entry.input_spec(name)
        feeds[name] = decode_tensor(f"input '{name}'", value, spec)
    trace = data.get("trace", "none")
    if trace not in _TRACE_MODES:
        raise InvalidArgumentError(f"trace must be one of {', '.join(_TRACE_MODES)}, got {trace!r}")
    options, explicit_pool = _run_options(data.get("run_options"))
    use_pool = data.get("use_run_handler_pool", explicit_pool)
    if use_pool is not None and not isinstance(use_pool, bool):
        raise InvalidArgumentError("use_run_handler_pool must be true or false")
    return InferRequest(
        model=entry.name,
        version=version,
        feeds=feeds,
        fetches=_names(data.get("fetches"), "fetches"),
        targets=_names(data.get("targets"), "targets"),
        run_options=options,
        trace=trace == "response",
        use_run_handler_pool=use_pool,
    )


def decode_protobuf(
    body: bytes | memoryview, entry: ModelEntry, version: int | None, fill_limit: int
) -> InferRequest:
    """A RunRequest; its feeds filled from fewer values than their shape holds take at most
    ``fill_limit`` bytes in all (``codec.check_tensor_protos``)."""
    msg = serving_pb2.RunRequest()
    try:
        msg.ParseFromString(bytes(body))
    except message.DecodeError as e:
        raise InvalidArgumentError(f"The body is not a valid RunRequest: {e}") from None
    if msg.trace not in ("", *_TRACE_MODES):
        raise InvalidArgumentError(f"trace must be one of {', '.join(_TRACE_MODES)}, got {msg.trace!r}")
    for name in msg.feeds:
        entry.input_spec(name)  # a name the model does not have, before any tensor
    codec.check_tensor_protos([(f"input '{name}'", p) for name, p in msg.feeds.items()], fill_limit)
    feeds = {name: codec.from_tensor_proto(f"input '{name}'", proto) for name, proto in msg.feeds.items()}
    return InferRequest(
        model=entry.name,
        version=version,
        feeds=feeds,
        fetches=list(msg.fetches),
        targets=list(msg.targets),
        run_options=msg.run_options if msg.HasField("run_options") else None,
        trace=msg.trace == "response",
        use_run_handler_pool=msg.use_run_handler_pool if msg.HasField("use_run_handler_pool") else None,
    )


# --- encoding -------------------------------------------------------------------------------------------


def encode_tensor(name: str, value: Any) -> dict[str, Any]:
    arr = np.asarray(value)
    data = codec.to_json(f"Output '{name}'", arr, flat=True)
    return {"dtype": codec.dtype_name(arr.dtype), "shape": list(arr.shape), "data": data}


def encode_json(result: InferResult) -> bytes:
    body: dict[str, Any] = {
        "outputs": {name: encode_tensor(name, v) for name, v in result.outputs.items() if v is not None},
        "request_id": result.request_id,
    }
    if result.run_metadata is not None:
        body["run_metadata"] = json_format.MessageToDict(result.run_metadata)
    if result.trace is not None:
        body["trace"] = result.trace
    return codec.dumps(body)


def encode_protobuf(result: InferResult) -> bytes:
    msg = serving_pb2.RunResponse(request_id=result.request_id)
    for name, value in result.outputs.items():
        if value is not None:
            msg.outputs[name].CopyFrom(from_ndarray(value))
    if result.run_metadata is not None:
        msg.run_metadata.CopyFrom(result.run_metadata)
    if result.trace is not None:
        msg.trace_json = codec.dumps(result.trace).decode()
    return msg.SerializeToString()


def _is_protobuf(content_type: str) -> bool:
    return content_type.split(";")[0].strip().lower() in (PROTOBUF, "application/protobuf")


def model_info(entry: ModelEntry) -> dict[str, Any]:
    def specs(items: Sequence[TensorSpec]) -> list[dict[str, Any]]:
        return [
            {
                "name": s.name,
                "tensor": s.tensor,
                "dtype": dtypes.name(s.dtype) if s.dtype else None,
                "shape": list(s.shape) if s.shape is not None else None,
            }
            for s in items
        ]

    return {
        "name": entry.name,
        "version": entry.version,
        "inputs": specs(entry.inputs),
        "outputs": specs(entry.outputs),
    }


# curl -d sends form-urlencoded; TF Serving reads any body as JSON, so a bare curl works here too
_JSON_TYPES = ("application/json", "", "application/x-www-form-urlencoded", "text/plain")


class NativeAdapter(Adapter[bool]):
    """JSON or protobuf in; the answer in protobuf when the request was, or accepts it (the context).
    ``max_request_bytes`` bounds what a protobuf body's filled tensors expand to."""

    def __init__(self, max_request_bytes: int) -> None:
        self.max_request_bytes = max_request_bytes

    def decode(
        self, request: Request, body: bytes | memoryview, entry: ModelEntry
    ) -> tuple[InferRequest, bool]:
        content_type = header(request.scope, b"content-type") or "application/json"
        if _is_protobuf(content_type):
            return decode_protobuf(body, entry, entry.version, self.max_request_bytes), True
        if content_type.split(";")[0].strip().lower() in _JSON_TYPES:
            protobuf = _is_protobuf(header(request.scope, b"accept") or "")
            return decode_json(body, entry, entry.version), protobuf
        raise InvalidArgumentError(
            f"Unsupported Content-Type '{content_type}': use application/json or {PROTOBUF}"
        )

    def encode(self, request: Request, result: InferResult, context: bool) -> Encoded:
        if context:
            return Encoded(encode_protobuf(result), PROTOBUF)
        return Encoded(encode_json(result))


def inference_routes(service: InferenceService) -> list[Route]:
    """The run routes, as plain Starlette routes (see ``server.app``)."""
    adapter = NativeAdapter(service.config.server.max_request_bytes)
    return [
        route("/v1/models/{model}:run", adapter, service),
        route("/v1/models/{model}/versions/{version}:run", adapter, service),
    ]


def router(service: InferenceService) -> APIRouter:
    api = APIRouter()

    @api.get("/v1/models")
    async def list_models() -> dict[str, Any]:
        models = []
        for e in service.list_models():
            labels = service.repository.labels(e.name, e.version)
            models.append({**model_info(e), "labels": labels} if labels else model_info(e))
        return {"models": models}

    return api
