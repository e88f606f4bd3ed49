"""Helpers shared by the tests: run one op through a real graph, compare arrays."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from evaluate import evaluate

from poolserve.proto import config_pb2
from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.graph import Graph
from poolserve.runtime.session import Session

# a run that reports its step stats and the graph it ran (what the optimizer made of it)
TRACED = config_pb2.RunOptions(trace_level=config_pb2.RunOptions.FULL_TRACE, output_partition_graphs=True)


def run_traced(
    graph: Any,
    fetches: list[str],
    feeds: dict[str, Any],
    cfg: config_pb2.ConfigProto | None = None,
    metadata: config_pb2.RunMetadata | None = None,
) -> tuple[list[Any], Counter[str], dict[str, Any]]:
    """One traced run of ``graph`` (a GraphDef, Graph or GraphBuilder) in a fresh Session: the fetched
    values, the ops of the graph that ran (what the optimizer made of it) counted, and its nodes by name.
    ``metadata`` receives the run's RunMetadata."""
    md = config_pb2.RunMetadata() if metadata is None else metadata
    with Session(graph.graph_def if isinstance(graph, GraphBuilder) else graph, cfg) as s:
        got = s.run(fetches, feeds, options=TRACED, run_metadata=md)
    nodes = {n.name: n for n in md.partition_graphs[0].node}
    return got, Counter(n.op for n in nodes.values()), nodes


def rewrite_config(**rewrite: Any) -> config_pb2.ConfigProto:
    """A ConfigProto with these ``graph_options.rewrite_options`` fields set."""
    cfg = config_pb2.ConfigProto()
    for key, value in rewrite.items():
        setattr(cfg.graph_options.rewrite_options, key, value)
    return cfg


def run_op(
    op: str,
    inputs: Sequence[Any],
    attrs: Mapping[str, Any] | None = None,
    num_outputs: int = 1,
    feed: bool = False,
) -> Any:
    """Builds a graph with one ``op`` node over the given inputs and evaluates it.

    Inputs become Const nodes (read-only arrays, so a kernel that writes into its inputs fails), or
    Placeholders fed at run time when ``feed`` is set. Returns one array, or a list when
    ``num_outputs != 1``.
    """
    b = GraphBuilder()
    names, feeds = [], {}
    for i, value in enumerate(inputs):
        arr = np.asarray(value) if not isinstance(value, np.ndarray) else value
        if feed:
            t = b.placeholder(f"in{i}", arr.dtype, arr.shape)
            feeds[t] = arr
        else:
            t = b.constant(arr, dtype=arr.dtype, name=f"in{i}")
        names.append(t)
    attrs = dict(attrs or {})
    if inputs and "T" not in attrs:  # as TensorFlow's graphs always carry it
        attrs["T"] = np.asarray(inputs[0]).dtype
    out = b.op(op, names, attrs, name="op", num_outputs=num_outputs)
    fetches = [out] if num_outputs == 1 else list(out)
    results = evaluate(Graph(b.graph_def), fetches, feeds)
    return results[0] if num_outputs == 1 else results


def assert_close(actual: Any, expected: Any, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Same dtype, same shape, values within tolerance."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    if actual.dtype.kind in "fc":
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)
    else:
        np.testing.assert_array_equal(actual, expected)


