"""``--protocol kserve-grpc``: KServe v2 ModelInfer requests over gRPC (the server's ``[server] grpc_port``).

Each request is serialized once before the load starts, like the HTTP bodies, and sent as bytes through a
unary call without serializers, so the generator pays one gRPC round trip per request. ``--binary`` sends
the tensors as ``raw_input_contents`` (what tritonclient.grpc sends), otherwise as typed ``contents``.
The model metadata and the batching metrics still come over HTTP (``--url``).
"""

from __future__ import annotations

import math
from typing import Any
from urllib.parse import urlsplit

import grpc
import httpx
import numpy as np

from poolserve.loadtest.generator import MODES, LoadtestError, ModelInfo, Target, _raw_bytes
from poolserve.proto import grpc_service_pb2
from poolserve.server.codec import KSERVE_CONTENTS

METHOD = "/inference.GRPCInferenceService/ModelInfer"
LIVE_METHOD = "/inference.GRPCInferenceService/ServerLive"
DEFAULT_GRPC_PORT = 8501  # the server's default [server] grpc_port
# how long the check before the load waits for the server's answer
_CHECK_TIMEOUT_S = 5.0


def default_address(url: str) -> str:
    """The gRPC address beside an HTTP URL: its host and the default gRPC port (the URL's port is the HTTP
    one, never the gRPC one)."""
    host = urlsplit(url).hostname or "127.0.0.1"
    return f"[{host}]:{DEFAULT_GRPC_PORT}" if ":" in host else f"{host}:{DEFAULT_GRPC_PORT}"


def check_address(address: str) -> str:
    """``address`` as gRPC takes it (HOST:PORT, [IPv6]:PORT), or ValueError saying what is wrong with it.
    Unchecked, gRPC reads a missing port as 443 and a URL as a host name, and every request fails."""
    if "://" in address:
        raise ValueError(f"give HOST:PORT, not a URL: {address!r}")
    host, sep, port = address.rpartition(":")
    if not sep or not host or host == "[]":
        raise ValueError(f"give HOST:PORT (the server's [server] grpc_port), got {address!r}")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"the port in {address!r} must be a number from 1 to 65535")
    if ":" in host and not (host.startswith("[") and host.endswith("]")):
        raise ValueError(f"write an IPv6 address in brackets: [{host}]:{port}")
    return address


def encode_grpc_request(
    model: ModelInfo,
    payload: dict[str, np.ndarray[Any, Any]],
    mode: str,
    timeout_ms: int | None = None,
    binary: bool = False,
) -> Target:
    """A serialized ModelInferRequest (the Target's path is the method, its content the message)."""
    request = grpc_service_pb2.ModelInferRequest(model_name=model.name)
    pool = MODES[mode]
    if timeout_ms:
        request.parameters["timeout"].int64_param = timeout_ms * 1000  # microseconds
    if pool is not None:
        request.parameters["use_run_handler_pool"].bool_param = pool
    datatypes = {s.name: s.datatype for s in model.inputs}
    for name, arr in payload.items():
        datatype = datatypes[name]
        tensor = request.inputs.add(name=name, datatype=datatype, shape=arr.shape)
        if binary or datatype not in KSERVE_CONTENTS:  # FP16 has no typed contents
            request.raw_input_contents.append(_raw_bytes(arr))
        else:
            getattr(tensor.contents, KSERVE_CONTENTS[datatype]).extend(arr.ravel().tolist())
    if request.raw_input_contents and len(request.raw_input_contents) != len(request.inputs):
        raise ValueError("every input must be raw when one is (FP16 inputs need --binary)")
    return Target(model.name, mode, METHOD, request.SerializeToString(), {})


class GrpcSender:
    """Sends serialized requests over ``channels`` HTTP/2 connections (one per 16 requests in flight: one
    connection carries many calls at once). ``clients`` holds the HTTP client for metadata and metrics."""

    PER_CHANNEL = 16

    def __init__(self, address: str, base_url: str, connections: int, timeout_s: float) -> None:
        count = max(1, math.ceil(connections / self.PER_CHANNEL))
        # a local subchannel pool each: otherwise the channels to one address share one connection
        options = [("grpc.use_local_subchannel_pool", 1), ("grpc.max_receive_message_length", -1)]
        self.address = address
        self.channels = [grpc.aio.insecure_channel(address, options=options) for _ in range(count)]
        # no serializers: bytes in, bytes out
        self.calls: list[grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]] = [
            ch.unary_unary(METHOD) for ch in self.channels
        ]
        http = httpx.AsyncClient(base_url=base_url, timeout=httpx.Timeout(timeout_s), trust_env=False)
        self.clients = [http]
        self.timeout_s = timeout_s
        self.first_errors: dict[str, str] = {}
        self._next = 0

    async def __aenter__(self) -> GrpcSender:
        await self.check()
        return self

    async def check(self) -> None:
        """One ServerLive call before the load: a wrong address is one clear error, not every request
        failing."""
        live: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = self.channels[0].unary_unary(LIVE_METHOD)
        try:
            await live(b"", timeout=_CHECK_TIMEOUT_S)
        except grpc.aio.AioRpcError as e:
            await self.__aexit__()
            raise LoadtestError(
                f"no KServe gRPC server answers at {self.address} ({e.code().name}: {e.details()}); give "
                f"--grpc-address HOST:PORT, the server's [server] grpc_port (default {DEFAULT_GRPC_PORT})"
            ) from None

    async def __aexit__(self, *exc: object) -> None:
        for channel in self.channels:
            await channel.close()
        for client in self.clients:
            await client.aclose()

    async def __call__(self, target: Target) -> int | str:
        call = self.calls[self._next % len(self.calls)]
        self._next += 1
        try:
            await call(target.content, timeout=self.timeout_s)
        except grpc.aio.AioRpcError as e:
            # a timeout is 504 as over HTTP (the report counts those); other failures by their code's name
            status: int | str = 504 if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED else e.code().name
            self.first_errors.setdefault(str(status), e.details() or e.code().name)
            return status
        return 200
