"""Differential op fuzzing against TensorFlow (dev only; nothing it writes is committed).

Run with the TensorFlow environment; the poolserve side runs in a subprocess of the project's venv::

    /opt/tfenv/bin/python tools/op_fuzz.py [--families unary,binary] [--seed 0] [--count 40]
        [--python .venv/bin/python] [--out /tmp/op_fuzz] [--unknown-shapes]

Each case is one op of ``tf.raw_ops`` with random inputs (shapes, dtypes, edge values: zeros, negatives,
NaN, infinities, extremes of the dtype) and attrs, built in a v1 graph on placeholders (so Grappler folds
nothing), run by TensorFlow, which gives its outputs or its error's canonical code. ``--check DIR`` (this
file, run by the venv's Python, importing only poolserve) loads each GraphDef into a ``Session``, feeds the
same arrays and compares:

- TensorFlow answered: poolserve must answer the same dtypes and shapes, integers and booleans equal,
  floats within ``RTOL``/``ATOL`` (NaN where TensorFlow has NaN, infinities of the same sign);
- TensorFlow refused (InvalidArgument, OutOfRange, ...): poolserve must refuse too, with an ``OpError``;
  a Python exception that is not an ``OpError`` (a traceback) is always a finding.

Families are the ``FAMILIES`` below and the ``families()`` of every ``tools/op_fuzz_*.py`` module; each
family is a function ``(rng, count) -> list[Case]``. Findings are printed and written to
``<out>/findings.json``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import pickle
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

RTOL = 1e-5
ATOL = 1e-6
HERE = Path(__file__).resolve().parent


@dataclass
class Case:
    """``op`` called as ``tf.raw_ops.<op>(**inputs, **attrs)``: each array input becomes a placeholder (a
    list of arrays, a list of placeholders), each attr is passed as it is."""

    op: str
    inputs: dict[str, Any]
    attrs: dict[str, Any] = field(default_factory=dict)
    note: str = ""


# ---- value generators --------------------------------------------------------------------------------

FLOATS = ("float16", "float32", "float64")
SIGNED = ("int8", "int16", "int32", "int64")
UNSIGNED = ("uint8", "uint16")
INTS = SIGNED + UNSIGNED


def shape(rng: np.random.Generator, rank: int | None = None, max_dim: int = 4) -> tuple[int, ...]:
    rank = int(rng.integers(0, 4)) if rank is None else rank
    return tuple(int(d) for d in rng.integers(0, max_dim + 1, size=rank))


def values(rng: np.random.Generator, dims: tuple[int, ...], dtype: str, edge: bool = True) -> np.ndarray:
    """Random values of a dtype, with edge values mixed in when ``edge``."""
    dt = np.dtype(dtype)
    n = int(np.prod(dims)) if dims else 1
    if dt.kind == "f":
        out = rng.standard_normal(n) * 3
        if edge and n:
            special = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 0.5, -0.5, 1.5, -2.5, 1e-30, 65504.0])
            pick = rng.random(n) < 0.25
            out[pick] = rng.choice(special, size=int(pick.sum()))
    elif dt.kind in "iu":
        info = np.iinfo(dt)
        out = rng.integers(max(info.min, -20), min(info.max, 20) + 1, size=n)
        if edge and n:
            special = np.array([0, 1, -1 if dt.kind == "i" else 0, info.min, info.max], dtype=np.int64)
            pick = rng.random(n) < 0.15
            out[pick] = rng.choice(special, size=int(pick.sum()))
    elif dt.kind == "b":
        out = rng.random(n) < 0.5
    elif dt.kind == "c":
        out = rng.standard_normal(n) + 1j * rng.standard_normal(n)
    else:
        raise ValueError(dtype)
    with np.errstate(all="ignore"):
        return out.astype(dt).reshape(dims)


def broadcastable(rng: np.random.Generator, dims: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts against ``dims`` (some axes 1, some dropped from the front)."""
    drop = int(rng.integers(0, len(dims) + 1))
    out = [d if rng.random() < 0.6 else 1 for d in dims[drop:]]
    return tuple(out)


# ---- families -------------------------------------------------------------------------------------------

