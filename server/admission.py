"""Admission: shed at arrival, cheaply, the requests the queue says cannot finish by their deadline.

A request's deadline counts from its arrival (``server.protocol.arrival``). The middleware decides from
what is known before the body is read: the model (from the URL), the timeout (the ``X-Request-Timeout-Ms``
header, else ``server.default_timeout_ms``) and the queue's expected cost: the measured cost of each
request admitted and not yet answered, plus the new one's. A request that cannot finish in time gets 503
with ``Retry-After`` (whole seconds, rounded up, as HTTP defines it) and ``Retry-After-Ms`` (the same, in
milliseconds); one whose deadline has already passed while it waited (socket, event loop) gets 504. Both
answers cost no body read and no decode. Once decoded, the request's own timeout (run options, KServe's
``timeout``) is checked again against the work still ahead of it (``check_decoded``).

The cost of a model's request is measured, not configured: when an admitted request is answered, the time
since the previous answer (or since its arrival, when the server was idle before it) is its share of the
server's time; its mean over the model's last ``COST_ANSWERS`` answers is the cost. Under load that is the
inverse of the throughput the server actually reaches, parallelism included, so the queue's expected cost is
how long the server needs to answer what it has already accepted.

With ``max_in_flight_per_client``, one client (the ``client_header``'s value, else the peer's address) may
have that many inference requests admitted and unanswered; past it, 429 with the same ``Retry-After``
headers, valued at the work queued up to that client's oldest open request (when a slot should free). So
one client's burst is refused as its own, before it fills the queue and gets everybody else 503s.

Under the HTTP server the decision is made inside the protocol, in the parser's callback that completes the
headers (``EarlyAdmission``, given to ``server.protocol``): a refused request costs no ASGI task, no
middleware and no body read, and its answer leaves in the same event loop callback that read its headers.
Measured with the cnn example under ``loadtest --overload`` (1x-5x, a loaded 2-core machine), the ASGI
task of a request started p99 22-160 ms after its headers were parsed, and that wait was most of the time
to shed: in the server's view shed answers took p50 1.4-17 ms, p99 7-383 ms through the middleware, and
p50 0.08-0.3 ms, p99 0.3-35 ms (under 10 ms in 17 of 20 steps) from the protocol. The middleware decides
for the requests the protocol did not (an app served by another server, a test client).
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Query
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from poolserve.proto import config_pb2
from poolserve.runtime.deadline import HEADER, SERVER_DEFAULT
from poolserve.runtime.errors import (
    DeadlineExceededError,
    InvalidArgumentError,
    OpError,
    ResourceExhaustedError,
    UnavailableError,
)
from poolserve.server import codec, errors
from poolserve.server.protocol import OVER_CONNECTIONS_KEY, Refusal, arrival, declared_length, header

if TYPE_CHECKING:  # the service keeps the server's Admission (server.service imports this module)
    from poolserve.server.service import InferenceService, InferRequest

TIMEOUT_HEADER = "X-Request-Timeout-Ms"
_TIMEOUT_KEY = TIMEOUT_HEADER.lower().encode()
_TICKET_KEY = "poolserve.ticket"
# a model's cost is the mean share of its last this many answers. It was an exponential average weighing
# about the last 10; a batch answers its members together, one long share then zeros, and right after a
# batch that average fell far below the true cost: the example cnn at 5x of its capacity (batches of
# 10-30, true cost ~4.3 ms) read 0.5-8.4 ms, and admission let in up to eight times what would finish in
# time (accepted p99 1.12-1.18 s against a 1 s deadline, 334-739 answers 504 in a 10 s step).
COST_ANSWERS = 64
# the expected wait is a mean: a margin keeps the accepted requests' tail within the deadline
_SAFETY = 1.15
# At arrival, admitted work must be expected to be answered within this share of the deadline. A queue
# longer than the server's parallelism adds latency and no throughput, and the cost is a mean measured on
# a machine whose speed varies (shared cores): the rest of the budget absorbs it. Measured with the cnn
# example (batch 8, deadline 1 s, loadtest --overload): with the whole budget, 3x capacity gave 105 504s in
# 6 s and shed after decoding (time to shed ~1 s).
_BUDGET = 0.5
_WINDOW = 1 << 14
# the event loop's lag is sampled this often (100 timer callbacks a second, a few microseconds each); the
# window then holds the last 164 s
_LAG_PERIOD = 0.01


class ShedError(UnavailableError):
    """503: the request cannot finish by its deadline; retry after ``retry_after_ms``."""

    def __init__(self, message: str, retry_after_ms: int) -> None:
        super().__init__(message)
        self.retry_after_ms = retry_after_ms

    @property
    def headers(self) -> dict[str, str]:
        return retry_headers(self.retry_after_ms)


class ThrottledError(ResourceExhaustedError):
    """429: the client has ``max_in_flight_per_client`` requests in flight; retry after ``retry_after_ms``."""

    def __init__(self, message: str, retry_after_ms: int) -> None:
        super().__init__(message)
        self.retry_after_ms = retry_after_ms

    @property
    def headers(self) -> dict[str, str]:
        return retry_headers(self.retry_after_ms)


def retry_headers(retry_after_ms: int) -> dict[str, str]:
    seconds = max(1, math.ceil(retry_after_ms / 1000))
    return {"Retry-After": str(seconds), "Retry-After-Ms": str(retry_after_ms)}


@dataclass(eq=False)
class Ticket:
    """An admitted request: its model, when it arrived and its timeout."""

    admission: Admission
    model: str
    arrived: float
    timeout_ms: int
    header_timeout: bool  # the timeout came from the header (applied when the body sets none)
    seq: int = 0
    client: str | None = None  # counted against the per-client limit
    arrivals: int = 0  # the admission's arrivals, this one included, when it arrived (InferenceService.alone)


@dataclass
class LoopLag:
    """How late the event loop runs a timer due every 10 ms: how long anything that became ready (a
    connection's bytes, a request's task) waits behind the loop's other work, the GIL and the CPU. Under
    the server's lifespan (``start``/``stop``); ``window`` holds (time, lag) as the shed window does."""

    window: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=_WINDOW))
    _timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._next(asyncio.get_running_loop())

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _next(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = loop.call_later(_LAG_PERIOD, self._tick, loop, time.monotonic() + _LAG_PERIOD)

    def _tick(self, loop: asyncio.AbstractEventLoop, due: float) -> None:
        now = time.monotonic()
        self.window.append((now, max(0.0, now - due)))
        self._next(loop)


@dataclass
class Admission:
    """The queue's expected cost and the per-model costs it is made of (event loop only: no locks)."""

    cost: dict[str, float] = field(default_factory=dict)  # seconds of the server per answer, per model
    shares: dict[str, deque[float]] = field(default_factory=dict)  # the last answers' shares, per model
    open: dict[int, Ticket] = field(default_factory=dict)  # admitted, not answered, by admission order
    waiting: Counter[str] = field(default_factory=Counter)  # the same, counted per model
    clients: Counter[str] = field(default_factory=Counter)  # the same, per client (when limited)
    throttled: int = 0  # answered 429: over the per-client limit
    last_answer: float = 0.0
    shed: int = 0
    # the latest answers, as the server saw them (end, seconds from arrival): what loadtest --overload
    # reads to tell the server's share of a latency from the generator's
    accepted_window: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=_WINDOW))
    shed_window: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=_WINDOW))
    loop_lag: LoopLag = field(default_factory=lambda: LoopLag())
    arrivals: int = 0  # requests that came to admission, admitted or not
    # when a request was last refused as it arrived (shed, throttled, past its deadline, past max_in_flight
    # or max_connections: ``refuse``); time.monotonic()
    refused_at: float = float("-inf")
    _seq: int = 0

    @property
    def pending(self) -> float:
        """Seconds: what the server needs to answer every admitted request, at today's costs."""
        return sum(n * self.cost.get(m, 0.0) for m, n in self.waiting.items())

    def expected(self, model: str) -> float:
        """Seconds until a request for ``model`` admitted now would be answered (with the margin)."""
        return (self.pending + self.cost.get(model, 0.0)) * _SAFETY

    def decide(self, model: str, arrived: float, timeout_ms: int, now: float) -> int | None:
        """None to admit; else how many ms until the queue would have room for it."""
        # An idle server admits: its costs may be stale (measured under a load since gone, which would shed
        # everything forever), and only answers measure them again.
        if timeout_ms <= 0 or not self.open:
            return None
        expected = self.expected(model)
        if expected <= 0:  # nothing measured: no reason to shed (a deadline too short for it is a 504)
            return None
        late = now + expected - (arrived + _BUDGET * timeout_ms / 1000.0)
        return None if late <= 0 else max(1, math.ceil(late * 1000))

    def over_limit(self, client: str, limit: int) -> int | None:
        """None while ``client`` has fewer than ``limit`` requests open; else the ms until its oldest
        should be answered (the work admitted up to it, at today's costs)."""
        if self.clients[client] < limit:
            return None
        total = 0.0
        for other in self.open.values():
            total += self.cost.get(other.model, 0.0)
            if other.client == client:
                break
        return max(1, math.ceil(total * _SAFETY * 1000))

    def arrive(
        self,
        model: str,
        arrived: float,
        timeout_ms: int,
        header: bool = False,
        client: str | None = None,
        limit: int = 0,
        shed: bool = True,
        source: str | None = None,
    ) -> Ticket:
        """Admits a request (the caller releases its ticket when it is answered), or refuses it:
        DeadlineExceededError when its deadline passed before it was read, ThrottledError (429) when
        ``client`` has ``limit`` requests open, ShedError (503) when the queue says it cannot finish in
        time (with ``shed``). The refusals carry their message and when to retry; ``source`` names the
        timeout's setting (else the header, or the server's default)."""
        self.arrivals += 1
        now = time.monotonic()
        if timeout_ms > 0 and now >= arrived + timeout_ms / 1000.0:
            self.refuse(now)
            source = source or (HEADER if header else SERVER_DEFAULT)
            raise DeadlineExceededError(
                f"The deadline of {timeout_ms} ms passed before the request was read ({source})"
            )
        if client is not None and limit > 0:
            retry_ms = self.over_limit(client, limit)
            if retry_ms is not None:
                self.throttled += 1
                self.refuse(now)
                raise ThrottledError(
                    f"Client {client!r} already has {limit} requests in flight (max_in_flight_per_client; "
                    "clients are told apart by the client_header, else their address); retry when one is "
                    "answered",
                    retry_ms,
                )
        retry_ms = self.decide(model, arrived, timeout_ms, now) if shed else None
        if retry_ms is not None:
            self.shed += 1
            self.refuse(now)
            raise ShedError(
                f"The server cannot answer a '{model}' request within {timeout_ms} ms: the work queued needs "
                f"about {self.expected(model) * 1000:.0f} ms, more than half of it (the rest is the "
                "margin for a busy machine); retry later",
                retry_ms,
            )
        return self.admit(model, arrived, timeout_ms, header, client if limit > 0 else None)

    def refuse(self, now: float | None = None) -> None:
        """Notes a request refused as it arrived (``arrive``'s refusals, and the server's at max_in_flight
        or max_connections): the server is past its capacity (``InferenceService.loop_free``)."""
        self.refused_at = time.monotonic() if now is None else now

    def admit(
        self, model: str, arrived: float, timeout_ms: int, header: bool, client: str | None = None
    ) -> Ticket:
        self._seq += 1
        ticket = Ticket(self, model, arrived, timeout_ms, header, self._seq, client, self.arrivals)
        self.open[ticket.seq] = ticket
        self.waiting[model] += 1
        if client is not None:
            self.clients[client] += 1
        return ticket

    def release(self, ticket: Ticket, ok: bool, now: float) -> None:
        if self.open.pop(ticket.seq, None) is None:
            return
        self.waiting[ticket.model] -= 1
        if ticket.client is not None:
            left = self.clients[ticket.client] - 1
            if left:
                self.clients[ticket.client] = left
            else:
                del self.clients[ticket.client]  # a server sees many clients: keep only the active ones
        if ok:
            self.accepted_window.append((now, now - ticket.arrived))
        share = now - max(self.last_answer, ticket.arrived)
        self.last_answer = now
        if ok and share >= 0:
            shares = self.shares.get(ticket.model)
            if shares is None:
                shares = self.shares[ticket.model] = deque(maxlen=COST_ANSWERS)
            shares.append(share)
            self.cost[ticket.model] = sum(shares) / len(shares)

    def ahead(self, ticket: Ticket) -> float:
        """What the server needs to answer the requests admitted before ``ticket``, and ticket itself: all
        the open ones (``pending``, a sum per model) less those admitted after it, counted from the newest
        (the few that came while it was decoded), not the whole queue from the oldest: under overload each
        admitted request walked every open ticket."""
        total = self.pending
        open_ = self.open
        for seq in reversed(open_):
            if seq <= ticket.seq:
                break
            total -= self.cost.get(open_[seq].model, 0.0)
        return max(0.0, total)


