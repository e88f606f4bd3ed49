"""The load generator: payloads from model metadata, request bodies per protocol, closed and open loops.

Every request body is encoded once per (model, pool mode) before the load starts, so the per-request cost
on the generator is one HTTP round trip. The closed loop keeps ``concurrency`` requests in flight; the open
loop sends on a Poisson schedule and never waits for a response before the next send. Its latencies are
measured from the *scheduled* send time, so queueing behind a slow server (or a slow generator) shows up in
the numbers instead of silently lowering the offered load (no coordinated omission).
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import struct
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from poolserve.proto import serving_pb2, tensor_pb2, tensor_shape_pb2, types_pb2

PROTOCOLS = ("native", "kserve", "tfserving", "kserve-grpc")
# mode name -> the use_run_handler_pool value sent (None: the field is left out, the server decides)
MODES: dict[str, bool | None] = {"pool": True, "no_pool": False, "default": None}
HEADER_LENGTH = "Inference-Header-Content-Length"
# the timeout the server can read before the body (server/admission.py)
TIMEOUT_HEADER = "X-Request-Timeout-Ms"

# KServe datatype -> (numpy dtype, TensorFlow DataType for the native protobuf body)
DATATYPES: dict[str, tuple[np.dtype[Any], types_pb2.DataType]] = {
    "BOOL": (np.dtype(np.bool_), types_pb2.DT_BOOL),
    "UINT8": (np.dtype(np.uint8), types_pb2.DT_UINT8),
    "UINT16": (np.dtype(np.uint16), types_pb2.DT_UINT16),
    "UINT32": (np.dtype(np.uint32), types_pb2.DT_UINT32),
    "UINT64": (np.dtype(np.uint64), types_pb2.DT_UINT64),
    "INT8": (np.dtype(np.int8), types_pb2.DT_INT8),
    "INT16": (np.dtype(np.int16), types_pb2.DT_INT16),
    "INT32": (np.dtype(np.int32), types_pb2.DT_INT32),
    "INT64": (np.dtype(np.int64), types_pb2.DT_INT64),
    "FP16": (np.dtype(np.float16), types_pb2.DT_HALF),
    "FP32": (np.dtype(np.float32), types_pb2.DT_FLOAT),
    "FP64": (np.dtype(np.float64), types_pb2.DT_DOUBLE),
    "BYTES": (np.dtype(object), types_pb2.DT_STRING),
}
_U32 = struct.Struct("<I")


class LoadtestError(Exception):
    """A failure the user can act on (unreachable server, unknown model, bad payload): no traceback."""


# --- models and payloads --------------------------------------------------------------------------------


@dataclass(frozen=True)
class InputSpec:
    name: str
    datatype: str  # KServe datatype, "INVALID" when the server does not know it
    shape: tuple[int, ...]  # -1 for variable dimensions


@dataclass(frozen=True)
class ModelInfo:
    name: str
    inputs: tuple[InputSpec, ...]


def _describe(url: str, e: httpx.HTTPError) -> str:
    if isinstance(e, httpx.ConnectError):
        return f"cannot connect to {url}: {str(e) or 'connection refused'}"
    if isinstance(e, httpx.TimeoutException):
        return f"{url} did not answer in time"
    return f"request to {url} failed: {type(e).__name__}: {e}"


def _error_text(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and "error" in body:
        return str(body["error"])
    return response.text[:200] or "(empty body)"


async def fetch_model(client: httpx.AsyncClient, name: str) -> ModelInfo:
    """The model's inputs from ``GET /v2/models/{name}`` (KServe v2 model metadata)."""
    url = f"{str(client.base_url).rstrip('/')}/v2/models/{name}"
    try:
        response = await client.get(f"/v2/models/{name}")
    except httpx.HTTPError as e:
        raise LoadtestError(_describe(url, e)) from None
    if response.status_code != 200:
        raise LoadtestError(f"GET {url} answered {response.status_code}: {_error_text(response)}")
    try:
        meta = response.json()
        inputs = tuple(
            InputSpec(str(i["name"]), str(i["datatype"]), tuple(int(d) for d in i["shape"]))
            for i in meta["inputs"]
        )
    except (ValueError, KeyError, TypeError) as e:
        raise LoadtestError(f"GET {url} did not return KServe v2 model metadata ({e!r})") from None
    return ModelInfo(name, inputs)


