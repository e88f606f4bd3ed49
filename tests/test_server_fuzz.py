"""Malformed input never gets a 5xx (or a non-JSON error): seeded random bodies against every protocol."""

import asyncio
import json
import random

import httpx

from poolserve.server.app import create_app
from poolserve.server.config import load_config

LEAVES = [None, True, 1, -1, 0, 1.5, float("nan"), "x", "", [], {}, [[1]], [1.0] * 64, {"b64": "!!"}, 2**70,
          "FP32", "float32", [None], [[1, 2], [3]]]  # fmt: skip
KEYS = ["inputs", "instances", "feeds", "fetches", "targets", "run_options", "trace", "outputs", "parameters",
        "signature_name", "name", "shape", "datatype", "data", "dtype", "id", "timeout_in_ms", "trace_level",
        "experimental", "use_run_handler_pool", "input", "probabilities", "binary_data_size",
        "binary_data_output", "timeout", "priority", "x:0", "input:0"]  # fmt: skip
CRAFTED = [
    b"",
    b"{",
    b"\xff\xfe",
    b"null",
    b"1e999",
    b'{"inputs":[{"name":"input","shape":[1,64],"datatype":"FP32","data":[1]}]}',
    b'{"inputs":[{"name":"input","shape":[1e9,64],"datatype":"FP32","data":[1]}]}',
    b'{"instances": [[1e400]]}',
    b'{"feeds": {"input": {"dtype": "float32", "shape": [99999999999], "data": []}}}',
    b'{"feeds": {"input": {"dtype": "float32", "shape": [1, 64], "data": "abc"}}}',
    b'{"feeds": {"input": [[1]]}, "run_options": {"timeout_in_ms": "abc"}}',
    b'{"feeds": {"input": [[1]]}, "run_options": {"inter_op_thread_pool": 99}}',
    b'{"feeds": {"input": [[1]]}, "run_options": {"trace_level": 99}}',
    b'{"feeds": {"input": [[1]]}, "run_options": {"debug_options": {"debug_tensor_watch_opts": '
    b'[{"node_name": "x", "debug_urls": ["http://x"]}]}}}',
]
URLS = ["/v1/models/mlp:run", "/v1/models/mlp:predict", "/v2/models/mlp/infer", "/v1/models/mlp/versions/1:predict",
        "/v2/models/cnn/infer", "/v1/models/branches:run"]  # fmt: skip


def random_body(rng: random.Random, depth: int = 0) -> object:
    r = rng.random()
    if depth > 3 or r < 0.4:
        return rng.choice(LEAVES)
    if r < 0.7:
        return {rng.choice(KEYS): random_body(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    return [random_body(rng, depth + 1) for _ in range(rng.randint(0, 4))]


def test_malformed_requests_get_a_clear_4xx() -> None:
    rng = random.Random(20261122)
    bodies = [json.dumps(random_body(rng)).encode() for _ in range(120)] + CRAFTED

    async def main() -> list[tuple[str, int, str]]:
        app = create_app(load_config(None))
        bad = []
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c,
        ):
            for body in bodies:
                for url in URLS:
                    for headers in (
                        {"content-type": "application/json"},
                        {"content-type": "application/x-protobuf"},
                        {"Inference-Header-Content-Length": str(rng.randint(0, 50))},
                    ):
                        r = await c.post(url, content=body, headers=headers)
                        if r.status_code >= 500 or (
                            r.status_code >= 400 and not (r.json().get("error") if r.content else None)
                        ):
                            bad.append((url, r.status_code, r.text[:200]))
        return bad

    bad = asyncio.run(main())
    assert not bad, bad[:5]
