"""The floor of a gRPC round trip, for bench_grpc: a bare grpc.aio server whose one method answers each call
with the call's own bytes (no protobuf, no model, no poolserve code on the way).

    python -m benchmarks.grpc_echo PORT

Its process tunes malloc as a poolserve server's does (``runtime.memory``): without that, grpcio's own copies
of a 1 MiB message land in fresh pages every call (measured: ~600 page faults a call for a 1 MiB echo, and
about twice the CPU), and the floor would be one the server does not stand on.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import grpc

from poolserve.runtime.memory import keep_freed_memory

SERVICE, METHOD = "echo.Echo", "Echo"
PATH = f"/{SERVICE}/{METHOD}"


async def _echo(request: bytes, context: Any) -> bytes:
    return request


async def serve(port: int) -> None:
    keep_freed_memory()
    server = grpc.aio.server(
        options=[("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
    )
    # no (de)serializers: the handler gets the body's bytes and its answer is written as it is
    handler: grpc.RpcMethodHandler[bytes, bytes] = grpc.unary_unary_rpc_method_handler(_echo)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {METHOD: handler}),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    asyncio.run(serve(int(args[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