def concrete_shape(shape: tuple[int, ...], batch: int) -> tuple[int, ...]:
    """-1 becomes ``batch`` in the first dimension and 1 elsewhere; fixed dimensions stay."""
    return tuple((batch if i == 0 else 1) if d < 0 else d for i, d in enumerate(shape))


def random_input(spec: InputSpec, batch: int, rng: np.random.Generator) -> np.ndarray[Any, Any]:
    if spec.datatype not in DATATYPES:
        raise LoadtestError(
            f"input '{spec.name}' has datatype {spec.datatype}, for which no random data can be made: "
            "give it in --payload"
        )
    dtype = DATATYPES[spec.datatype][0]
    shape = concrete_shape(spec.shape, batch)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind in "iu":  # small non-negative values: valid indices and token ids for most models
        return rng.integers(0, 10, size=shape).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", np.uint8)
    words = [bytes(rng.choice(letters, 8)) for _ in range(math.prod(shape))]
    out = np.empty(len(words), dtype=object)
    out[:] = words
    return out.reshape(shape)


def read_payload_file(path: str) -> dict[str, Any]:
    """``--payload``: a JSON object {input name: nested list}."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise LoadtestError(f"cannot read --payload {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise LoadtestError(f"--payload {path} is not valid JSON: {e}") from None
    if not isinstance(data, dict) or not data:
        raise LoadtestError(f"--payload {path} must be a JSON object {{input name: nested list}}")
    return data


def payload_array(spec: InputSpec, value: Any) -> np.ndarray[Any, Any]:
    if spec.datatype not in DATATYPES:
        return np.asarray(value)
    dtype = DATATYPES[spec.datatype][0]
    try:
        if dtype.kind == "O":
            arr = np.asarray(value, dtype=object)
            encoded: np.ndarray[Any, Any] = np.vectorize(
                lambda v: v.encode() if isinstance(v, str) else v, otypes=[object]
            )(arr)
            return encoded
        return np.asarray(value, dtype=dtype)
    except (ValueError, TypeError) as e:
        raise LoadtestError(f"--payload: input '{spec.name}' is not {spec.datatype} data: {e}") from None


def build_payload(
    model: ModelInfo, batch: int, rng: np.random.Generator, given: dict[str, Any] | None = None
) -> dict[str, np.ndarray[Any, Any]]:
    """The model's inputs: those in ``given`` (from --payload) as they are, the others random."""
    given = given or {}
    return {
        spec.name: payload_array(spec, given[spec.name])
        if spec.name in given
        else random_input(spec, batch, rng)
        for spec in model.inputs
    }


# --- request bodies -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One ready-to-send request: a model in a pool mode, with its encoded body."""

    model: str
    mode: str
    path: str
    content: bytes
    headers: dict[str, str]


def _json_value(arr: np.ndarray[Any, Any]) -> Any:
    if arr.dtype.kind == "O":
        return np.vectorize(lambda b: b.decode("utf-8", "replace"), otypes=[object])(arr).tolist()
    return arr.tolist()


def _tensor_proto(arr: np.ndarray[Any, Any], datatype: str) -> tensor_pb2.TensorProto:
    proto = tensor_pb2.TensorProto(
        dtype=DATATYPES[datatype][1],
        tensor_shape=tensor_shape_pb2.TensorShapeProto(
            dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in arr.shape]
        ),
    )
    if arr.dtype.kind == "O":
        proto.string_val.extend(arr.ravel().tolist())
    else:
        proto.tensor_content = np.ascontiguousarray(arr, arr.dtype.newbyteorder("<")).tobytes()
    return proto


