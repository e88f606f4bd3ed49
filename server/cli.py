"""``poolserve``: the command line.

``poolserve serve [--config PATH] [--host H] [--port P] [--log-level L] [--access-log]`` runs the server
with uvicorn (the embedded configs/default.toml without --config); ``--access-log`` logs every request. On
SIGTERM the server stops reporting ready and accepting connections, lets requests in flight finish (up to
``server.drain_seconds``) and exits 0. ``poolserve loadtest ...`` runs the load generator when it is
installed.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.util
import logging
import signal
import sys
from collections.abc import Sequence
from types import FrameType

import uvicorn

from poolserve.server.config import ConfigError, load_config

log = logging.getLogger("poolserve")

LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


class _Server(uvicorn.Server):
    """uvicorn's server, telling the service to stop reporting ready as soon as a signal arrives."""

    def __init__(self, config: uvicorn.Config, on_exit: list[object]) -> None:
        super().__init__(config)
        self._services = on_exit

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        for service in self._services:
            service.draining = True  # type: ignore[attr-defined]
        super().handle_exit(sig, frame)


def _exit_zero(signum: int, frame: FrameType | None) -> None:
    # uvicorn re-raises the signal it shut down for once the old handler is back: a drained SIGTERM is a
    # clean exit
    raise SystemExit(0)


def serve(args: argparse.Namespace) -> int:
    from poolserve.server.app import create_app  # imports the runtime and the kernels: only when serving
    from poolserve.server.protocol import protocol_class

    logging.basicConfig(level=args.log_level.upper() if args.log_level != "trace" else "DEBUG")
    try:
        config = load_config(args.config)
    except ConfigError as e:
        print(f"poolserve: {e}", file=sys.stderr)
        return 2
    if args.host is not None:
        config.server.host = args.host
    if args.port is not None:
        config.server.port = args.port
    try:
        app = create_app(config)
    except Exception as e:  # a model that does not load: say which, without a traceback
        print(f"poolserve: cannot start: {e}", file=sys.stderr)
        return 1
    service = app.state.service
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
        # httptools' protocol plus the arrival stamp, header timeout and size, connection limit
        http=protocol_class(config.server),
        # the loop stays "auto": uvloop (installed with uvicorn[standard]) when present
    )
    server = _Server(uv_config, [service])
    signal.signal(signal.SIGTERM, _exit_zero)
    # Everything loaded so far (modules, graphs, constants) lives as long as the process: out of the cyclic
    # collector's sight, a full collection under load walks only what requests allocate (measured on the
    # example MLP: 72 ms pauses without this, the p99 latency).
    gc.collect()
    gc.freeze()
    try:
        server.run()
    except KeyboardInterrupt:
        return 130
    return 0 if server.started or not server.should_exit else 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="poolserve", description="Serve TensorFlow GraphDefs on numpy kernels."
    )
    sub = parser.add_subparsers(dest="command")
    s = sub.add_parser("serve", help="run the HTTP server")
    s.add_argument("--config", help="a TOML config (default: the embedded configs/default.toml)")
    s.add_argument("--host", help="address to listen on (overrides server.host)")
    s.add_argument("--port", type=int, help="port to listen on (overrides server.port)")
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
    if args.command == "serve":
        return serve(args)
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
