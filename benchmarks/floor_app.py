"""The least a Python server on the serving stack can do: what poolserve's serving-path figures stand on.

    python -m benchmarks.floor_app PORT MODE [MODEL.pb]

A bare ASGI app (no framework, no middleware, no admission, no metrics) on uvicorn with uvloop and
httptools, the stack ``poolserve serve`` runs on. Every request reads its whole body, then by ``MODE``:

- ``const``: answers a fixed 40-float JSON answer. The transport alone: the client's write, uvicorn's
  parse, the ASGI task and the answer's send.
- ``run``: a native ``:run`` body (``{"feeds": {"input": [[...]]}}``) decoded by ``orjson`` and
  ``np.asarray``, ``Session.run`` of ``probabilities:0`` inline on the event loop, the answer written by
  orjson. What a hand-written app does.
- ``codec``: as ``run``, with poolserve's own decoder (``codec.loads_tensors``: simdjson into the array).
- ``decode``: as ``codec`` without the step: the body decoded to its array, the fixed answer sent. With
  ``codec``, what a step costs the server, and what a request costs it besides (the part batching cannot
  share out).
- ``echo``: a KServe binary-tensor request's tensor bytes sent back behind a KServe binary answer header
  (no model): the transport of a 1 MiB binary request and answer.

``GET`` answers the fixed answer in every mode (``benchmarks.servers.wait_ready`` polls it).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import orjson

CONST = orjson.dumps(
    {"outputs": {"probabilities": {"dtype": "float32", "shape": [4, 10], "data": [0.1] * 40}}}
)
ECHO_HEAD = orjson.dumps(
    {
        "model_name": "echo",
        "outputs": [
            {
                "name": "output",
                "datatype": "FP32",
                "shape": [1024, 256],
                "parameters": {"binary_data_size": 1 << 20},
            }
        ],
    }
)
MODES = ("const", "run", "codec", "decode", "echo")


def make_app(mode: str, model: str | None = None) -> Any:
    if mode not in MODES:
        raise SystemExit(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    session = None
    loads: Any = orjson.loads
    if mode in ("run", "codec", "decode"):
        from poolserve.runtime.graph import Graph, load_graph_def
        from poolserve.runtime.session import Session

        if model is None:
            raise SystemExit(f"mode {mode} needs a model (a GraphDef with input:0 and probabilities:0)")
        session = Session(Graph(load_graph_def(model)))
        if mode in ("codec", "decode"):
            from poolserve.server import codec

            loads = codec.loads_tensors

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        chunks = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        headers = [(b"content-type", b"application/json")]
        if scope["method"] != "POST" or mode == "const":
            out = CONST
        elif mode == "decode":
            np.asarray(loads(body)["feeds"]["input"], np.float32)
            out = CONST
        elif mode == "echo":
            start = int(dict(scope["headers"]).get(b"inference-header-content-length", b"0"))
            out = ECHO_HEAD + body[start:]
            headers = [
                (b"content-type", b"application/octet-stream"),
                (b"inference-header-content-length", str(len(ECHO_HEAD)).encode()),
            ]
        else:
            assert session is not None
            x = np.asarray(loads(body)["feeds"]["input"], np.float32)
            y = session.run("probabilities:0", {"input:0": x})
            answer = {"probabilities": {"dtype": "float32", "shape": list(y.shape), "data": y.ravel()}}
            out = orjson.dumps({"outputs": answer}, option=orjson.OPT_SERIALIZE_NUMPY)
        headers.append((b"content-length", str(len(out)).encode()))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": out})

    return app


def main(argv: list[str]) -> int:
    import uvicorn

    port, mode = int(argv[0]), argv[1]
    app = make_app(mode, argv[2] if len(argv) > 2 else None)
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