def _raw_bytes(arr: np.ndarray[Any, Any]) -> bytes:
    if arr.dtype.kind == "O":
        return b"".join(_U32.pack(len(b)) + b for b in arr.ravel().tolist())
    return np.ascontiguousarray(arr, arr.dtype.newbyteorder("<")).tobytes()


def encode_request(
    protocol: str,
    model: ModelInfo,
    payload: dict[str, np.ndarray[Any, Any]],
    mode: str,
    timeout_ms: int | None = None,
    binary: bool = False,
) -> Target:
    """The HTTP request for one inference on ``model`` with use_run_handler_pool set per ``mode``."""
    pool = MODES[mode]
    datatypes = {s.name: s.datatype for s in model.inputs}
    # the timeout in a header too: the server sheds on it before reading the body (server/admission.py)
    extra = {TIMEOUT_HEADER: str(timeout_ms)} if timeout_ms and protocol != "tfserving" else {}
    if protocol == "native":
        path = f"/v1/models/{model.name}:run"
        if binary:
            msg = serving_pb2.RunRequest()
            for name, arr in payload.items():
                msg.feeds[name].CopyFrom(_tensor_proto(arr, datatypes[name]))
            if timeout_ms:
                msg.run_options.timeout_in_ms = timeout_ms
            if pool is not None:
                msg.use_run_handler_pool = pool
            content_type = "application/x-protobuf"
            headers = {"Content-Type": content_type, **extra}
            return Target(model.name, mode, path, msg.SerializeToString(), headers)
        options: dict[str, Any] = {}
        if timeout_ms:
            options["timeout_in_ms"] = timeout_ms
        if pool is not None:
            options["experimental"] = {"use_run_handler_pool": pool}
        body: dict[str, Any] = {"feeds": {n: _json_value(a) for n, a in payload.items()}}
        if options:
            body["run_options"] = options
        return Target(model.name, mode, path, _dumps(body), {"Content-Type": "application/json", **extra})
    if protocol == "kserve":
        path = f"/v2/models/{model.name}/infer"
        params: dict[str, Any] = {}
        if timeout_ms:
            params["timeout"] = timeout_ms * 1000  # KServe's timeout parameter is in microseconds
        if pool is not None:
            params["use_run_handler_pool"] = pool
        inputs: list[dict[str, Any]] = []
        chunks: list[bytes] = []
        for name, arr in payload.items():
            entry: dict[str, Any] = {"name": name, "shape": list(arr.shape), "datatype": datatypes[name]}
            if binary:
                chunk = _raw_bytes(arr)
                entry["parameters"] = {"binary_data_size": len(chunk)}
                chunks.append(chunk)
            else:
                entry["data"] = _json_value(arr.ravel())
            inputs.append(entry)
        if binary:
            params["binary_data_output"] = True
        request: dict[str, Any] = {"inputs": inputs}
        if params:
            request["parameters"] = params
        header = _dumps(request)
        if not binary:
            return Target(model.name, mode, path, header, {"Content-Type": "application/json", **extra})
        headers = {"Content-Type": "application/octet-stream", HEADER_LENGTH: str(len(header)), **extra}
        return Target(model.name, mode, path, b"".join([header, *chunks]), headers)
    if protocol == "tfserving":
        # TF Serving's REST API has no per-request pool switch nor timeout: the server defaults apply
        body = {"inputs": {n: _json_value(a) for n, a in payload.items()}}
        path = f"/v1/models/{model.name}:predict"
        return Target(model.name, mode, path, _dumps(body), {"Content-Type": "application/json"})
    raise ValueError(f"unknown protocol {protocol!r}")


def _dumps(body: Any) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


class Picker:
    """Chooses the next request's model by weight (seeded) among the targets of one mode."""

    def __init__(self, targets: list[Target], weights: list[float], rng: random.Random) -> None:
        self.targets = targets
        self.cum = list(np.cumsum(weights, dtype=float))
        self.rng = rng

    def __call__(self) -> Target:
        if len(self.targets) == 1:
            return self.targets[0]
        return self.rng.choices(self.targets, cum_weights=self.cum)[0]