UNARY_FLOAT = (  # noqa: SIM905
    "Abs Neg Sign Square Sqrt Rsqrt Exp Expm1 Log Log1p Sin Cos Tan Tanh Sigmoid Erf Erfc Floor Ceil "
    "Rint Round Reciprocal Inv Relu Relu6 Elu Selu Softplus Softsign IsNan IsInf IsFinite"
).split()
UNARY_INT = "Abs Neg Sign Square Reciprocal Relu Relu6".split()  # noqa: SIM905
BINARY_FLOAT = (  # noqa: SIM905
    "Add AddV2 Sub Mul Div RealDiv DivNoNan Maximum Minimum Pow SquaredDifference FloorDiv FloorMod "
    "Atan2 Equal NotEqual Less LessEqual Greater GreaterEqual"
).split()
BINARY_INT = (  # noqa: SIM905
    "Add AddV2 Sub Mul Div FloorDiv FloorMod TruncateDiv TruncateMod Maximum Minimum Pow "
    "SquaredDifference Equal NotEqual Less LessEqual Greater GreaterEqual"
).split()


def unary(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for op in UNARY_FLOAT:
        arg = "features" if op in _FEATURES else "x"
        cases += [Case(op, {arg: values(rng, shape(rng), dtype)}) for dtype in FLOATS]
    for op in UNARY_INT:
        arg = "features" if op in _FEATURES else "x"
        for dtype in ("int8", "int32", "int64", "uint8"):
            if op in ("Neg", "Abs", "Sign", "Reciprocal") and dtype == "uint8":
                continue
            cases.append(Case(op, {arg: values(rng, shape(rng), dtype)}))
    return cases


_FEATURES = {"Relu", "Relu6", "Elu", "Selu", "Softplus", "Softsign"}


def binary(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for op in BINARY_FLOAT:
        for dtype in FLOATS:
            for _ in range(2):
                a = shape(rng)
                b = broadcastable(rng, a)
                if rng.random() < 0.5:
                    a, b = b, a
                names = ("y", "x") if op == "Atan2" else ("x", "y")
                cases.append(Case(op, {names[0]: values(rng, a, dtype), names[1]: values(rng, b, dtype)}))
    for op in BINARY_INT:
        for dtype in ("int8", "int16", "int32", "int64", "uint8"):
            a = shape(rng)
            b = broadcastable(rng, a)
            x, y = values(rng, a, dtype), values(rng, b, dtype)
            if op in ("Div", "FloorDiv", "FloorMod", "TruncateDiv", "TruncateMod") and rng.random() < 0.7:
                y = np.where(y == 0, np.ones_like(y), y)  # mostly no division by zero (an error in TF)
            if op == "Pow":
                y = np.abs(y) % 4 if dtype != "uint8" else y % 4
            cases.append(Case(op, {"x": x, "y": y}))
    return cases


def cast(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    kinds = (*FLOATS, "int8", "int32", "int64", "uint8", "bool")
    for src in kinds:
        for dst in kinds:
            v = values(rng, shape(rng, 1, 8), src)
            cases.append(Case("Cast", {"x": v}, {"DstT": dst}))
    return cases


def reductions(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for op in ("Sum", "Mean", "Max", "Min", "Prod", "ArgMax", "ArgMin", "EuclideanNorm", "All", "Any"):
        for _ in range(max(2, count // 8)):
            dims = shape(rng, int(rng.integers(1, 4)))
            if op in ("All", "Any"):
                dtype = "bool"
            else:
                dtype = str(rng.choice(["float32", "float64", "int32", "int64"]))
            x = values(rng, dims, dtype, edge=dtype != "float32" or rng.random() < 0.3)
            if op in ("ArgMax", "ArgMin"):
                axis = np.array(int(rng.integers(-len(dims), len(dims))), dtype=np.int32)
                cases.append(Case(op, {"input": x, "dimension": axis}, {"output_type": "int64"}))
                continue
            k = int(rng.integers(0, len(dims) + 1))
            axes = rng.choice(np.arange(-len(dims), len(dims)), size=k, replace=False) if k else []
            axis = np.array(axes, dtype=np.int32)
            if rng.random() < 0.2:
                axis = np.array(int(rng.integers(-len(dims), len(dims))), dtype=np.int64)
            keep = bool(rng.random() < 0.5)
            cases.append(Case(op, {"input": x, "axis": axis}, {"keep_dims": keep}))
    return cases


FAMILIES: dict[str, Callable[[np.random.Generator, int], list[Case]]] = {
    "unary": unary,
    "binary": binary,
    "cast": cast,
    "reductions": reductions,
}


def all_families() -> dict[str, Callable[[np.random.Generator, int], list[Case]]]:
    found = dict(FAMILIES)
    for path in sorted(HERE.glob("op_fuzz_*.py")):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
        found.update(module.families())
    return found


# ---- TensorFlow side ------------------------------------------------------------------------------------


def run_tf(case: Case, unknown_shapes: bool = False) -> dict[str, Any]:
    import tensorflow as tf

    graph = tf.Graph()
    feeds: dict[str, np.ndarray] = {}
    with graph.as_default():
        kwargs: dict[str, Any] = {}
        for name, value in case.inputs.items():
            if isinstance(value, list):
                holders = []
                for i, v in enumerate(value):
                    ph = tf.compat.v1.placeholder(
                        tf.as_dtype(v.dtype), None if unknown_shapes else v.shape, name=f"{name}_{i}"
                    )
                    feeds[ph.name] = v
                    holders.append(ph)
                kwargs[name] = holders
            else:
                ph = tf.compat.v1.placeholder(
                    tf.as_dtype(value.dtype), None if unknown_shapes else value.shape, name=name
                )
                feeds[ph.name] = value
                kwargs[name] = ph
        try:
            out = getattr(tf.raw_ops, case.op)(**kwargs, **case.attrs, name="op")
        except Exception as e:  # refused at graph construction: shape inference, a bad attr
            return {"status": "build_error", "error": f"{type(e).__name__}: {e}"[:300]}
        if isinstance(out, tf.Operation):
            return {"status": "build_error", "error": "no outputs"}
        outs: list[Any] = []
        pending = [out]
        while pending:  # ops with list outputs (ParseExample's) give nested lists: flattened in order
            item = pending.pop(0)
            if isinstance(item, (list, tuple)):
                pending[:0] = list(item)
            else:
                outs.append(item)
        fetches = [t.name for t in outs]
    result: dict[str, Any] = {"graph": graph.as_graph_def().SerializeToString(), "feeds": feeds}
    result["fetches"] = fetches
    config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=1, intra_op_parallelism_threads=1)
    with tf.compat.v1.Session(graph=graph, config=config) as sess:
        try:
            values_ = sess.run(fetches, feeds)
            result["status"] = "ok"
            result["outputs"] = [np.asarray(v) for v in values_]
        except tf.errors.OpError as e:
            message = e.message.split("Node: 'op'")[-1].strip()
            if "No OpKernel was registered" in message:  # a dtype TF has no CPU kernel for: not a case
                return {"status": "build_error", "error": message[:300]}
            result["status"] = "error"
            result["code"] = int(e.error_code)
            result["error"] = message[:300]
    return result


# ---- poolserve side -------------------------------------------------------------------------------------


def compare(want: np.ndarray, got: Any) -> str | None:
    got = np.asarray(got)
    if want.dtype.kind == "S":  # a string scalar as TensorFlow's Session hands it back
        want = want.astype(object)
    if got.dtype.kind == "S":  # and as poolserve's does
        got = got.astype(object)
    if want.dtype != got.dtype:
        return f"dtype {got.dtype} != TF {want.dtype}"
    if want.shape != got.shape:
        return f"shape {got.shape} != TF {want.shape}"
    if want.dtype.kind == "f" or want.dtype.kind == "c":
        w = want.astype(np.complex128 if want.dtype.kind == "c" else np.float64)
        g = got.astype(w.dtype)
        rtol, atol = (2e-3, 1e-3) if want.dtype == np.float16 else (RTOL, ATOL)
        if not np.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True):
            bad = ~np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
            idx = np.argwhere(bad)[:3].tolist()
            return f"values differ at {idx}: got {g[bad][:3]} TF {w[bad][:3]}"
        return None
    if want.dtype == object:
        if want.tolist() != got.tolist():
            return "values differ"
        return None
    if not np.array_equal(want, got):
        bad = want != got
        idx = np.argwhere(bad)[:3].tolist()
        return f"values differ at {idx}: got {got[bad][:3]} TF {want[bad][:3]}"
    return None


def check(folder: Path) -> list[dict[str, Any]]:
    from poolserve.proto import graph_pb2
    from poolserve.runtime.errors import OpError
    from poolserve.runtime.graph import Graph
    from poolserve.runtime.session import Session

    cases = pickle.loads((folder / "cases.pkl").read_bytes())
    findings = []
    for i, (case, tf_result) in enumerate(cases):
        label = f"{case['op']} {case['note']}".strip()
        gd = graph_pb2.GraphDef()
        gd.ParseFromString(tf_result["graph"])
        try:
            session = Session(Graph(gd))
            got = session.run(tf_result["fetches"], tf_result["feeds"])
            session.close()
            error = None
        except OpError as e:
            got, error = None, e
        except Exception as e:  # a traceback: always a finding
            findings.append(
                {"case": i, "op": label, "kind": "crash", "detail": f"{type(e).__name__}: {e}"[:400]}
            )
            continue
        if tf_result["status"] == "error":
            if error is None:
                findings.append(
                    {"case": i, "op": label, "kind": "accepts", "detail": f"TF refused: {tf_result['error']}"}
                )
            continue
        if error is not None:
            findings.append(
                {
                    "case": i,
                    "op": label,
                    "kind": "refuses",
                    "detail": f"{type(error).__name__}: {error}"[:400],
                }
            )
            continue
        for k, (want, have) in enumerate(zip(tf_result["outputs"], got, strict=True)):
            why = compare(want, have)
            if why:
                findings.append({"case": i, "op": label, "kind": "values", "output": k, "detail": why})
    return findings


def describe(case: Case) -> dict[str, Any]:
    def spec(v: Any) -> Any:
        if isinstance(v, list):
            return [spec(x) for x in v]
        if isinstance(v, np.ndarray):
            return f"{v.dtype}{list(v.shape)}"
        return v

    return {
        "op": case.op,
        "inputs": {k: spec(v) for k, v in case.inputs.items()},
        "attrs": case.attrs,
        "note": case.note,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--families", default="")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--unknown-shapes",
        action="store_true",
        help="placeholders of unknown shape: TensorFlow then checks shapes when the op runs, not when the "
        "graph is built, so each kernel's own shape checks are compared",
    )
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--python", default=str(HERE.parent / ".venv/bin/python"))
    parser.add_argument("--out", default="")
    parser.add_argument("--check", default="", help="(poolserve side) compare the cases in this folder")
    args = parser.parse_args(argv)
    if args.check:
        findings = check(Path(args.check))
        (Path(args.check) / "findings.json").write_text(json.dumps(findings, indent=1))
        return 0
    families = all_families()
    wanted = [f for f in args.families.split(",") if f] or list(families)
    folder = Path(args.out or tempfile.mkdtemp(prefix="op_fuzz_"))
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    stored = []
    skipped = 0
    for name in wanted:
        for case in families[name](rng, args.count):
            result = run_tf(case, args.unknown_shapes)
            if result["status"] == "build_error":
                skipped += 1
                continue
            stored.append((describe(case), result))
    (folder / "cases.pkl").write_bytes(pickle.dumps(stored))
    print(f"{len(stored)} cases ({skipped} refused by TensorFlow at graph construction) in {folder}")
    subprocess.run([args.python, __file__, "--check", str(folder)], check=True, cwd=HERE.parent)
    findings = json.loads((folder / "findings.json").read_text())
    for f in findings:
        case = stored[f["case"]][0]
        print(f"[{f['kind']}] {f['op']} {json.dumps(case['inputs'])} {case['attrs']}: {f['detail']}")
    refused = sum(1 for _, r in stored if r["status"] == "error")
    print(f"{len(findings)} findings of {len(stored)} cases ({refused} refused by TensorFlow when run)")
    return 1 if findings else 0


if __name__ == "__main__":
    raise SystemExit(main())
