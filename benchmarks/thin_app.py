"""The thinnest FastAPI endpoint for the example MLP: what ``bench_http`` measures poolserve against.

It decodes the same TF Serving JSON and does the same math in straight numpy, with the weights read from
the same GraphDef. Run: ``python -m benchmarks.thin_app PORT [MODEL.pb]`` (the example MLP by default).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import uvicorn
from fastapi import FastAPI, Request, Response

from poolserve.runtime.graph import load_graph_def
from poolserve.runtime.tensor import to_ndarray

MODEL = Path(__file__).resolve().parent.parent / "configs" / "models" / "mlp.pb"


def weights(model: Path = MODEL) -> dict[str, Any]:
    return {n.name: to_ndarray(n.attr["value"].tensor) for n in load_graph_def(model).node if n.op == "Const"}


def make_app(model: Path = MODEL) -> FastAPI:
    w = weights(model)
    w1, b1 = w["dense/MatMul/ReadVariableOp"], w["dense/BiasAdd/ReadVariableOp"]
    w2, b2 = w["dense_1/MatMul/ReadVariableOp"], w["dense_1/BiasAdd/ReadVariableOp"]
    app = FastAPI()

    @app.get("/v1/health/ready")
    async def ready() -> dict[str, bool]:
        return {"ready": True}

    @app.post("/v1/models/mlp:predict")
    async def predict(request: Request) -> Response:
        x = np.asarray(json.loads(await request.body())["instances"], dtype=np.float32)
        h = np.maximum(x @ w1 + b1, 0)
        z = h @ w2 + b2
        e = np.exp(z - z.max(axis=-1, keepdims=True))
        p = e / e.sum(axis=-1, keepdims=True)
        return Response(json.dumps({"predictions": p.tolist()}), media_type="application/json")

    return app


if __name__ == "__main__":
    model = Path(sys.argv[2]) if len(sys.argv) > 2 else MODEL
    uvicorn.run(make_app(model), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