# --- recording ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    start: float  # seconds since the recorder's origin when the request was due (open loop) or sent
    latency: float  # seconds, from ``start`` to the end of the response
    status: int | str  # the HTTP status, or the client-side failure ("client_timeout", "connect_error", ...)
    mode: str
    model: str

    @property
    def ok(self) -> bool:
        return self.status == 200


@dataclass
class Recorder:
    """The samples of a run, plus running counters the live progress display reads."""

    origin: float = field(default_factory=time.perf_counter)
    samples: list[Sample] = field(default_factory=list)
    errors: int = 0
    in_flight: int = 0
    send_lags: list[float] = field(default_factory=list)  # open loop: actual send - scheduled, seconds
    send_span: float = 0.0  # open loop: phase start to the last actual send, summed over the phases
    schedule_span: float = 0.0  # open loop: phase start to the last scheduled send, summed
    recent: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=32768))

    def add(self, start: float, end: float, status: int | str, target: Target) -> None:
        self.samples.append(Sample(start - self.origin, end - start, status, target.mode, target.model))
        if status == 200:
            self.recent.append((end, end - start))
        else:
            self.errors += 1

    def window(self, seconds: float = 2.0) -> tuple[float, list[float]]:
        """Successful responses per second and their latencies over the last ``seconds``."""
        now = time.perf_counter()
        latencies = [lat for end, lat in self.recent if end >= now - seconds]
        span = min(seconds, now - self.origin)
        return (len(latencies) / span if span > 0 else 0.0), latencies


# --- sending --------------------------------------------------------------------------------------------


class HttpSender:
    """Sends requests over keep-alive connections, at most ``connections`` at a time.

    The connections are split over httpx clients of at most ``SHARD`` connections each (one client when
    ``connections <= SHARD``, as in a closed loop of a few clients): httpcore's pool bookkeeping costs
    O(connections^2) per request, which made the generator its own bottleneck with hundreds of connections.
    A request waits for a free connection here, first come first served, at most ``timeout_s`` (then
    "client_timeout"), and ``timeout_s`` bounds each step of the exchange too, so a run ends at most about
    twice that after its last send. Proxy settings from the environment are ignored: a load test
    measures the server, not a proxy.
    """

    SHARD = 16

    def __init__(self, base_url: str, connections: int, timeout_s: float) -> None:
        self.sizes = sizes = [min(self.SHARD, connections - i) for i in range(0, connections, self.SHARD)]
        self.clients = [
            httpx.AsyncClient(
                base_url=base_url,
                limits=httpx.Limits(max_connections=n, max_keepalive_connections=n),
                timeout=httpx.Timeout(timeout_s),
                trust_env=False,
            )
            for n in sizes
        ]
        self.timeout_s = timeout_s
        self.first_errors: dict[str, str] = {}  # status -> the message of its first occurrence
        # one slot per connection, the clients interleaved so that the load spreads over them
        self.slots: asyncio.Queue[httpx.AsyncClient] = asyncio.Queue()
        for i in range(max(sizes)):
            for client, n in zip(self.clients, sizes, strict=True):
                if i < n:
                    self.slots.put_nowait(client)

    async def __aenter__(self) -> HttpSender:
        return self

    async def __aexit__(self, *exc: object) -> None:
        for client in self.clients:
            await client.aclose()

    async def __call__(self, target: Target) -> int | str:
        try:
            async with asyncio.timeout(self.timeout_s):
                client = await self.slots.get()
        except TimeoutError:
            return self._failed("client_timeout", f"no free connection within {self.timeout_s:g} s")
        try:
            response = await client.post(target.path, content=target.content, headers=target.headers)
        except httpx.TimeoutException as e:
            return self._failed("client_timeout", f"{type(e).__name__} after {self.timeout_s:g} s")
        except httpx.ConnectError as e:
            return self._failed("connect_error", str(e))
        except httpx.HTTPError as e:
            return self._failed(type(e).__name__, str(e))
        finally:
            self.slots.put_nowait(client)
        if response.status_code != 200 and str(response.status_code) not in self.first_errors:
            self.first_errors[str(response.status_code)] = _error_text(response)
        return response.status_code

    def _failed(self, status: str, message: str) -> str:
        self.first_errors.setdefault(status, message)
        return status


