"""The one interface every protocol adapter implements, and the one path a request takes through it.

An adapter (native, KServe v2, TF Serving) owns its envelope only: ``decode`` turns a body into an
``InferRequest`` (tensors through ``server.codec``) plus whatever its answer needs, ``encode`` turns the
``InferResult`` into its answer. ``serve`` does the rest the same way for all: find the model, read the
body, decode it (in a thread when big), await the service, encode (in a thread when big).
"""

from __future__ import annotations

import time
import zlib
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from poolserve.runtime.errors import InvalidArgumentError
from poolserve.server import codec, errors
from poolserve.server.admission import check_decoded, scope_arrivals
from poolserve.server.hot import Answer, Body, too_large_message
from poolserve.server.models import ModelEntry
from poolserve.server.protocol import header
from poolserve.server.routes import Route
from poolserve.server.service import InferenceService, InferRequest, InferResult, request_info

C = TypeVar("C")  # what an adapter keeps from a request for its answer


@dataclass
class Encoded:
    """An answer's body: bytes, or parts that go out one after another without being joined (a binary
    tensor's bytes as a view of its array: a 1 MiB tensor costs no copy into the answer)."""

    content: Body
    media_type: str = "application/json"
    headers: dict[str, str] | None = None


class Adapter(ABC, Generic[C]):
    """A protocol's envelope. ``decode`` and ``encode`` may run in a worker thread: they only compute.

    ``decode`` gets the body as bytes, or as a read-only memoryview of the buffer the protocol read a large
    body into (``server.protocol.BODY_VIEW_KEY``), so that binary tensors can be views of it, not copies;
    ``bytes(body)`` costs nothing for bytes where a decoder needs them."""

    @abstractmethod
    def decode(
        self, request: Request, body: bytes | memoryview, entry: ModelEntry
    ) -> tuple[InferRequest, C]: ...

    @abstractmethod
    def encode(self, request: Request, result: InferResult, context: C) -> Encoded: ...

    def decode_size(self, request: Request, body: bytes | memoryview) -> int:
        """The bytes ``decode`` parses (a binary tensor's bytes cost no parsing)."""
        return len(body)

    def encode_size(self, result: InferResult, context: C) -> int:
        """The bytes of output ``encode`` writes as text."""
        return sum(np.asarray(v).nbytes for v in result.outputs.values() if v is not None)


async def serve(
    adapter: Adapter[C], service: InferenceService, request: Request, version: int | None
) -> Response:
    """The answer to an inference request, its body read from ``request``."""
    status, headers, content = await serve_body(adapter, service, request, version, None)
    response = Response(content if isinstance(content, bytes) else b"".join(content), status_code=status)
    response.raw_headers.extend(headers)
    return response


async def serve_body(
    adapter: Adapter[C],
    service: InferenceService,
    request: Request,
    version: int | None,
    body: bytes | memoryview | None,
) -> Answer:
    """The answer's status, headers (but content-length) and body; ``body`` is the request's body, read
    already (``server.hot``), or None to read it from ``request``."""
    request_id, received = request_info(request.scope)
    # the request holds its model version from here to its answer: a version retired meanwhile (a newer one
    # on disk, an unload call) finishes this request before it closes
    with service.repository.hold(request.path_params["model"], version) as entry:
        try:
            if body is None:
                body = await request.body()
            encoding = header(request.scope, _CONTENT_ENCODING)
            if encoding is not None:
                limit = service.config.server.max_request_bytes
                body = await codec.sized(len(body) * _INFLATION, decompressed, body, encoding, limit)
            size = adapter.decode_size(request, body)
            arrivals = scope_arrivals(request.scope)
            alone = service.alone(arrivals)
            try:
                infer, context = await codec.sized(size, adapter.decode, request, body, entry, alone=alone)
            except RecursionError:
                # JSON within orjson's 1024 levels, past Python's recursion limit where the decode walks or
                # prints a value (an error message's repr of a deep "shape", protobuf's JSON reader)
                raise codec.nested_too_deeply() from None
            infer.request_id, infer.received_at = request_id, received
            check_decoded(request.scope, infer, service)
            result = await service.infer(infer)
            size = adapter.encode_size(result, context)
            alone = service.alone(arrivals)
            out = await codec.sized(size, adapter.encode, request, result, context, alone=alone)
        except BaseException:  # an error, a deadline, a client gone: a failed request of this version
            entry.stats.failed(received, time.monotonic())
            raise
    if result.timings is not None:
        entry.stats.succeeded(result.timings, time.monotonic())
    return (
        200,
        [(b"content-type", out.media_type.encode("latin-1")), *errors.raw_headers(out.headers)],
        out.content,
    )


_CONTENT_ENCODING = b"content-encoding"
# a compressed body is sized for the codec thread as this many times its bytes: what it inflates to
_INFLATION = 4
# zlib's window bits per content coding: gzip's header, zlib's (HTTP's "deflate"), or none (raw deflate,
# which some clients send as "deflate")
_WBITS = {"gzip": 31, "x-gzip": 31, "deflate": 15}


def decompressed(body: bytes | memoryview, encoding: str, limit: int) -> bytes | memoryview:
    """A request body as it was before its Content-Encoding (``encoding``: the header's codings, in the
    order they were applied), as Triton and TF Serving accept it (tritonclient's
    ``request_compression_algorithm``): gzip and deflate, and identity. At most ``limit`` bytes
    decompressed (413 past it, as a plain body's size); 415 for a coding the server cannot decode; 400 for
    a body its coding cannot read."""
    for coding in reversed([c.strip().lower() for c in encoding.split(",")]):
        if coding in ("", "identity"):
            continue
        wbits = _WBITS.get(coding)
        if wbits is None:
            raise HTTPException(
                415, f"Content-Encoding {coding!r} is not supported: send gzip, deflate or identity"
            )
        try:
            body = _inflate(body, wbits, coding == "deflate", limit)
        except zlib.error as e:
            raise InvalidArgumentError(f"the request body is not valid {coding} data: {e}") from None
    return body


def _inflate(data: bytes | memoryview, wbits: int, raw_ok: bool, limit: int) -> bytes:
    """``data`` decompressed (every gzip member of it), at most ``limit`` bytes."""
    parts: list[bytes] = []
    size = 0
    while True:
        d: Any = zlib.decompressobj(wbits)
        try:
            out = d.decompress(data, limit + 1 - size)
        except zlib.error:
            if not raw_ok or parts:
                raise
            wbits, raw_ok = -15, False  # a raw deflate stream, without zlib's header
            continue
        size += len(out)
        if size > limit or d.unconsumed_tail:
            raise HTTPException(413, too_large_message(limit) + " once decompressed")
        parts.append(out)
        if not d.eof:
            raise zlib.error("the compressed data is truncated")
        data = d.unused_data
        if not data or wbits != 31:
            break  # a zlib or raw stream ends the body; gzip members may follow one another
    if data:
        raise zlib.error(f"{len(data)} bytes follow the compressed data")
    return b"".join(parts)


Handler = Callable[[Request], Awaitable[Response]]


def route(
    path: str,
    adapter: Adapter[C],
    service: InferenceService,
    version: Callable[[Request], int | None] = lambda r: codec.parse_version(r.path_params.get("version")),
) -> Route:
    """A POST route serving ``adapter``; ``version`` reads the version from the path (digits by default)."""

    async def handle(request: Request) -> Response:
        return await serve(adapter, service, request, version(request))

    async def fast(request: Request, body: bytes | memoryview) -> Answer:
        return await serve_body(adapter, service, request, version(request), body)

    found = Route(path, handle, methods=["POST"])
    found.fast = fast
    return found