# the longest timeout taken from the header (RunOptions.timeout_in_ms is an int64; 2^31 ms is 24 days)
MAX_TIMEOUT_MS = 2**31 - 1


def _header_timeout(scope: Scope) -> int | None:
    """The header's timeout in ms (None without one); InvalidArgumentError for one that is no integer."""
    given = header(scope, _TIMEOUT_KEY)
    if given is None:
        return None
    text = given.strip()
    if not text.isdigit() or not text.isascii() or int(text) <= 0:
        raise InvalidArgumentError(
            f"{TIMEOUT_HEADER} must be a positive integer (milliseconds), got {text[:40]!r}"
        )
    return min(int(text), MAX_TIMEOUT_MS)


def _apply_header_timeout(request: InferRequest, timeout_ms: int) -> None:
    """The header's timeout, for a request whose body set none."""
    options = request.run_options
    if options is None or options.timeout_in_ms <= 0:
        if options is None:
            request.run_options = options = config_pb2.RunOptions()
        options.timeout_in_ms = timeout_ms
        request.timeout_source = HEADER


def check_decoded(scope: Scope, request: InferRequest, service: InferenceService) -> None:
    """After decoding: applies the header's timeout when the body set none, and sheds the request
    (ShedError, 503) if its own timeout leaves too little for the work admitted before it (none: it is
    admitted, whatever its own cost)."""
    ticket: Ticket | None = scope.get(_TICKET_KEY)
    if ticket is None:
        # admission watches no request (shed off and no per-client limit): the header is read here
        header_ms = _header_timeout(scope)
        if header_ms is not None:
            _apply_header_timeout(request, header_ms)
        return
    if ticket.header_timeout:
        _apply_header_timeout(request, ticket.timeout_ms)
    options = request.run_options
    timeout_ms = service.timeout_ms(options)
    if timeout_ms <= 0 or not service.config.server.shed:
        return
    admission = ticket.admission
    ahead = admission.ahead(ticket)
    if ahead <= admission.cost.get(ticket.model, 0.0):
        # nothing admitted before it: as at arrival, an idle server admits (a retry would find the same
        # server; a timeout too short for the work itself is the step's 504)
        return
    now = time.monotonic()
    expected = ahead * _SAFETY
    late = now + expected - (ticket.arrived + timeout_ms / 1000.0)
    if late > 0 and now < ticket.arrived + timeout_ms / 1000.0:  # past the deadline: the service's 504
        admission.shed += 1
        raise ShedError(
            f"The server cannot answer within the request's {timeout_ms} ms: the work queued ahead of it "
            f"needs about {expected * 1000:.0f} ms; retry later",
            max(1, math.ceil(late * 1000)),
        )


