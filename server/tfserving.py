"""TensorFlow Serving's REST API: /v1/models/{m}[/versions/{v}|/labels/{l}][:predict|:classify|:regress|
/metadata].

Requests are TF Serving's JSON: ``instances`` (row format: one entry per batch item, either the value of
the model's only input or an object naming the inputs) or ``inputs`` (columnar: one tensor, or an object
of tensors by input name), never both. Row-format answers carry ``predictions`` (one entry per batch item,
an object of outputs when there are several), columnar ones ``outputs``. Strings travel as UTF-8 text or
as ``{"b64": "..."}``; string outputs whose name ends in ``_bytes`` are always sent base64-encoded.

``:classify`` and ``:regress`` take ``examples`` (a list of tf.Examples as objects of features) and an
optional ``context`` (one more, whose features every example gets), and answer ``results``: each example's
[label, score] pairs, or its value. The examples go through the gRPC Classify and Regress's rules
(``server.examples``), so both protocols give the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from fastapi import APIRouter, Request, Response

from poolserve.proto import example_pb2, feature_pb2, types_pb2
from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.signature import TensorSpec
from poolserve.runtime.types import Array
from poolserve.server import codec, examples
from poolserve.server.adapter import Adapter, Encoded, route
from poolserve.server.examples import PREDICT_METHOD
from poolserve.server.models import ModelEntry
from poolserve.server.routes import Route
from poolserve.server.service import InferenceService, InferRequest, InferResult

DEFAULT_SIGNATURE = "serving_default"


@dataclass
class PredictRequest:
    """A decoded :predict body: input arrays by public name, and which format to answer in."""

    inputs: dict[str, Array]
    row_format: bool
    signature_name: str


# --- request -----------------------------------------------------------------------------------------------


def decode_predict(body: Any, entry: ModelEntry) -> PredictRequest:
    """A :predict body -> the model's input arrays, cast to the inputs' dtypes."""
    if not isinstance(body, dict):
        raise InvalidArgumentError("Request body must be a JSON object")
    signature = body.get("signature_name", "")
    if not isinstance(signature, str):
        raise InvalidArgumentError("'signature_name' must be a string")
    entry = entry.for_signature(signature or None)  # the signature's inputs decode the request
    has_instances, has_inputs = "instances" in body, "inputs" in body
    if has_instances and has_inputs:
        raise InvalidArgumentError("Not allowed to have both 'instances' and 'inputs' keys in the request")
    if has_instances:
        inputs = _decode_instances(body["instances"], entry)
    elif has_inputs:
        inputs = _decode_columns(body["inputs"], entry)
    else:
        raise InvalidArgumentError("Missing 'instances' or 'inputs' key in the request")
    return PredictRequest(inputs, has_instances, entry.signature_name)


def _only_input(entry: ModelEntry, where: str) -> TensorSpec:
    if len(entry.inputs) != 1:
        names = ", ".join(s.name for s in entry.inputs)
        raise InvalidArgumentError(
            f"Model '{entry.name}' has {len(entry.inputs)} inputs ({names}): {where} must be "
            "an object naming them"
        )
    return entry.inputs[0]


def _decode_instances(instances: Any, entry: ModelEntry) -> dict[str, Array]:
    if isinstance(instances, np.ndarray):  # rows of numbers, read as one array (codec.loads_tensors)
        spec = _only_input(entry, "each of 'instances'")
        return {spec.name: _instances_array(instances, spec)}
    if not isinstance(instances, list):
        raise InvalidArgumentError("'instances' must be a list")
    if not instances:
        raise InvalidArgumentError("'instances' is empty: no instances found in the request")
    first = instances[0]
    if not isinstance(first, dict) or codec.is_b64(first):
        spec = _only_input(entry, "each of 'instances'")
        return {spec.name: _instances_array(instances, spec)}
    specs = [entry.input_spec(name) for name in first]  # InvalidArgumentError for an unknown name
    for i, inst in enumerate(instances):
        if not isinstance(inst, dict) or codec.is_b64(inst):
            raise InvalidArgumentError(
                f"Expecting object but got {codec.json_kind(inst)} at item {i} of 'instances': "
                "every instance must name the inputs when the first one does"
            )
        if inst.keys() != first.keys():
            raise InvalidArgumentError(
                f"Instance {i} names inputs [{', '.join(inst)}] but instance 0 names "
                f"[{', '.join(first)}]: every instance must give the same inputs"
            )
    return {
        name: _instances_array([inst[name] for inst in instances], spec)
        for name, spec in zip(first, specs, strict=True)
    }


def _instances_array(values: list[Any] | Array, spec: TensorSpec) -> Array:
    """The batch of one input, each instance one row; instances of different shapes are refused."""
    try:
        return to_array(values, spec.dtype, f"input '{spec.name}'")
    except InvalidArgumentError:
        shapes = [_shape_of(v) for v in values]
        for i, s in enumerate(shapes):
            if s != shapes[0]:
                raise InvalidArgumentError(
                    f"Instances of input '{spec.name}' have different shapes: instance {i} is "
                    f"{_shape_text(s)} but instance 0 is {_shape_text(shapes[0])} (in the row format "
                    "every instance is one row of each input)"
                ) from None
        raise


def _decode_columns(inputs: Any, entry: ModelEntry) -> dict[str, Array]:
    if isinstance(inputs, dict) and not codec.is_b64(inputs):
        if not inputs:
            raise InvalidArgumentError("'inputs' is an empty object: no inputs found in the request")
        out = {}
        for name, value in inputs.items():
            spec = entry.input_spec(name)  # InvalidArgumentError for an unknown name
            out[name] = to_array(value, spec.dtype, f"input '{name}'")
        return out
    spec = _only_input(entry, "'inputs'")
    return {spec.name: to_array(inputs, spec.dtype, f"input '{spec.name}'")}


def to_array(value: Any, code: int, where: str) -> Array:
    """JSON (nested lists, numbers, bools, text, ``{"b64": ...}``) -> an array of DataType ``code`` (the
    codec's rules; DT_INVALID: the graph does not tell)."""
    return codec.from_json(where, value, codec.spec_dtype(code))


def _shape_of(value: Any, depth: int = 0) -> tuple[int, ...] | None:
    """The shape of nested lists (or of an array ``codec.loads_tensors`` read), None when ragged or
    deeper than an array can be (``codec.MAX_RANK``: the recursion stops there, far within Python's)."""
    if isinstance(value, np.ndarray):
        return tuple(value.shape)
    if not isinstance(value, list):
        return ()
    if depth == codec.MAX_RANK:
        return None
    inner = [_shape_of(v, depth + 1) for v in value]
    first = inner[0] if inner else ()
    if first is None or any(s != first for s in inner):
        return None
    return (len(value), *first)


def _shape_text(shape: tuple[int, ...] | None) -> str:
    if shape is None:
        return "a ragged or too deeply nested list"
    return "[" + ",".join(map(str, shape)) + "]"


# --- response ----------------------------------------------------------------------------------------------


def encode_predict(outputs: Mapping[str, Array], row_format: bool) -> bytes:
    """Output arrays by public name -> the response body ("predictions" or "outputs")."""
    if row_format:
        body: dict[str, Any] = {"predictions": _rows(outputs)}
    elif len(outputs) == 1:
        name, arr = next(iter(outputs.items()))
        body = {"outputs": to_json(arr, name)}
    else:
        body = {"outputs": {name: to_json(arr, name) for name, arr in outputs.items()}}
    return codec.dumps(body)


def _rows(outputs: Mapping[str, Array]) -> Any:
    batch = None
    for name, arr in outputs.items():
        if np.ndim(arr) == 0:
            raise InvalidArgumentError(
                f"Output '{name}' is a scalar: it has no batch dimension for the row format "
                "('instances'); use the columnar format ('inputs')"
            )
        if batch is None:
            batch, first = len(arr), name
        elif len(arr) != batch:
            raise InvalidArgumentError(
                f"Output '{name}' has inconsistent batch size {len(arr)}, expecting {batch} "
                f"(as output '{first}'): use the columnar format ('inputs')"
            )
    if len(outputs) == 1:
        name, arr = next(iter(outputs.items()))
        return to_json(arr, name)
    arrays = {name: np.asarray(arr) for name, arr in outputs.items()}
    return [{name: to_json(arr[i], name) for name, arr in arrays.items()} for i in range(batch or 0)]


def to_json(arr: Array, name: str) -> Any:
    """An array as JSON values; strings as text, or base64 when binary or named ``*_bytes``."""
    return codec.to_json(f"Output '{name}'", arr, strings="b64" if name.endswith("_bytes") else "text_or_b64")


# --- classify and regress: tf.Examples as JSON ----------------------------------------------------------

_INT64 = (-(2**63), 2**63 - 1)
_FLOAT32_MAX = float(np.finfo(np.float32).max)
# a feature value's kind: the Feature list it goes into
_KIND_NAMES = {"int64_list": "int64", "float_list": "float", "bytes_list": "bytes"}


def decode_examples(body: Any) -> tuple[str, list[bytes], bytes]:
    """A :classify or :regress body -> its signature name, its examples serialized, and its context
    serialized (b"" without one)."""
    if not isinstance(body, dict):
        raise InvalidArgumentError("Request body must be a JSON object")
    signature = body.get("signature_name", "")
    if not isinstance(signature, str):
        raise InvalidArgumentError("'signature_name' must be a string")
    context = b""
    if "context" in body:
        context = example_from_json(body["context"], "'context'").SerializeToString()
    if "examples" not in body:
        raise InvalidArgumentError(
            "Missing 'examples' key in the request: a list of Example objects ({feature: value or list})"
        )
    given = body["examples"]
    if not isinstance(given, list):
        raise InvalidArgumentError(
            f"'examples' must be a list of Example objects, got {codec.json_kind(given)}"
        )
    if not given:
        raise InvalidArgumentError("'examples' is an empty list: no examples found in the request")
    blobs = [example_from_json(e, f"examples[{i}]").SerializeToString() for i, e in enumerate(given)]
    return signature, blobs, context


def example_from_json(value: Any, where: str) -> example_pb2.Example:
    """A JSON object of features (TF Serving's Example in JSON) as a tf.Example. Each feature is a value
    or a list of values of one kind: whole numbers (and booleans) an int64_list, decimals a float_list,
    text and ``{"b64": ...}`` a bytes_list; an empty list a feature of no kind."""
    if not isinstance(value, dict) or codec.is_b64(value):
        raise InvalidArgumentError(
            f"{where} must be an Example: a JSON object of features (name: value or list of values), got "
            f"{codec.json_kind(value)}"
        )
    example = example_pb2.Example()
    for name, content in value.items():
        _fill_feature(example.features.feature[name], content, f"feature '{name}' of {where}")
    return example


def _fill_feature(feature: feature_pb2.Feature, content: Any, where: str) -> None:
    values = content if isinstance(content, list) else [content]
    kind = ""
    converted = []
    for i, value in enumerate(values):
        at = f"{where}, element {i}" if isinstance(content, list) else where
        value_kind, v = _feature_value(value, at)
        if kind and value_kind != kind:
            raise InvalidArgumentError(
                f"{at} is {_KIND_NAMES[value_kind]} but the feature's first value is {_KIND_NAMES[kind]}: "
                "a feature holds values of one kind (write whole numbers as 1.0 in a float feature)"
            )
        kind = value_kind
        converted.append(v)
    if kind:
        getattr(feature, kind).value.extend(converted)


def _feature_value(value: Any, where: str) -> tuple[str, Any]:
    """The Feature list a JSON value goes into, and the value as that list holds it."""
    if isinstance(value, bool):
        return "int64_list", int(value)
    if isinstance(value, int):
        if not _INT64[0] <= value <= _INT64[1]:
            raise InvalidArgumentError(f"{where}: {value} is outside int64, the only integer a feature holds")
        return "int64_list", value
    if isinstance(value, float):
        if math.isfinite(value) and abs(value) > _FLOAT32_MAX:
            raise InvalidArgumentError(
                f"{where}: {value} is beyond float32's range (a float feature's values)"
            )
        return "float_list", value
    if isinstance(value, str):
        return "bytes_list", value.encode("utf-8")
    if codec.is_b64(value) and isinstance(value["b64"], str):
        return "bytes_list", codec.b64_bytes(where, value)
    raise InvalidArgumentError(
        f'{where} is {codec.json_kind(value)}: a feature\'s values are numbers, text or {{"b64": ...}}'
    )


def encode_results(method: examples.Method, outputs: Mapping[str, Array]) -> bytes:
    """A classify or regress signature's outputs -> the answer's ``results``: each example's [label,
    score] pairs, or its value (float32, as TF Serving's protos carry them)."""
    if method is examples.CLASSIFY:
        rows = examples.classifications(outputs.get("classes"), outputs.get("scores"))
        results: Any = [[[label, _score(score)] for label, score in row] for row in rows]
    else:
        results = to_json(examples.regressions(outputs["outputs"]), "outputs")
    return codec.dumps({"results": results})


def _score(value: np.float32) -> Any:
    # NaN as NaN, as TF Serving writes it, not as orjson's null
    return value if math.isfinite(value) else codec.to_json("Output 'scores'", value)


# --- routes ------------------------------------------------------------------------------------------------


def _version(version: str | None) -> int | None:
    return codec.parse_version(version)


def _label(service: InferenceService, model: str, label: str) -> int:
    """The version a label names: the model's ``labels`` in the config; "stable" is the latest version
    unless the config names it."""
    return service.repository.label_version(model, label)


def model_status(service: InferenceService, model: str, version: int | None) -> dict[str, Any]:
    """GET /v1/models/{m}[/versions/{v}]: every version (or the one asked for) with its state and, for a
    version that failed to load, the error."""
    statuses = service.repository.status(model, version)
    if service.draining:
        for s in statuses:
            if s["state"] == "AVAILABLE":
                s["state"] = "UNLOADING"
    return {"model_version_status": statuses}


def model_metadata(entry: ModelEntry) -> dict[str, Any]:
    """GET /v1/models/{m}/metadata: the model spec and its signatures, in TF Serving's JSON."""
    signatures = {
        name: {
            "inputs": {s.name: _tensor_info(s) for s in sig.inputs},
            "outputs": {s.name: _tensor_info(s) for s in sig.outputs},
            "method_name": entry.methods.get(name, PREDICT_METHOD),
        }
        for name, sig in entry.signatures.items()
    }
    return {
        "model_spec": {"name": entry.name, "signature_name": "", "version": str(entry.version)},
        "metadata": {"signature_def": {"signature_def": signatures}},
    }


def _tensor_info(spec: TensorSpec) -> dict[str, Any]:
    if spec.shape is None:
        shape: dict[str, Any] = {"dim": [], "unknown_rank": True}
    else:
        shape = {"dim": [{"size": str(d), "name": ""} for d in spec.shape], "unknown_rank": False}
    return {"dtype": types_pb2.DataType.Name(spec.dtype), "tensor_shape": shape, "name": spec.tensor}


def _json_response(body: Any) -> Response:
    return Response(codec.dumps(body), media_type="application/json")


class TFServingAdapter(Adapter[bool]):
    """TF Serving's JSON; the answer in the request's format (the context: row format or not)."""

    def decode(
        self, request: Request, body: bytes | memoryview, entry: ModelEntry
    ) -> tuple[InferRequest, bool]:
        decoded = decode_predict(codec.loads_tensors(body), entry)
        infer = InferRequest(
            entry.name, decoded.inputs, version=entry.version, signature_name=decoded.signature_name
        )
        return infer, decoded.row_format

    def encode(self, request: Request, result: InferResult, context: bool) -> Encoded:
        return Encoded(encode_predict(result.outputs, context))


class ExamplesAdapter(Adapter[None]):
    """:classify or :regress: TF Serving's JSON Examples in, ``results`` out."""

    def __init__(self, method: examples.Method) -> None:
        self.method = method

    def decode(
        self, request: Request, body: bytes | memoryview, entry: ModelEntry
    ) -> tuple[InferRequest, None]:
        signature, blobs, context = decode_examples(codec.loads(body))
        return self.method.request(entry, signature, blobs, context), None

    def encode(self, request: Request, result: InferResult, context: None) -> Encoded:
        return Encoded(encode_results(self.method, result.outputs))


def inference_routes(service: InferenceService) -> list[Route]:
    """The predict, classify and regress routes, as plain Starlette routes (see ``server.app``)."""

    def by_label(r: Request) -> int:
        return _label(service, r.path_params["model"], r.path_params["label"])

    adapters: list[tuple[str, Adapter[Any]]] = [
        (":predict", TFServingAdapter()),
        (":classify", ExamplesAdapter(examples.CLASSIFY)),
        (":regress", ExamplesAdapter(examples.REGRESS)),
    ]
    routes = []
    for verb, adapter in adapters:
        routes += [
            route(f"/v1/models/{{model}}{verb}", adapter, service),
            route(f"/v1/models/{{model}}/versions/{{version}}{verb}", adapter, service),
            route(f"/v1/models/{{model}}/labels/{{label}}{verb}", adapter, service, by_label),
        ]
    return routes


def router(service: InferenceService) -> APIRouter:
    """The TF Serving REST routes over ``service`` other than predict (``inference_routes``)."""
    api = APIRouter(tags=["tfserving"])

    @api.get("/v1/models/{model}")
    async def status_latest(model: str) -> Response:
        return _json_response(model_status(service, model, None))

    @api.get("/v1/models/{model}/versions/{version}")
    async def status_version(model: str, version: str) -> Response:
        return _json_response(model_status(service, model, _version(version)))

    @api.get("/v1/models/{model}/labels/{label}")
    async def status_label(model: str, label: str) -> Response:
        return _json_response(model_status(service, model, _label(service, model, label)))

    @api.get("/v1/models/{model}/metadata")
    async def metadata_latest(model: str) -> Response:
        return _json_response(model_metadata(service.model(model)))

    @api.get("/v1/models/{model}/versions/{version}/metadata")
    async def metadata_version(model: str, version: str) -> Response:
        return _json_response(model_metadata(service.model(model, _version(version))))

    @api.get("/v1/models/{model}/labels/{label}/metadata")
    async def metadata_label(model: str, label: str) -> Response:
        return _json_response(model_metadata(service.model(model, _label(service, model, label))))

    return api
