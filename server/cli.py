"""``poolserve``: the command line.

``poolserve serve [--config PATH] [--host H] [--port P] [--grpc-port G] [--workers N|auto] [--log-level L]
[--access-log]`` runs the server with uvicorn (the embedded configs/default.toml without --config), and its
gRPC API on the same event loop; ``--access-log`` logs every request. On SIGTERM the server stops reporting
ready and accepting connections, lets requests in flight finish (up to ``server.drain_seconds``) and exits
0. With more than one worker a supervisor runs that same server in each worker process (server/workers.py);
the workers share the HTTP and the gRPC port. ``--ray`` (with ``--ray-address``, ``--ray-replicas``) runs it
as Ray Serve replicas instead (server/ray_serve.py, the ``ray`` extra).
``poolserve loadtest ...`` runs the load generator when it is installed.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import importlib.util
import logging
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Literal

import uvicorn

from poolserve.server.config import Config, ConfigError, load_config
from poolserve.server.trace_db import resolve_path

if TYPE_CHECKING:
    from poolserve.server.grpc_server import GrpcServer
    from poolserve.server.workers import Worker

log = logging.getLogger("poolserve")
uvicorn_log = logging.getLogger("uvicorn.error")

LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


class _Server(uvicorn.Server):
    """uvicorn's server, telling the service to stop reporting ready as soon as a signal arrives, and
    serving gRPC on the same event loop when ``grpc`` is given (``(GrpcServer, host, port)``)."""

    def __init__(
        self,
        config: uvicorn.Config,
        on_exit: list[object],
        grpc: tuple[GrpcServer, str, int] | None = None,
        on_started: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(config)
        self._services = on_exit
        self._grpc = grpc
        self._on_started = on_started

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        for service in self._services:
            service.draining = True  # type: ignore[attr-defined]
        super().handle_exit(sig, frame)

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        if self._grpc is not None:
            grpc_server, host, port = self._grpc
            try:
                await grpc_server.start(host, port)
            except RuntimeError as e:
                log.error("%s", e)
                self.should_exit = True
                return
        await super().serve(sockets)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and sockets and self._on_started is None:
            # uvicorn says where it listens only on sockets it bound itself; a single server binds its own
            # (run_server) and says it in uvicorn's words
            host, port = self.config.host, self.config.port or sockets[0].getsockname()[1]
            shown = f"[{host}]" if ":" in host else host
            uvicorn_log.info("Uvicorn running on http://%s:%d (Press CTRL+C to quit)", shown, port)
        if self.started and self._on_started is not None:
            self._on_started()  # both ports listen and the lifespan has started

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # new gRPC calls are refused at once; those in flight finish within the drain, which the lifespan's
        # end waits for (they count in the service's in_flight) before it closes the models
        stopping = None
        if self._grpc is not None:
            grace = self.config.timeout_graceful_shutdown
            stopping = asyncio.ensure_future(self._grpc[0].stop(grace))
        await super().shutdown(sockets)
        if stopping is not None:
            await stopping


def _exit_zero(signum: int, frame: FrameType | None) -> None:
    # uvicorn re-raises the signal it shut down for once the old handler is back: a drained SIGTERM is a
    # clean exit
    raise SystemExit(0)


def _stop_starting(signum: int, frame: FrameType | None) -> None:
    # until the server (or the supervisor) takes the signal over, nothing is served: nothing to drain
    log.info("poolserve: %s while starting: exiting (nothing to drain)", signal.Signals(signum).name)
    raise SystemExit(0)


def serve(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper() if args.log_level != "trace" else "DEBUG")
    signal.signal(signal.SIGTERM, _stop_starting)
    try:
        config = load_config(args.config)
    except ConfigError as e:
        print(f"poolserve: {e}", file=sys.stderr)
        return 2
    if args.host is not None:
        config.server.host = args.host
    if args.port is not None:
        config.server.port = args.port
    if args.grpc_port is not None:
        config.server.grpc_port = args.grpc_port
    if args.workers is not None:
        config.server.workers = args.workers
    if not args.ray and (args.ray_address is not None or args.ray_replicas is not None):
        print("poolserve: --ray-address and --ray-replicas need --ray", file=sys.stderr)
        return 2
    if args.ray:
        if args.workers is not None:
            print("poolserve: --workers and --ray do not combine: give --ray-replicas", file=sys.stderr)
            return 2
        from poolserve.server.ray_serve import serve_on_ray  # imports Ray: only when asked for

        return serve_on_ray(config, args)
    workers = worker_count(config.server.workers)
    if workers > 1:
        from poolserve.server.workers import supervise

        return supervise(config, args, workers)
    return run_server(config, args)


def run_server(config: Config, args: argparse.Namespace, worker: Worker | None = None) -> int:
    """The server in this process: the only one, or one ``worker`` of several."""
    from poolserve.runtime import threadpool
    from poolserve.server import codec
    from poolserve.server.app import create_app  # imports the runtime and the kernels: only when serving
    from poolserve.server.protocol import protocol_factory

    signal.signal(signal.SIGTERM, _stop_starting)  # a worker's own, while its models load
    own: list[socket.socket] = []  # a single server's listening sockets, taken before its models load
    if worker is None:
        taken = _take_ports(config)
        if taken is None:
            return 1
        own = taken
        # "auto" traces: a file per port, the one bound (port 0 is a port the system picked: two servers
        # on port 0 wrote to the same traces-0 file); a worker's comes resolved from its supervisor
        config.traces.path = resolve_path(config.traces, own[0].getsockname()[1])
    try:
        app = create_app(config)
    except Exception as e:  # a model that does not load: say which, without a traceback
        print(f"poolserve: cannot start: {e}", file=sys.stderr)
        for sock in own:
            sock.close()
        return 1
    service = app.state.service
    if worker is not None:
        worker.attach(app)
    uv_config = uvicorn.Config(
        app,
        host=config.server.host,
        port=config.server.port,
        log_level=args.log_level,
        # a line per request cost ~150 us of the event loop's CPU (19% of a health check's); TF Serving and
        # Triton do not log each request by default either
        access_log=args.access_log,
        timeout_graceful_shutdown=max(1, round(config.server.drain_seconds)),
        lifespan="on",
        # httptools' protocol plus the arrival stamp, header timeout and size, connection limit, and
        # admission at the end of the headers
        http=protocol_factory(config.server, app.state.early_admission),  # type: ignore[arg-type]
        # the loop stays "auto": uvloop (installed with uvicorn[standard]) when present
    )
    grpc = None
    if config.server.grpc_port:
        from poolserve.server.grpc_server import GrpcServer

        # workers share the port as they share the HTTP one (SO_REUSEPORT); one server alone refuses a
        # taken port instead of sharing another process's calls
        grpc = (
            GrpcServer(service, reuse_port=worker is not None),
            config.server.host,
            config.server.grpc_port,
        )
    server = _Server(uv_config, [service], grpc, worker.started if worker is not None else None)
    signal.signal(signal.SIGTERM, _exit_zero)
    # this thread runs the event loop; every thread so far computes or waits in the background (gRPC's,
    # started later by the loop, keep the loop's priority)
    codec.start_codec_thread()
    threadpool.lower_other_threads(config.runtime.compute_nice)
    # Everything loaded so far (modules, graphs, constants) lives as long as the process: out of the cyclic
    # collector's sight, a full collection under load walks only what requests allocate (measured on the
    # example MLP: 72 ms pauses without this, the p99 latency).
    gc.collect()
    gc.freeze()
    try:
        server.run(sockets=worker.sockets() if worker is not None else own)
    except KeyboardInterrupt:
        return 130
    return 0 if server.started or not server.should_exit else 1


def _bind(host: str, port: int) -> list[socket.socket]:
    """Sockets bound to the port on every address of ``host``, as uvicorn's asyncio server binds them
    (SO_REUSEADDR, IPv6 sockets IPv6 only; no SO_REUSEPORT: a port another server listens on is refused)."""
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    bound: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(found):
            sock = socket.socket(family, kind, proto)
            bound.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
    except OSError:
        for sock in bound:
            sock.close()
        raise
    return bound


def _take_ports(config: Config) -> list[socket.socket] | None:
    """The HTTP port bound, and the gRPC port found free, before the models load, as the supervisor takes
    them: a taken port is exit 1 saying so at once (it was uvicorn's exit 3, or grpc's "Failed to bind",
    once every model had loaded). None when one is taken, said on stderr."""
    host = config.server.host
    try:
        http = _bind(host, config.server.port)
    except OSError as e:
        print(f"poolserve: cannot listen on {host}:{config.server.port}: {e.strerror}", file=sys.stderr)
        return None
    if config.server.grpc_port:
        try:
            for sock in _bind(host, config.server.grpc_port):
                sock.close()
        except OSError as e:
            for sock in http:
                sock.close()
            print(
                f"poolserve: cannot listen for gRPC on {host}:{config.server.grpc_port}: {e.strerror}",
                file=sys.stderr,
            )
            return None
    return http


def _workers_arg(value: str) -> int | Literal["auto"]:
    if value == "auto":
        return "auto"
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a number of at least 1 or 'auto', got {value!r}")
    return n


def _port_arg(value: str) -> int:
    # as server.port in the config: a port the OS would wrap (70000 listens on 4464) or refuse late
    try:
        port = int(value)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port from 0 to 65535, got {value!r}")
    return port


def worker_count(value: int | Literal["auto"]) -> int:
    """``server.workers`` as a number: "auto" is one per core this process may run on."""
    from poolserve.runtime.threadpool import usable_cores

    return usable_cores() if value == "auto" else int(value)


def _version() -> str:
    """The installed distribution's version (what KServe's server metadata reports too)."""
    import importlib.metadata

    try:
        return importlib.metadata.version("poolserve")
    except importlib.metadata.PackageNotFoundError:
        return "0"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="poolserve", description="Serve TensorFlow GraphDefs on numpy kernels."
    )
    parser.add_argument("--version", action="version", version=f"poolserve {_version()}")
    sub = parser.add_subparsers(dest="command")
    s = sub.add_parser("serve", help="run the server (HTTP, and gRPC on server.grpc_port)")
    s.add_argument("--config", help="a TOML config (default: the embedded configs/default.toml)")
    s.add_argument("--host", help="address to listen on (overrides server.host)")
    s.add_argument("--port", type=_port_arg, help="port to listen on (overrides server.port)")
    s.add_argument("--grpc-port", type=_port_arg, help="gRPC port, 0 for none (overrides server.grpc_port)")
    s.add_argument(
        "--workers",
        type=_workers_arg,
        help="worker processes on the port: a number or 'auto' (one per core); overrides server.workers",
    )
    s.add_argument(
        "--ray", action="store_true", help="serve as Ray Serve replicas (pip install 'poolserve[ray]')"
    )
    s.add_argument("--ray-address", help="with --ray: an existing cluster (default: a local Ray on loopback)")
    s.add_argument(
        "--ray-replicas", type=int, help="with --ray: this many replicas (overrides [ray] num_replicas)"
    )
    s.add_argument("--log-level", default="info", choices=LOG_LEVELS)
    s.add_argument("--access-log", action="store_true", help="log every request (uvicorn's access log)")
    sub.add_parser("loadtest", help="run the load generator (loadtest.cli)", add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["loadtest"]:
        if importlib.util.find_spec("poolserve.loadtest.cli") is None:
            print("poolserve: the loadtest command is not available (no loadtest.cli)", file=sys.stderr)
            return 2
        result: int | None = importlib.import_module("poolserve.loadtest.cli").main(args_list[1:])
        return int(result or 0)
    parser = _parser()
    args = parser.parse_args(args_list)
    if args.command == "serve" and args.ray and importlib.util.find_spec("ray") is None:
        # before the config loads: without the extra, importing server/ray_serve.py was a traceback
        parser.error("--ray needs Ray, which is not installed: pip install 'poolserve[ray]'")
    if args.command == "serve":
        return serve(args)
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