Send = Callable[[Target], Awaitable[int | str]]


# --- the loops ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Load:
    """How much load one phase offers: ``concurrency`` clients (closed) or ``rate`` req/s (open), for
    ``duration`` seconds or ``requests`` requests."""

    concurrency: int | None = None
    rate: float | None = None
    duration: float | None = None
    requests: int | None = None


def poisson_arrivals(
    rate: float, rng: random.Random, duration: float | None = None, count: int | None = None
) -> Iterator[float]:
    """Send times (seconds from the start) of a Poisson process at ``rate``: exponential gaps, until
    ``duration`` has passed or ``count`` arrivals were produced."""
    t, n = 0.0, 0
    while count is None or n < count:
        t += rng.expovariate(rate)
        if duration is not None and t >= duration:
            return
        yield t
        n += 1


async def run_closed(
    send: Send, pick: Callable[[], Target], recorder: Recorder, concurrency: int, load: Load
) -> float:
    """``concurrency`` clients, each sending its next request as soon as the last one is answered.
    Returns the phase's wall time (until the last response)."""
    start = time.perf_counter()
    deadline = start + load.duration if load.duration is not None else math.inf
    remaining = load.requests if load.requests is not None else math.inf

    async def client() -> None:
        nonlocal remaining
        while True:
            sent = time.perf_counter()
            if sent >= deadline or remaining <= 0:
                return
            remaining -= 1
            target = pick()
            recorder.in_flight += 1
            try:
                status = await send(target)
            finally:
                recorder.in_flight -= 1
            recorder.add(sent, time.perf_counter(), status, target)

    await asyncio.gather(*(client() for _ in range(concurrency)))
    return time.perf_counter() - start


async def run_open(
    send: Send, pick: Callable[[], Target], recorder: Recorder, rate: float, load: Load, rng: random.Random
) -> float:
    """Sends at Poisson arrival times without waiting for answers; each latency counts from the request's
    scheduled time. Returns the phase's wall time (until the last response)."""
    start = time.perf_counter()
    pending: set[asyncio.Task[None]] = set()
    last = [start, start]  # the last scheduled and the last actual send

    async def one(target: Target, due: float) -> None:
        now = time.perf_counter()
        last[1] = max(last[1], now)
        recorder.send_lags.append(now - due)
        try:
            status = await send(target)
        finally:
            recorder.in_flight -= 1
        recorder.add(due, time.perf_counter(), status, target)

    behind = 0
    for offset in poisson_arrivals(rate, rng, load.duration, load.requests):
        due = start + offset
        delay = due - time.perf_counter()
        if delay > 0:
            behind = 0
            await asyncio.sleep(delay)
        else:
            behind += 1
            if behind % 32 == 0:  # far behind schedule: still let the requests in flight make progress
                await asyncio.sleep(0)
        last[0] = due
        recorder.in_flight += 1
        task = asyncio.create_task(one(pick(), due))
        pending.add(task)
        task.add_done_callback(pending.discard)
    if pending:
        await asyncio.wait(list(pending))
    recorder.schedule_span += last[0] - start
    recorder.send_span += last[1] - start
    return time.perf_counter() - start


async def run_phase(
    send: Send, pick: Callable[[], Target], recorder: Recorder, load: Load, rng: random.Random
) -> float:
    if load.rate is not None:
        return await run_open(send, pick, recorder, load.rate, load, rng)
    return await run_closed(send, pick, recorder, load.concurrency or 1, load)