def over_connections_message(limit: int) -> str:
    return f"The server has more than max_connections ({limit}) open; retry later"


def over_connections_headers() -> dict[str, str]:
    """A request on a connection past max_connections: retry in a second, on another connection."""
    return {**retry_headers(1000), "Connection": "close"}


def in_flight_refusal(limit: int) -> ShedError:
    """503 for a server at ``max_in_flight`` (the serving middleware's check, and the protocol's)."""
    return ShedError(f"The server is at its limit of {limit} requests in flight; retry later", 1000)


class InferPaths:
    """The inference routes' path templates (``/v1/models/{model}:run``, ...) as one pattern: a raw path's
    model and route template in one match, with no router walk (the protocol matches before any app runs).
    A template's other parameters (version, label) match one path segment; the app checks their values."""

    def __init__(self, templates: Sequence[str]) -> None:
        self.templates = [t for t in templates if "{model}" in t]
        alternatives = []
        for template in self.templates:
            pattern = re.escape(template).replace(r"\{model\}", "([^/:]+)")
            alternatives.append("(" + re.sub(r"\\\{\w+\\\}", "[^/:]+", pattern) + ")")
        self._pattern = re.compile("^(?:" + "|".join(alternatives) + ")$") if alternatives else None

    def match(self, path: str) -> tuple[str, str] | None:
        """(model, the route's template) for an inference path; None for any other."""
        found = self._pattern.match(path) if self._pattern is not None else None
        if found is None or found.lastindex is None:
            return None
        # each template is two groups, itself and its model: the last one to close is the template's
        return found.group(found.lastindex + 1), self.templates[(found.lastindex - 1) // 2]


class _Decision:
    """What the protocol's gate and the middleware share: which requests admission watches, the decision
    itself, and the count of a refusal."""

    def __init__(self, service: InferenceService, admission: Admission, paths: InferPaths) -> None:
        self.service = service
        self.admission = admission
        self.paths = paths

    def target(self, scope: Scope) -> tuple[str, str] | None:
        """(model, route template) of an inference request for a served model, if admission watches."""
        server = self.service.config.server
        if scope["method"] != "POST" or not (server.shed or server.max_in_flight_per_client > 0):
            return None
        found = self.paths.match(scope["path"])
        return found if found is not None and found[0] in self.service.models else None

    def decide(self, scope: Scope, model: str) -> Ticket:
        """The request's ticket, or the refusal raised by ``Admission.arrive`` (an OpError)."""
        server = self.service.config.server
        limit = server.max_in_flight_per_client
        header_ms = _header_timeout(scope)
        timeout_ms = header_ms or server.default_timeout_ms
        client = _client_key(scope, server.client_header.lower().encode()) if limit > 0 else None
        return self.admission.arrive(
            model, arrival(scope), timeout_ms, header_ms is not None, client, limit, server.shed
        )

    def count(self, scope: Scope, error: OpError) -> None:
        if isinstance(error, (ShedError, ThrottledError)):
            self.service.metrics.rejected.inc()
        if isinstance(error, ShedError):
            end = time.monotonic()
            self.admission.shed_window.append((end, end - arrival(scope)))


class EarlyAdmission(_Decision):
    """Admission inside the HTTP protocol, when a request's headers are in (``server.protocol``'s gate).

    Called with uvicorn's scope before the request's ASGI task exists. Returns None to leave the request
    to the app as it is (not an inference request; one the app answers before admission: past
    ``max_connections``, a body declared larger than ``max_request_bytes``; one whose client address a
    proxy header may rewrite, for the per-client limit); a ``Refusal``, the whole answer the app would give
    (503/429/504, the JSON error, Retry-After, X-Request-Id, ``extra_headers``), for a request the app
    never sees; or, for an admitted request, the callback that frees its ticket when its task ends (the
    middleware frees it first, with the answer's status, unless the app answered before reaching it)."""

    def __init__(
        self, service: InferenceService, admission: Admission, paths: InferPaths, new_id: Callable[[], str]
    ) -> None:
        super().__init__(service, admission, paths)
        self.new_id = new_id  # the service's request ids
        self.extra_headers: list[tuple[bytes, bytes]] = []  # added to every refusal (a worker's pid)

    def __call__(self, scope: Scope) -> Refusal | Callable[[], None] | None:
        if scope.get(OVER_CONNECTIONS_KEY):
            return None
        target = self.target(scope)
        if target is None:
            return None
        server = self.service.config.server
        length = declared_length(scope)
        if length is not None and length > server.max_request_bytes:
            return None
        if server.max_in_flight_per_client > 0 and _forwarded(scope, server.client_header.lower().encode()):
            return None
        model, endpoint = target
        if self.service.in_flight >= server.max_in_flight:
            self.service.metrics.rejected.inc()
            self.admission.refuse()
            return self._refusal(scope, in_flight_refusal(server.max_in_flight), model, endpoint)
        try:
            ticket = self.decide(scope, model)
        except OpError as e:
            self.count(scope, e)
            return self._refusal(scope, e, model, endpoint)
        scope[_TICKET_KEY] = ticket
        admission = self.admission
        return lambda: admission.release(ticket, False, time.monotonic())

    def _refusal(self, scope: Scope, error: OpError, model: str, endpoint: str) -> Refusal:
        status = errors.http_status(error.code)
        extra: dict[str, str] = getattr(error, "headers", None) or {}
        headers = errors.raw_headers(extra)
        headers.append((b"content-type", b"application/json"))
        request_id = scope_request_id(scope, self.new_id)
        headers.append((errors.REQUEST_ID_HEADER.lower().encode(), request_id.encode("latin-1")))
        headers.extend(self.extra_headers)
        body = codec.dumps(errors.error_body(error.message, error.code))
        self.service.metrics.count_request(model, endpoint, status, time.monotonic() - arrival(scope))
        return Refusal(status, headers, body)


class AdmissionMiddleware(_Decision):
    """Sheds inference requests before their body is read (503/504/429) when the protocol did not
    (``EarlyAdmission``), refuses requests on connections past max_connections (503, connection closed),
    and keeps the queue's cost as admitted requests finish."""

    def __init__(
        self, app: ASGIApp, service: InferenceService, admission: Admission, paths: InferPaths
    ) -> None:
        super().__init__(service, admission, paths)
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        server = self.service.config.server
        if scope.get(OVER_CONNECTIONS_KEY):
            self.admission.refuse()
            message = over_connections_message(server.max_connections)
            await errors.status_response(503, message, over_connections_headers())(scope, receive, send)
            return
        ticket: Ticket | None = scope.get(_TICKET_KEY)  # admitted by the protocol already
        if ticket is None:
            target = self.target(scope)
            if target is None:
                await self.app(scope, receive, send)
                return
            try:
                ticket = self.decide(scope, target[0])
            except OpError as e:
                await errors.error_response(e, getattr(e, "headers", None))(scope, receive, send)
                self.count(scope, e)
                return
            scope[_TICKET_KEY] = ticket
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            self.admission.release(ticket, status == 200, time.monotonic())


# a longer client id is cut (the header is the client's to choose: it must not make the table's keys grow)
MAX_CLIENT_ID = 128
# the longest X-Request-Id echoed (a longer or unprintable one is replaced by a fresh id)
MAX_REQUEST_ID = 128


def scope_arrivals(scope: Scope) -> int | None:
    """The admission's arrivals when the request arrived (``Ticket.arrivals``); None if it has no ticket."""
    ticket: Ticket | None = scope.get(_TICKET_KEY)
    return ticket.arrivals if ticket is not None else None


def scope_request_id(scope: Scope, new_id: Callable[[], str]) -> str:
    """The request's X-Request-Id if it sent a usable one, else ``new_id()``."""
    for key, value in scope.get("headers", ()):
        if key == b"x-request-id":
            rid: str = value.decode("latin-1").strip()
            if 0 < len(rid) <= MAX_REQUEST_ID and rid.isprintable():
                return rid
    return new_id()


def _forwarded(scope: Scope, client_header: bytes) -> bool:
    """The client is known by its address, and a proxy header may change it (uvicorn's ProxyHeaders
    middleware rewrites the scope's client from X-Forwarded-For, after the protocol)."""
    headers = dict(scope.get("headers", ()))
    return not headers.get(client_header, b"").strip() and b"x-forwarded-for" in headers


def _client_key(scope: Scope, header: bytes) -> str:
    """Who sent the request: the client header's value, else the peer's address."""
    for key, value in scope.get("headers", ()):
        if key == header:
            named = str(value.decode("latin-1")).strip()[:MAX_CLIENT_ID]
            if named:
                return named
    peer = scope.get("client")
    return str(peer[0]) if peer else "unknown"


def router(admission: Admission) -> APIRouter:
    api = APIRouter()

    @api.get("/v1/runtime/admission")
    async def state(window_s: float = Query(60.0, gt=0, le=3600)) -> dict[str, Any]:
        return runtime_state(admission, window_s)

    return api


def _percentiles(window: deque[tuple[float, float]], since: float) -> dict[str, Any]:
    recent = sorted(lat for end, lat in window if end >= since)
    if not recent:
        return {"count": 0, "p50_ms": None, "p99_ms": None}

    def at(q: float) -> float:
        return round(recent[min(len(recent) - 1, int(q * len(recent)))] * 1000, 3)

    return {"count": len(recent), "p50_ms": at(0.5), "p99_ms": at(0.99)}


def runtime_state(admission: Admission, window_s: float = 60.0) -> dict[str, Any]:
    """The queue's expected cost, the requests admitted and not yet answered, how many were shed (503) and
    throttled (429, per client), the clients with requests open, each model's measured cost, and over the
    last ``window_s`` seconds the latency, from arrival as the server stamped it, of the accepted (200) and
    the shed-at-arrival answers, and the event loop's lag (``LoopLag``)."""
    since = time.monotonic() - window_s
    return {
        "queued_cost_ms": round(admission.pending * 1000, 3),
        "admitted_open": len(admission.open),
        "shed": admission.shed,
        "throttled": admission.throttled,
        "clients_open": len(admission.clients),
        "cost_ms": {m: round(c * 1000, 3) for m, c in sorted(admission.cost.items())},
        "accepted": _percentiles(admission.accepted_window, since),
        "shed_at_arrival": _percentiles(admission.shed_window, since),
        "loop_lag": _percentiles(admission.loop_lag.window, since),
    }
