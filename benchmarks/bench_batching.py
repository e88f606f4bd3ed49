"""Dynamic batching on against off: one-row (one-image) requests at 32 clients, and one client alone.

    python -m benchmarks.bench_batching --runs 2 --out benchmarks/results/batching

Per run, a server without ``[models.batching]`` and one with ``max_batch_size = 64`` on the default "auto"
delay are started in turn (off, on, off, on, ...) with the same models, and ``poolserve loadtest`` drives
each model over native JSON and KServe gRPC (raw tensors). Models: the examples (``mlp``, ``cnn``), a
wide MLP made here (three dense layers of 2048 over a 1024 input, 8.4 M weights: one row reads every weight,
so 32 rows cost little more than one) and the realistic Keras exports ``residual_cnn`` and
``mobilenet_v2`` (``tests/fixtures/models/realistic``). Besides throughput and latency it records the
server's CPU per request (from /proc) and the load generator's, since both share the machine's cores.
The table gives each figure's range over the runs; ``--out`` keeps the loadtest reports and a summary
(``--summary FILE...`` renders the table of summaries written apart, ``--first-run`` numbering them).
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.servers import cpu_seconds, wait_ready

ROOT = Path(__file__).resolve().parent.parent
REALISTIC = ROOT / "tests" / "fixtures" / "models" / "realistic"
EXAMPLES = ROOT / "configs" / "models"
PORT, GRPC_PORT = 8640, 8641
# model -> protocols it is driven over (JSON bodies of 96x96x3 images measure the JSON codec, not batching)
PROTOCOLS: dict[str, tuple[str, ...]] = {
    "mlp": ("native", "kserve-grpc"),
    "cnn": ("native", "kserve-grpc"),
    "wide_mlp": ("native", "kserve-grpc"),
    "residual_cnn": ("kserve-grpc",),
    "mobilenet_v2": ("kserve-grpc",),
}


def wide_mlp(path: Path, width: int = 2048, inputs: int = 1024, layers: int = 3) -> None:
    """A dense ReLU stack whose step cost is mostly reading its weights (fixed seed)."""
    from poolserve.runtime.builder import GraphBuilder

    rng = np.random.default_rng(0)
    b = GraphBuilder()
    x = b.placeholder("features", np.float32, (None, inputs))
    fan_in = inputs
    for i in range(layers):
        w = (rng.standard_normal((fan_in, width)) / np.sqrt(fan_in)).astype(np.float32)
        bias = np.zeros(width, np.float32)
        with b.scope(f"dense_{i}"):
            x = b.relu(b.bias_add(b.matmul(x, b.constant(w)), b.constant(bias)))
        fan_in = width
    w = (rng.standard_normal((fan_in, 10)) / np.sqrt(fan_in)).astype(np.float32)
    b.softmax(b.matmul(x, b.constant(w)), name="probabilities")
    path.write_bytes(b.graph_def.SerializeToString())


def model_paths(tmp: Path) -> dict[str, Path]:
    wide_mlp(tmp / "wide_mlp.pb")
    return {
        "mlp": EXAMPLES / "mlp.pb",
        "cnn": EXAMPLES / "cnn.pb",
        "wide_mlp": tmp / "wide_mlp.pb",
        "residual_cnn": REALISTIC / "residual_cnn.pb",
        "mobilenet_v2": REALISTIC / "mobilenet_v2.pb",
    }


def write_config(path: Path, models: dict[str, Path], batching: bool, session_config: str = "") -> None:
    lines = ["[server]", f"port = {PORT}", f"grpc_port = {GRPC_PORT}"]
    for name, model in models.items():
        lines += ["[[models]]", f'name = "{name}"', f'path = "{model}"']
        if session_config:
            lines.append(f"session_config = {json.dumps(session_config)}")
        if batching:
            lines += ["[models.batching]", "max_batch_size = 64"]
    path.write_text("\n".join(lines) + "\n")


def start_server(config: Path, log: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "poolserve.server.cli", "serve", "--config", str(config)]
    proc = subprocess.Popen([*cmd, "--log-level", "warning"], stdout=log.open("wb"), stderr=subprocess.STDOUT)
    wait_ready(f"http://127.0.0.1:{PORT}", proc, path="/v2/health/ready")  # the log says why not
    return proc


def loadtest(model: str, protocol: str, clients: int, duration: float, report: Path) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "poolserve.loadtest.cli", "--url", f"http://127.0.0.1:{PORT}"]
    cmd += ["--model", model, "--batch", "1", "--concurrency", str(clients), "--duration", str(duration)]
    cmd += ["--warmup", "1", "--protocol", protocol, "--report", str(report)]
    if protocol == "kserve-grpc":
        cmd += ["--binary", "--grpc-address", f"127.0.0.1:{GRPC_PORT}"]
    subprocess.run(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, timeout=duration + 120
    )
    result: dict[str, Any] = json.loads(report.read_text())
    return result


def measure(args: argparse.Namespace, out: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        models = {m: p for m, p in model_paths(tmp).items() if m in args.models}
        for run in range(args.first_run, args.first_run + args.runs):
            for mode in ("off", "on"):
                config = tmp / f"batching_{mode}.toml"
                write_config(config, models, mode == "on", args.session_config)
                server = start_server(config, out / f"server_{mode}.log")
                try:
                    for model in models:
                        for protocol in PROTOCOLS[model]:
                            for clients in args.clients:
                                name = f"r{run}_{mode}_{model}_{protocol}_c{clients}.json"
                                cpu0 = cpu_seconds(server.pid)
                                rep = loadtest(model, protocol, clients, args.duration, out / name)
                                server_cpu = cpu_seconds(server.pid) - cpu0
                                runs = rep["runs"][0]
                                done = max(1, runs["requests"])
                                row = {
                                    "run": run,
                                    "batching": mode,
                                    "model": model,
                                    "protocol": protocol,
                                    "clients": clients,
                                    "session_config": args.session_config,
                                    "rps": runs["throughput_rps"],
                                    "p50_ms": runs["latency_ms"]["p50"],
                                    "p99_ms": runs["latency_ms"]["p99"],
                                    "errors": runs["errors"],
                                    "batch_rows": rep.get("batches", {}).get(model, {}).get("mean_rows", 0.0),
                                    # the server's CPU includes the 1 s warm-up: a per-request upper bound
                                    "server_cpu_ms_per_request": server_cpu * 1000 / done,
                                    "generator_cpu_ms_per_request": rep["generator"]["cpu_s"] * 1000 / done,
                                }
                                rows.append(row)
                                print(json.dumps(row), flush=True)
                finally:
                    server.send_signal(signal.SIGTERM)
                    try:
                        server.wait(20)
                    except subprocess.TimeoutExpired:
                        server.kill()
    return rows


def span(values: list[float], fmt: str = "{:.0f}") -> str:
    lo, hi = min(values), max(values)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}-{fmt.format(hi)}"


def table(rows: list[dict[str, Any]]) -> str:
    """Per model, protocol and clients: req/s and p99 on against off, ratios per run, batch rows. A load
    with failed requests is left out (its throughput measures the failure) and listed below the table."""
    failed = [r for r in rows if r["errors"] > 0]
    rows = [r for r in rows if r["errors"] == 0]
    out = [
        "| model | protocol | clients | req/s on / off | ratio | p99 ms on / off | batch rows "
        "| server CPU ms/req on / off | generator CPU ms/req |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    keys = sorted({(r["model"], r["protocol"], r["clients"]) for r in rows}, key=lambda k: (k[2] == 1, k))
    for model, protocol, clients in keys:
        sel = [r for r in rows if (r["model"], r["protocol"], r["clients"]) == (model, protocol, clients)]
        on = [r for r in sel if r["batching"] == "on"]
        off = [r for r in sel if r["batching"] == "off"]
        ratios = [a["rps"] / b["rps"] for a in on for b in off if a["run"] == b["run"] and b["rps"] > 0]
        if not on or not off:
            continue
        out.append(
            f"| {model} | {protocol} | {clients} "
            f"| {span([r['rps'] for r in on])} / {span([r['rps'] for r in off])} "
            f"| {span(ratios, '{:.2f}')}x "
            f"| {span([r['p99_ms'] for r in on], '{:.1f}')} / {span([r['p99_ms'] for r in off], '{:.1f}')} "
            f"| {span([r['batch_rows'] for r in on], '{:.1f}')} "
            f"| {span([r['server_cpu_ms_per_request'] for r in on], '{:.2f}')} / "
            f"{span([r['server_cpu_ms_per_request'] for r in off], '{:.2f}')} "
            f"| {span([r['generator_cpu_ms_per_request'] for r in sel], '{:.2f}')} |"
        )
    for r in failed:
        out.append(
            f"left out: run {r['run']}, batching {r['batching']}, {r['model']} {r['protocol']} "
            f"{r['clients']} clients: {r['errors']} failed requests, {r['rps']:.0f} req/s"
        )
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per load (after 1 s warm-up)")
    parser.add_argument("--clients", type=int, nargs="+", default=[32, 1])
    parser.add_argument("--models", nargs="+", default=list(PROTOCOLS), choices=list(PROTOCOLS))
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "poolserve-batching")
    parser.add_argument(
        "--session-config",
        default="",
        help='every model\'s session_config on both servers, e.g. "intra_op_parallelism_threads: 1"',
    )
    parser.add_argument("--first-run", type=int, default=1, help="number of the first run")
    parser.add_argument("--summary", type=Path, nargs="+", help="render the table of summary.json files")
    args = parser.parse_args()
    if args.summary is not None:
        print(table([row for path in args.summary for row in json.loads(path.read_text())["rows"]]))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    rows = measure(args, args.out)
    (args.out / f"summary_run{args.first_run}.json").write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    print(table(rows))


if __name__ == "__main__":
    main()