def v1_while(
    b: GraphBuilder,
    n: str,
    loop_vars: Sequence[tuple[str, Any]],
    invariants: Sequence[tuple[str, Any]],
    body: Any,
    frame: str = "loop",
    parallel_iterations: int = 10,
) -> list[str]:
    """A ``tf.compat.v1.while_loop`` as TensorFlow lowers it (Enter, Merge, LoopCond, Switch, Identity,
    NextIteration, Exit) over ``i < n`` (int32 tensors; ``i`` starts at 0). ``loop_vars`` and
    ``invariants`` are (tensor, dtype); ``body(i, loop_vars, invariants)`` returns the next loop_vars.
    Returns the Exit of each loop var."""
    attrs = {"frame_name": frame, "parallel_iterations": parallel_iterations}
    name = b.unique_name(frame)
    tensors = [(b.constant(np.int32(0)), np.int32), (n, np.int32), *loop_vars]
    merged, nexts = [], []
    for k, (t, dtype) in enumerate([tensors[0], *loop_vars]):
        enter = b.op("Enter", [t], {"T": dtype, **attrs}, name=f"{name}/enter{k}")
        nexts.append(f"{name}/next{k}")
        merged.append(b.op("Merge", [enter, nexts[-1]], {"T": dtype, "N": 2}, num_outputs=2)[0])
    consts = [
        b.op("Enter", [t], {"T": dtype, **attrs, "is_constant": True}, name=f"{name}/const")
        for t, dtype in [tensors[1], *invariants]
    ]
    cond = b.op("LoopCond", [b.op("Less", [merged[0], consts[0]], {"T": np.int32})])
    exits, inside = [], []
    for m, (_, dtype) in zip(merged, [tensors[0], *loop_vars], strict=True):
        out_false, out_true = b.op("Switch", [m, cond], {"T": dtype}, num_outputs=2)
        exits.append(b.op("Exit", [out_false], {"T": dtype}))
        inside.append(b.op("Identity", [out_true], {"T": dtype}))
    i = inside[0]
    results = [b.op("AddV2", [i, b.constant(np.int32(1))], {"T": np.int32})]
    results += list(body(i, inside[1:], consts[1:]))
    for k, (r, (_, dtype)) in enumerate(zip(results, [tensors[0], *loop_vars], strict=True)):
        b.op("NextIteration", [r], {"T": dtype}, name=nexts[k])
    return exits[1:]


# --- a test-only kernel: sleeps (releasing the GIL, like a BLAS call), counts its runs ------------------

import threading  # noqa: E402
import time  # noqa: E402

from poolserve.runtime.kernels.registry import KERNELS, kernel  # noqa: E402

RUNS: dict[str, int] = {}
_runs_lock = threading.Lock()

if "TestSleep" not in KERNELS:

    @kernel("TestSleep", expensive=True, blocking=True)
    def _test_sleep(node: Any) -> Any:
        seconds = node.attr_float("seconds", 0.0)

        def compute(ctx: Any, inputs: list[Any]) -> tuple[Any, ...]:
            with _runs_lock:
                RUNS[node.name] = RUNS.get(node.name, 0) + 1
            if seconds:
                time.sleep(seconds)
            return (inputs[0] if inputs else np.zeros((), np.float32),)

        return compute


def sleep_op(b: GraphBuilder, x: str | None, seconds: float, name: str) -> str:
    """A TestSleep node: passes ``x`` on after sleeping; RUNS[name] counts its executions."""
    RUNS.pop(name, None)
    return str(b.op("TestSleep", [x] if x else [], {"seconds": float(seconds)}, name=name))


# --- a test-only kernel that blocks until the test opens its gate: a kernel "still running", on demand -----

GATE_TIMEOUT_S = 5.0  # a gate left shut (a failing test) frees its thread after this long


class Gate:
    """``started`` is set when the TestGate node begins; the node returns once ``open()`` is called."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self._open = threading.Event()

    def open(self) -> None:
        self._open.set()

    def wait_open(self) -> bool:
        return self._open.wait(GATE_TIMEOUT_S)


GATES: dict[str, Gate] = {}

if "TestGate" not in KERNELS:

    @kernel("TestGate", expensive=True, blocking=True)
    def _test_gate(node: Any) -> Any:
        def compute(ctx: Any, inputs: list[Any]) -> tuple[Any, ...]:
            gate = GATES[node.name]
            gate.started.set()
            if not gate.wait_open():
                raise TimeoutError(f"the test never opened gate {node.name}")
            return (inputs[0] if inputs else np.zeros((), np.float32),)

        return compute


def gate_op(b: GraphBuilder, x: str | None, name: str) -> tuple[str, Gate]:
    """A TestGate node: passes ``x`` on once the returned gate is opened."""
    gate = GATES[name] = Gate()
    return str(b.op("TestGate", [x] if x else [], name=name)), gate


# --- a real server process -------------------------------------------------------------------------------

import os  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import httpx  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def run_module(module: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python -m module args`` from the repository's root, as users run the benchmarks, its output
    captured (not checked: the caller asserts on it)."""
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """``poolserve serve --config CONFIG`` as a real process on 127.0.0.1 and free ports (HTTP, gRPC), started and
    waited for (30 s at most) on construction; ``stop()`` ends it (SIGTERM, then SIGKILL after 15 s).
    POOLSERVE_* variables of the test environment are not passed on; its state (the trace store's file)
    goes beside ``log``."""

    def __init__(self, config: Path, log: Path, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.address = f"127.0.0.1:{self.port}"
        self.grpc_port = free_port()  # never the default port: tests run beside other servers
        self.grpc_address = f"127.0.0.1:{self.grpc_port}"
        self.log = log
        env = {k: v for k, v in os.environ.items() if not k.startswith("POOLSERVE_")}
        env["XDG_STATE_HOME"] = str(log.parent / "state")
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "poolserve.server.cli", "serve", "--config", str(config)]
                + [
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--grpc-port",
                    str(self.grpc_port),
                    *args,
                ],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"the server exited with {self.proc.returncode}: {self.output()}")
            try:
                if httpx.get(f"{self.url}/v1/health/ready", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"the server did not become ready in 30 s: {self.output()}")
            time.sleep(0.05)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


