"""Checks every ``keras.applications`` model against poolserve (dev only; nothing is committed).

Run with the TensorFlow environment; the poolserve side runs in a subprocess of the project's venv::

    /opt/tfenv/bin/python tools/check_keras_applications.py [--only ResNet50,Xception] [--skip VGG16]
        [--results benchmarks/results/keras_applications.jsonl] [--python .venv/bin/python] [--runs 5]
        [--calibrate-bn]
    /opt/tfenv/bin/python tools/check_keras_applications.py --table <results.jsonl>

For each model (smallest first, one at a time, so CPU use comes in bursts): build it at its default settings
with ``weights=None`` (random weights, no download) and its default input size, batch 1; freeze it
(``convert_variables_to_constants_v2``) into a temp dir with a random image and what TensorFlow computed for
it (the output, and the logits feeding the final Softmax when there is one: softmax of random weights is
near uniform and would hide errors); then ``--worker <dir>`` (this file, run by the venv's Python, importing
only poolserve) loads the graph, runs it and compares. Errors are ``max |poolserve - TF| / max |TF|`` over
the tensor. Times are medians of ``--runs`` runs after one warm-up, TensorFlow's in a
``tf.compat.v1.Session`` on the same frozen graph with its default settings (grappler on, all cores).

Each model's row is appended to ``--results`` (JSON lines) as soon as it is known, so a long run can stop and
resume (``--resume`` skips models already there); ``--table`` prints the Markdown table.

Every model is exported by a TensorFlow process of its own (``--export``) and run by a poolserve process
of its own, so the memory of one model is given back before the next; each reports its peak RSS
(``tf_rss_mb``, ``rss_mb``). Models over ``LEAN_PARAMS`` parameters (ConvNeXtXLarge) are exported lean:
TensorFlow's values and times come from ``tf.function``s over the model's variables, computed before
freezing, and the model is dropped before the frozen graph is serialized, so TensorFlow never holds the
weights more than twice.

**Float64 reference.** Some models are so ill-conditioned with random weights that float32 rounding alone
moves their logits by O(1): EfficientNetV2M/L's activations grow to 1e5-1e6 in the last stages, and
TensorFlow's own float32 logits are 50-100% away from the float64 answer on the same weights. Comparing two
float32 implementations of such a model says nothing. When a model's float32 error is over ``TOL``, the
check builds it again in float64 (``keras.config.set_floatx("float64")``, the float32 model's weights cast)
and runs both TensorFlow and poolserve on the float64 graph (``f64_err``: poolserve against TensorFlow,
both float64: the kernels compute the same function), and measures how far each float32 result is from
TensorFlow's float64 one (``ps32_vs_f64``, ``tf32_vs_f64``). Such a model matches when ``f64_err`` is within
``TOL`` and poolserve's float32 is no further from the float64 answer than TensorFlow's own float32 is
(plus ``TOL``).

**Calibrated batch norms** (``--calibrate-bn``). That ill-conditioning comes from the random weights, not
the architecture: Keras starts every BatchNormalization at moving mean 0 and variance 1, whatever its input's
scale, so nothing renormalizes the activations. Training leaves each one at its input's statistics on the
training data; ``calibrate_batch_norms`` does the same on random images (one pass in training mode,
momentum 0, dropout off), and activations stay near unit scale as a trained model's do. Calibrated,
TensorFlow's own float32 logits are within 2.0e-5 (V2M) and 3.3e-5 (V2L) of its float64 ones, so a
float32 comparison with TensorFlow means something again.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TOL = 1e-4  # the target: max relative error against TensorFlow
LEAN_PARAMS = 300e6  # models above this are exported lean (see the module docstring)
CALIBRATION_IMAGES = 8  # random images that set the batch norms' statistics with --calibrate-bn


def peak_rss_mb() -> int:
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)


# Smallest first (parameters, input size): a run that is stopped has checked the most models.
MODELS = [
    "MobileNetV3Small",
    "MobileNet",
    "MobileNetV2",
    "MobileNetV3Large",
    "EfficientNetB0",
    "EfficientNetV2B0",
    "NASNetMobile",
    "DenseNet121",
    "EfficientNetB1",
    "EfficientNetV2B1",
    "EfficientNetB2",
    "EfficientNetV2B2",
    "EfficientNetB3",
    "EfficientNetV2B3",
    "DenseNet169",
    "DenseNet201",
    "ResNet50",
    "ResNet50V2",
    "InceptionV3",
    "Xception",
    "ConvNeXtTiny",
    "EfficientNetB4",
    "EfficientNetV2S",
    "ResNet101",
    "ResNet101V2",
    "ConvNeXtSmall",
    "InceptionResNetV2",
    "ResNet152",
    "ResNet152V2",
    "EfficientNetB5",
    "ConvNeXtBase",
    "EfficientNetV2M",
    "EfficientNetB6",
    "NASNetLarge",
    "VGG16",
    "VGG19",
    "EfficientNetB7",
    "ConvNeXtLarge",
    "EfficientNetV2L",
    "ConvNeXtXLarge",
]


# --- poolserve side (the venv's Python) --------------------------------------------------------------------


def worker(directory: Path, runs: int, tag: str = "") -> dict[str, Any]:
    """Runs ``model{tag}.pb`` on ``io{tag}.npz``'s input, compares, saves its values to ``ps{tag}.npz``."""
    import numpy as np

    from poolserve import Session, load_graph_def

    meta = json.loads((directory / "meta.json").read_text())
    data = np.load(directory / f"io{tag}.npz")
    row: dict[str, Any] = {"loads": False, "runs": False}
    start = time.perf_counter()
    try:
        sess = Session(load_graph_def(directory / f"model{tag}.pb"))
    except Exception as e:
        row["error"] = f"load: {type(e).__name__}: {e}"[:400]
        return row
    row["loads"] = True
    row["load_s"] = round(time.perf_counter() - start, 2)
    fetches = [meta["output"]] + ([meta["logits"]] if meta.get("logits") else [])
    feeds = {meta["input"]: data["input"]}
    try:
        with sess:
            got = sess.run(fetches, feeds)  # warm-up (and the compared values)
            times = []
            for _ in range(runs):
                t0 = time.perf_counter()
                sess.run(fetches, feeds)
                times.append(time.perf_counter() - t0)
    except Exception as e:
        row["error"] = f"run: {type(e).__name__}: {e}"[:400]
        return row
    row["runs"] = True
    row["ms"] = round(1000 * sorted(times)[len(times) // 2], 1)
    for key, value in zip(["output", "logits"], got, strict=False):
        row[f"{key}_err"] = rel_err(value, data[key])
    np.savez(directory / f"ps{tag}.npz", **dict(zip(["output", "logits"], got, strict=False)))
    row["rss_mb"] = peak_rss_mb()
    return row


def rel_err(got: Any, want: Any) -> float:
    """max |got - want| / max |want|, in float64."""
    import numpy as np

    want = np.asarray(want, np.float64)
    scale = float(np.max(np.abs(want))) or 1.0
    return float(np.max(np.abs(np.asarray(got, np.float64) - want))) / scale


# --- TensorFlow side ---------------------------------------------------------------------------------------


def build(
    name: str, dtype: str = "float32", weights: list[Any] | None = None, calibrate: bool = False
) -> Any:
    """The model at its defaults, random weights from a fixed seed (or ``weights``, cast to ``dtype``).
    ``calibrate``: its batch norms' moving statistics are then set from a batch of random images
    (``calibrate_batch_norms``)."""
    import keras

    keras.backend.clear_session()
    keras.config.set_floatx(dtype)
    keras.utils.set_random_seed(2021)
    model = getattr(keras.applications, name)(weights=None)
    if weights is not None:
        model.set_weights([w.astype(dtype) for w in weights])
    if calibrate:
        calibrate_batch_norms(model)
    return model


def input_shape(model: Any) -> tuple[int, ...]:
    """One image's shape: MobileNetV3 takes any size (None dims), 224 being its default."""
    return tuple(224 if d is None else int(d) for d in model.inputs[0].shape[1:])


def calibrate_batch_norms(model: Any, images: int = CALIBRATION_IMAGES) -> None:
    """Sets every BatchNormalization's moving mean and variance to the statistics of its input over
    ``images`` random images (not the compared one), as training leaves them on the training data: one
    pass in training mode with momentum 0 and dropout off, so each layer sees its predecessors already
    normalized. A trained model's activations stay near unit scale; with Keras's initial statistics (mean
    0, variance 1) EfficientNetV2M/L's grow to 1e6-1e10 (module docstring)."""
    import keras
    import numpy as np

    norms = [x for x in model.layers if isinstance(x, keras.layers.BatchNormalization)]
    drops = [x for x in model.layers if isinstance(x, keras.layers.Dropout)]
    saved = [(x, x.momentum) for x in norms], [(x, x.rate) for x in drops]
    for x in norms:
        x.momentum = 0.0
    for x in drops:
        x.rate = 0.0
    shape = input_shape(model)
    batch = np.random.default_rng(11).uniform(0, 255, (images, *shape)).astype(keras.config.floatx())
    try:
        model(batch, training=True)
    finally:
        for x, momentum in saved[0]:
            x.momentum = momentum
        for x, rate in saved[1]:
            x.rate = rate


def export(
    name: str, directory: Path, runs: int, float64: bool = False, calibrate: bool = False
) -> dict[str, Any]:
    """Builds and freezes one model, writes its graph, a random input and TensorFlow's outputs. With
    ``float64``: the same weights in float64, as ``model64.pb`` and ``io64.npz`` (module docstring).
    ``calibrate``: batch norms calibrated first (``calibrate_batch_norms``)."""
    import gc

    import numpy as np
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    model = build(name, calibrate=calibrate)
    params = model.count_params()
    if float64:
        model = build(name, "float64", model.get_weights())
    dtype = tf.float64 if float64 else tf.float32
    tag = "64" if float64 else ""
    shape = input_shape(model)
    spec = tf.TensorSpec([1, *shape], dtype, name="input")

    @tf.function(input_signature=[spec])
    def serve(x: Any) -> Any:
        return model(x, training=False)

    image = np.random.default_rng(7).uniform(0, 255, (1, *shape)).astype(np.float32)
    feed = image.astype(np.float64) if float64 else image
    concrete = serve.get_concrete_function()
    lean = params > LEAN_PARAMS
    times: list[float] = []
    early = None
    if lean:
        # TensorFlow's values before freezing: the frozen graph is then the only copy of the weights
        functions = _lean_functions(model, spec)
        early = [np.asarray(f(tf.constant(feed))) for f in functions]
        for _ in range(runs):
            t0 = time.perf_counter()
            functions[0](tf.constant(feed))
            times.append(time.perf_counter() - t0)
        del functions
    frozen = convert_variables_to_constants_v2(concrete)
    graph_def = frozen.graph.as_graph_def()
    input_name = frozen.inputs[0].name
    output_name = frozen.outputs[0].name
    softmax = [n for n in graph_def.node if n.op == "Softmax"]
    logits = softmax[-1].input[0] if softmax else None
    if logits is not None and ":" not in logits:
        logits += ":0"
    nodes = len(graph_def.node)
    if lean:
        del model, serve, concrete, frozen
        tf.keras.backend.clear_session()
        gc.collect()
    (directory / f"model{tag}.pb").write_bytes(graph_def.SerializeToString())
    fetches = [output_name] + ([logits] if logits else [])
    if early is not None:
        values = early
        if logits is None or len(early) < 2:
            values, logits = early[:1], None
    else:
        graph = tf.Graph()
        with graph.as_default():
            tf.compat.v1.import_graph_def(graph_def, name="")
        with tf.compat.v1.Session(graph=graph) as sess:
            values = sess.run(fetches, {input_name: feed})
            for _ in range(runs):
                t0 = time.perf_counter()
                sess.run(fetches, {input_name: feed})
                times.append(time.perf_counter() - t0)
    arrays = {"input": feed, "output": values[0]}
    if logits:
        arrays["logits"] = values[1]
    np.savez(directory / f"io{tag}.npz", **arrays)
    if not float64:
        meta = {"input": input_name, "output": output_name, "logits": logits}
        (directory / "meta.json").write_text(json.dumps(meta))
    return {
        "nodes": nodes,
        "input_shape": "x".join(str(d) for d in shape),
        "params_m": round(params / 1e6, 1),
        "tf": tf.__version__,
        "tf_ms": round(1000 * sorted(times)[len(times) // 2], 1),
        "tf_lean": lean,
        "tf_rss_mb": peak_rss_mb(),
        **({"bn_calibrated": True} if calibrate else {}),
    }


def _lean_functions(model: Any, spec: Any) -> list[Any]:
    """tf.functions over the model's variables for its output and, when its last layer ends in softmax, for
    that softmax's input (the same layer with a linear activation)."""
    import keras
    import tensorflow as tf

    out = tf.function(lambda x: model(x, training=False), input_signature=[spec])
    out.get_concrete_function()
    last = model.layers[-1]
    if getattr(last, "activation", None) is not keras.activations.softmax:
        return [out]
    last.activation = keras.activations.linear
    try:
        logits = tf.function(lambda x: model(x, training=False), input_signature=[spec])
        logits.get_concrete_function()  # traced now, with the linear activation
    finally:
        last.activation = keras.activations.softmax
    return [out, logits]


def _run(cmd: list[str], timeout: float) -> tuple[dict[str, Any] | None, str]:
    """Runs one side in a process of its own: its JSON row, or None and why not."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return None, f"took over {timeout:.0f} s"
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return None, f"exited {done.returncode}: {done.stderr[-400:]}"
    return json.loads(lines[-1]), ""


def check(name: str, python: str, runs: int, timeout: float, calibrate: bool = False) -> dict[str, Any]:
    import numpy as np

    row: dict[str, Any] = {"model": name}
    me = str(Path(__file__).resolve())
    calibrated = ["--calibrate-bn"] if calibrate else []
    with tempfile.TemporaryDirectory(prefix="keras_app_") as tmp:
        directory = Path(tmp)
        cmd = [sys.executable, me, "--export", name, tmp, "--runs", str(runs), *calibrated]
        exported, why = _run(cmd, timeout)
        if exported is None or "error" in exported:
            row["error"] = (exported or {}).get("error") or f"export: {why}"
            return row
        row.update(exported)
        got, why = _run([python, me, "--worker", tmp, "--runs", str(runs)], timeout)
        if got is None:
            row.update(loads=None, runs=None, error=f"poolserve {why}")
            return row
        row.update(got)
        if not row.get("runs") or max(row.get("output_err", 0.0), row.get("logits_err", 0.0)) <= TOL:
            return row
        # float32 differs: is it the model's conditioning or a kernel? (see the module docstring)
        cmd = [sys.executable, me, "--export", name, tmp, "--runs", "1", "--float64", *calibrated]
        exported64, why = _run(cmd, timeout)
        if exported64 is None or "error" in exported64:
            row["f64_error"] = (exported64 or {}).get("error") or f"export: {why}"
            return row
        got64, why = _run([python, me, "--worker", tmp, "--runs", "1", "--tag", "64"], timeout)
        if got64 is None or not got64.get("runs"):
            row["f64_error"] = (got64 or {}).get("error") or f"poolserve {why}"
            return row
        tf32, tf64 = np.load(directory / "io.npz"), np.load(directory / "io64.npz")
        ps32 = np.load(directory / "ps.npz")
        key = "logits" if "logits" in tf32.files else "output"
        row["f64_err"] = max(got64.get("output_err", 0.0), got64.get("logits_err", 0.0))
        row["ps32_vs_f64"] = rel_err(ps32[key], tf64[key])
        row["tf32_vs_f64"] = rel_err(tf32[key], tf64[key])
        row["matches_by_f64"] = row["f64_err"] <= TOL and row["ps32_vs_f64"] <= row["tf32_vs_f64"] + TOL
    return row


# --- the table ---------------------------------------------------------------------------------------------


def _fmt_err(row: dict[str, Any]) -> str:
    if not row.get("runs"):
        return "-"
    out = f"{row['output_err']:.1e}"
    if "logits_err" in row:
        out += f" ({row['logits_err']:.1e})"
    if "f64_err" in row:
        out += "\\*"
    return out


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| model | input | params (M) | nodes | loads | runs | max rel. error: output (logits) "
        "| poolserve ms | TF ms | ratio |",
        "|---|---|---:|---:|:-:|:-:|---|---:|---:|---:|",
    ]
    for r in rows:
        ok = {True: "yes", False: "**no**", None: "-"}
        ratio = f"{r['ms'] / r['tf_ms']:.1f}x" if r.get("ms") and r.get("tf_ms") else "-"
        lines.append(
            f"| {r['model']} | {r.get('input_shape', '-')} | {r.get('params_m', '-')} "
            f"| {r.get('nodes', '-')} "
            f"| {ok[r.get('loads')]} | {ok[r.get('runs')]} | {_fmt_err(r)} | {r.get('ms', '-')} "
            f"| {r.get('tf_ms', '-')} | {ratio} |"
        )
    for r in rows:
        if "f64_err" in r:
            lines.append(
                f"\n\\* {r['model']}: float32 over {TOL:g}; in float64 poolserve is within "
                f"{r['f64_err']:.1e} "
                f"of TensorFlow, and its float32 is {r['ps32_vs_f64']:.2g} from TensorFlow's float64 answer "
                f"where TensorFlow's own float32 is {r['tf32_vs_f64']:.2g} from it: "
                + ("matches." if r.get("matches_by_f64") else "**does not match**.")
            )
    failures = [r for r in rows if r.get("error") or r.get("f64_error")]
    for r in failures:
        lines.append(f"\n- {r['model']}: {r.get('error') or r.get('f64_error')}")
    return "\n".join(lines)


def read_rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            rows[row["model"]] = row  # the latest run of a model wins
    order = {name: i for i, name in enumerate(MODELS)}
    return sorted(rows.values(), key=lambda r: order.get(r["model"], len(order)))


def main() -> int:
    global TOL
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--export", nargs=2, metavar=("MODEL", "DIR"), help=argparse.SUPPRESS)
    parser.add_argument("--float64", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tag", default="", help=argparse.SUPPRESS)
    parser.add_argument("--table", type=Path, help="print the Markdown table of a results file and exit")
    parser.add_argument("--only", default="", help="comma-separated model names")
    parser.add_argument("--skip", default="", help="comma-separated model names")
    parser.add_argument("--resume", action="store_true", help="skip models already in --results")
    parser.add_argument(
        "--results", type=Path, default=ROOT / "benchmarks" / "results" / "keras_applications.jsonl"
    )
    parser.add_argument("--python", default=str(ROOT / ".venv" / "bin" / "python"))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--tol", type=float, default=TOL, help="relative error over which the float64 reference is checked"
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds for the poolserve side")
    parser.add_argument(
        "--calibrate-bn",
        action="store_true",
        help="set batch norms' moving statistics from random images first (see the module docstring)",
    )
    args = parser.parse_args()
    TOL = args.tol
    if args.worker is not None:
        print(json.dumps(worker(args.worker, args.runs, args.tag)))
        return 0
    if args.table is not None:
        print(table(read_rows(args.table)))
        return 0
    # oneDNN stays at TensorFlow's default (on): the TF times are what its users get
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    if args.export is not None:
        name, directory = args.export
        try:
            row = export(name, Path(directory), args.runs, args.float64, args.calibrate_bn)
            print(json.dumps(row))
        except Exception as e:
            print(json.dumps({"error": f"export: {type(e).__name__}: {e}"[:400]}))
        return 0
    names = [n for n in args.only.split(",") if n] or MODELS
    skip = {n for n in args.skip.split(",") if n}
    done = {r["model"] for r in read_rows(args.results)} if args.resume else set()
    args.results.parent.mkdir(parents=True, exist_ok=True)
    for name in names:
        if name in skip or name in done:
            continue
        start = time.perf_counter()
        row = check(name, args.python, args.runs, args.timeout, args.calibrate_bn)
        row["date"] = time.strftime("%Y-%m-%d")
        with args.results.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(f"{name}: {json.dumps(row)} ({time.perf_counter() - start:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