# --- KServe v2 bodies: a JSON header, then the binary tensor data ----------------------------------------

import json  # noqa: E402
import struct  # noqa: E402


def body_of(request: dict, *chunks: bytes) -> tuple[bytes, str | None]:
    """A KServe v2 body: ``request`` as JSON then ``chunks``, and the Inference-Header-Content-Length
    to send with it (None when there are no chunks)."""
    header = json.dumps(request).encode()
    if not chunks:
        return header, None
    return header + b"".join(chunks), str(len(header))


def bytes_elements(*items: bytes) -> bytes:
    """BYTES elements in binary form: each one a 4-byte little-endian length, then its bytes."""
    return b"".join(struct.pack("<I", len(x)) + x for x in items)


def split_response(body: bytes, header_length: int | None) -> tuple[dict, bytes]:
    """A KServe v2 response body as (JSON header, binary data after it)."""
    if header_length is None:
        return json.loads(body), b""
    return json.loads(body[:header_length]), body[header_length:]


# --- a small model: out = identity(y), y = x * 2 + 1, x a float32 [None, 3] placeholder ------------------------


def add_graph() -> Any:
    """A GraphDef: Placeholder ``x`` (float32, [None, 3]), ``mul`` = x * 2, ``y`` = mul + 1, ``out`` = y."""
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [None, 3])
    y = b.add(b.mul(x, b.constant(2.0)), b.constant(1.0), name="y")
    b.identity(y, name="out")
    return b.graph_def


def load_fixture_io(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A TF fixture's ``.npz``: the inputs fed (``in:<tensor>``) and what TensorFlow computed (``out:<tensor>``)."""
    with np.load(path) as data:
        feeds = {k.removeprefix("in:"): data[k] for k in data.files if k.startswith("in:")}
        expected = {k.removeprefix("out:"): data[k] for k in data.files if k.startswith("out:")}
    return feeds, expected


def serve_in_thread(server: Any, seconds: float = 30.0) -> threading.Thread:
    """Runs a ``uvicorn.Server`` (made to listen on 127.0.0.1) in a daemon thread; returns once it listens."""
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + seconds
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the loopback server did not start"
        time.sleep(0.01)
    return thread


# --- convolution references (NHWC, float64 sums over taps) ----------------------------------------------------


def nchw(x):
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


def tf_pads(size, k, stride, dilation, padding, explicit=(0, 0)):
    """(out, before, after) as TensorFlow's SAME/VALID/EXPLICIT padding defines them."""
    eff = (k - 1) * dilation + 1
    if padding == "SAME":
        out = -(-size // stride)
        need = max(0, (out - 1) * stride + eff - size)
        return out, need // 2, need - need // 2
    before, after = explicit if padding == "EXPLICIT" else (0, 0)
    return (size + before + after - eff) // stride + 1, before, after


def ref_conv(x, w, strides=(1, 1), dilations=(1, 1), padding="VALID", explicit=((0, 0), (0, 0))):
    """NHWC conv (grouped when the filter has fewer input channels) as a sum over taps of einsums."""
    (sh, sw), (dh, dw) = strides, dilations
    kh, kw, cf, o = w.shape
    oh, pt, pb = tf_pads(x.shape[1], kh, sh, dh, padding, explicit[0])
    ow, pl, pr = tf_pads(x.shape[2], kw, sw, dw, padding, explicit[1])
    xp = np.pad(x.astype(np.float64), ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    groups, og = x.shape[3] // cf, o // (x.shape[3] // cf)
    out = np.zeros((x.shape[0], oh, ow, o))
    for i in range(kh):
        for j in range(kw):
            view = xp[:, i * dh :: sh, j * dw :: sw][:, :oh, :ow]
            for g in range(groups):
                out[..., g * og : (g + 1) * og] += np.einsum(
                    "nhwc,co->nhwo", view[..., g * cf : (g + 1) * cf], w[i, j, :, g * og : (g + 1) * og]
                )
    return out.astype(x.dtype)


def ref_depthwise(x, w, strides=(1, 1), dilations=(1, 1), padding="VALID", explicit=((0, 0), (0, 0))):
    n, _, _, c = x.shape
    m = w.shape[3]
    # Depthwise conv is a grouped conv with C groups and the filter laid out as [KH, KW, 1, C*M].
    return ref_conv(x, w.reshape(*w.shape[:2], 1, c * m), strides, dilations, padding, explicit)


def conv_attrs(strides, dilations, padding, explicit, fmt="NHWC"):
    attrs = {"padding": padding, "data_format": fmt}
    if fmt == "NHWC":
        attrs["strides"], attrs["dilations"] = [1, *strides, 1], [1, *dilations, 1]
    else:
        attrs["strides"], attrs["dilations"] = [1, 1, *strides], [1, 1, *dilations]
    if explicit is not None:
        (pt, pb), (pl, pr) = explicit
        attrs["explicit_paddings"] = (
            [0, 0, pt, pb, pl, pr, 0, 0] if fmt == "NHWC" else [0, 0, 0, 0, pt, pb, pl, pr]
        )
    return attrs


def asgi_scope(
    path: str, headers: Sequence[tuple[bytes, bytes]] = (), method: str = "POST"
) -> dict[str, Any]:
    """An HTTP/1.1 ASGI scope for ``path`` on loopback, for tests that call an app directly."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": list(headers),
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }


# --- TensorFlow's answers kept as JSON (tools/make_text_fixtures.py) ----------------------------------------

import pytest  # noqa: E402
from google.protobuf import text_format  # noqa: E402

from poolserve.proto import graph_pb2, node_def_pb2  # noqa: E402
from poolserve.runtime import errors as op_errors  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"


def from_json(t: dict[str, Any]) -> Any:
    """A tensor the fixture tools wrote as {"dtype", "shape", "data"}: strings are bytes decoded with
    surrogateescape, so a malformed byte comes back as it was."""
    if t["dtype"] == "string":
        flat = np.empty(len(t["data"]), dtype=object)
        flat[:] = [s.encode("utf-8", "surrogateescape") for s in t["data"]]
    else:
        flat = np.array(t["data"], dtype=t["dtype"])
    return flat.reshape(t["shape"])


def assert_same(actual: Any, expected: Any, what: str = "") -> None:
    """Same dtype, shape and values, exactly (strings as bytes)."""
    actual = np.asarray(actual)
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert actual.tolist() == expected.tolist(), f"{what}: {actual.tolist()} != {expected.tolist()}"


def node_cases(*ops: str) -> list[Any]:
    """The cases of ``kernels/text_ops.json`` whose node is one of ``ops``, as pytest params named by case."""
    cases = json.loads((FIXTURES / "kernels" / "text_ops.json").read_text())["cases"]
    chosen = [c for c in cases if text_format.Parse(c["node"], node_def_pb2.NodeDef()).op in ops]
    return [pytest.param(c, id=c["name"]) for c in chosen]


def check_node_case(case: dict[str, Any]) -> None:
    """Runs the case's NodeDef (as TensorFlow wrote it) on placeholders fed its inputs, and compares with
    what TensorFlow answered: the outputs exactly, or the same error class with TensorFlow's message in
    poolserve's. A graph poolserve refuses when it is loaded counts as the same error."""
    node = text_format.Parse(case["node"], node_def_pb2.NodeDef())
    graph_def = graph_pb2.GraphDef()
    inputs = [from_json(t) for t in case["inputs"]]
    b = GraphBuilder()
    for i, arr in enumerate(inputs):
        b.placeholder(f"in{i}", arr.dtype, None)
    graph_def.CopyFrom(b.graph_def)
    graph_def.node.add().CopyFrom(node)
    feeds = {f"in{i}:0": arr for i, arr in enumerate(inputs)}
    if "error" in case:
        error_class = getattr(op_errors, case["error"]["type"])
        with pytest.raises(error_class) as caught, Session(graph_def) as s:
            s.run("op:0", feeds)
        assert case["error"]["message"] in str(caught.value)
        return
    expected = [from_json(t) for t in case["outputs"]]
    with Session(graph_def) as s:
        got = s.run([f"op:{i}" for i in range(len(expected))], feeds)
    for i, (g, want) in enumerate(zip(got, expected, strict=True)):
        assert_same(g, want, f"{case['name']} output {i}")


# --- single-op cases TensorFlow computed (tools/make_op_case_fixtures.py) -----------------------------------

OP_CASES = Path(__file__).parent / "fixtures" / "kernels" / "cases"


class OpCases:
    """One group's fixture: a GraphDef with one node per case, the values fed and TensorFlow's outputs, or
    the error class and message it refused the inputs with."""

    def __init__(self, group: str) -> None:
        from poolserve.runtime.graph import load_graph_def

        self.graph_def = load_graph_def(OP_CASES / f"{group}.pb")
        self.meta: dict[str, dict[str, Any]] = json.loads((OP_CASES / f"{group}.json").read_text())
        with np.load(OP_CASES / f"{group}.npz") as data:
            self.arrays = {k: _unstore(data[k]) for k in data.files if "#" not in k}
            # strings ending in NUL: their bytes end to end and each one's length
            for k in data.files:
                if k.endswith("#bytes"):
                    base = k.removesuffix("#bytes")
                    self.arrays[base] = _split_bytes(data[k].tobytes(), data[f"{base}#lengths"])
        self.graph = Graph(self.graph_def)

    def names(self, op: str | None = None) -> list[str]:
        return sorted(c for c, m in self.meta.items() if op is None or m["op"] == op)

    def run(self, case: str) -> tuple[list[Any], list[Any] | None, tuple[str, str] | None]:
        """(poolserve's outputs or the error it raised, TensorFlow's outputs, TensorFlow's error)."""
        meta = self.meta[case]
        feeds = {k: self.arrays[f"{case}/in/{k}"] for k in meta["feeds"]}
        want = None if "error" in meta else [self.arrays[f"{case}/out/{k}"] for k in meta["fetches"]]
        error = tuple(meta["error"]) if "error" in meta else None
        return evaluate(self.graph, meta["fetches"], feeds), want, error  # type: ignore[return-value]

    def check(self, case: str, atol: float = 1e-6) -> None:
        """Runs ``case`` and asserts poolserve matches TensorFlow: outputs (same dtype and shape, integers
        and strings exactly, floats within ``atol``), or the same error class with TensorFlow's message."""
        from poolserve.runtime.errors import OpError

        meta = self.meta[case]
        if "error" in meta:
            cls, message = meta["error"]
            try:
                self.run(case)
            except OpError as e:
                assert type(e).__name__ == cls, f"{case}: {type(e).__name__} != {cls}: {e}"
                assert message in str(e), f"{case}: {str(e)!r} does not hold {message!r}"
                return
            raise AssertionError(
                f"{case}: TensorFlow refused the inputs ({cls}: {message}), poolserve did not"
            )
        got, want, _ = self.run(case)
        assert want is not None
        for k, g, w in zip(meta["fetches"], got, want, strict=True):
            g = np.asarray(g)
            assert (g.dtype, g.shape) == (w.dtype, w.shape), (
                f"{case} {k}: {g.dtype}{g.shape} != {w.dtype}{w.shape}"
            )
            if w.dtype.kind in "fc":
                np.testing.assert_allclose(g, w, rtol=0, atol=atol, err_msg=f"{case} {k}")
            else:
                assert g.tolist() == w.tolist(), f"{case} {k}: {g.tolist()} != {w.tolist()}"


def _split_bytes(blob: bytes, lengths: np.ndarray) -> np.ndarray:
    ends = np.cumsum(lengths.ravel()).tolist()
    out = np.empty(len(ends), dtype=object)
    out[:] = [blob[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]
    return out.reshape(lengths.shape)


def _unstore(arr: np.ndarray) -> np.ndarray:
    """Strings come back as object arrays of bytes, as poolserve holds them."""
    if arr.dtype.kind == "S":
        out = np.empty(arr.shape, dtype=object)
        out.reshape(-1)[:] = [bytes(x) for x in arr.reshape(-1).tolist()]
        return out
    return arr
