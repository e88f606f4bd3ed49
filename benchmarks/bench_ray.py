"""poolserve on Ray Serve against the single-process server: throughput, latency, and what a replica costs.

    python -m benchmarks.bench_ray [--model cnn] [--batch 8] [--seconds 8] [--rounds 1]
        [--ingress auto|haproxy|proxy] [--json out.json]

Needs the ``ray`` extra. Starts one local Ray on 127.0.0.1 (``--cpus``: every core by default) and, in turn:
the single-process server (``poolserve serve``, no gRPC), Serve with one replica of every core (the same
threads: the proxy's cost), and with one and two replicas of ``num_cpus = 1`` (each replica's pool has one
thread: the scaling), all serving the embedded example models.
Each arm is loaded by ``poolserve loadtest`` (closed loop, native protocol) with 1 client and with 8
clients for ``--seconds`` after a 2 s warm-up. ``--ingress`` is ``[ray] ingress``, what takes the requests
in front of the replicas (by default HAProxy when its binary is installed, as ``poolserve serve --ray``).
Reports req/s, p50 and p99 per arm, the two-replica over one-replica throughput, Serve's added p50/p99
over the single process, the cores the server's processes (replicas and proxy) got during each load and
their CPU per request, each replica's RSS (its ``/v1/runtime/process``) and how long a deploy took to
answer ready. The load generator runs on the same machine: on two cores it takes CPU from the server in
every arm.
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

import httpx

from benchmarks.servers import cpu_seconds, free_port, wait_ready
from poolserve.server import ray_serve
from poolserve.server.config import load_config

ROOT = Path(__file__).resolve().parent.parent
CLIENTS = (1, 8)


def replicas(url: str, want: int, tries: int = 200) -> dict[str, dict[str, Any]]:
    """Each replica's /v1/runtime/process (pid, rss_bytes), by the replica that answered."""
    seen: dict[str, dict[str, Any]] = {}
    for _ in range(tries):
        r = httpx.get(f"{url}/v1/runtime/process", timeout=5)
        seen[r.headers.get(ray_serve.REPLICA_HEADER, "single")] = r.json()
        if len(seen) >= want:
            break
    return seen


def proxy_pids() -> list[int]:
    """Serve's HTTP proxy actors on this machine (their process title is ``ray::ProxyActor``), and with
    ``RAY_SERVE_ENABLE_HA_PROXY=1`` the HAProxy processes and the actor that manages them."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            program = cmdline.split(b"\0", 1)[0]
            if cmdline.startswith((b"ray::ProxyActor", b"ray::HAProxyManager")) or program.endswith(
                b"/haproxy"
            ):
                pids.append(int(proc.name))
    return pids


def _cpu(pid: int) -> float:
    """``cpu_seconds``, 0 for a process that has ended."""
    try:
        return cpu_seconds(pid)
    except OSError:
        return 0.0


def load(
    url: str, args: argparse.Namespace, clients: int, tmp: Path, pids: list[int], proxies: list[int]
) -> dict[str, Any]:
    """One closed-loop load; with the CPU the server's processes (``pids``, then the ``proxies``) took. An
    HAProxy reload replaces its process: one that ends during the load counts until its last reading, one
    that starts counts whole."""
    pids = [*pids, *proxies]
    cpu_before = [_cpu(p) for p in pids]
    report = tmp / f"report-{time.monotonic_ns()}.json"
    cmd = [sys.executable, "-m", "poolserve.server.cli", "loadtest", "--url", url, "--model", args.model]
    cmd += ["--batch", str(args.batch), "--concurrency", str(clients), "--duration", str(args.seconds)]
    cmd += ["--warmup", "2", "--report", str(report)]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, timeout=args.seconds + 120)
    result = json.loads(report.read_text())
    run = result["runs"][0]
    spent = [(_cpu(p) or before) - before for p, before in zip(pids, cpu_before, strict=True)]  # warm-up too
    if proxies:
        spent += [_cpu(p) for p in set(proxy_pids()) - set(proxies)]  # started during the load
    cpu, proxy_cpu = sum(spent), sum(spent[len(pids) - len(proxies) :])
    wall = result["generator"]["wall_s"] or 1.0
    requests = max(1.0, run["throughput_rps"] * wall)
    return {
        "req_s": round(run["throughput_rps"], 1),
        "errors": run["errors"],
        "p50_ms": round(run["latency_ms"]["p50"], 2),
        "p99_ms": round(run["latency_ms"]["p99"], 2),
        # the cores the server (replicas and proxy) got, and its CPU per request: what the noise leaves
        "server_cores": round(cpu / wall, 2),
        "server_cpu_ms_per_request": round(1e3 * cpu / requests, 2),
        "proxy_cpu_ms_per_request": round(1e3 * proxy_cpu / requests, 2),
        "generator_cpu": round(result["generator"]["cpu_fraction"], 2),
    }


def single_process(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("POOLSERVE_")}
    env["XDG_STATE_HOME"] = str(tmp / "state")
    cmd = [sys.executable, "-m", "poolserve.server.cli", "serve", "--port", str(port), "--grpc-port", "0"]
    server = subprocess.Popen([*cmd, "--log-level", "warning"], cwd=ROOT, env=env)
    try:
        wait_ready(url, seconds=120)
        out: dict[str, Any] = {f"c{c}": load(url, args, c, tmp, [server.pid], []) for c in CLIENTS}
        out["rss_mib"] = [round(p["rss_bytes"] / 2**20, 1) for p in replicas(url, 1).values()]
    finally:
        server.terminate()
        server.wait(timeout=60)
    return out


def on_serve(n: int, cpus: int, url: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    from ray import serve

    config = load_config(None)
    config.traces.path = str(tmp / "traces.sqlite3")
    config.ray.num_replicas, config.ray.num_cpus = n, float(cpus)
    t0 = time.monotonic()
    serve.run(ray_serve.application(config), name=ray_serve.APP_NAME, route_prefix="/")
    wait_ready(url, seconds=120)
    seen = replicas(url, n)
    started_s = time.monotonic() - t0
    pids = [p["pid"] for p in seen.values()]
    out: dict[str, Any] = {f"c{c}": load(url, args, c, tmp, pids, proxy_pids()) for c in CLIENTS}
    out["replicas_seen"] = len(seen)
    out["rss_mib"] = [round(p["rss_bytes"] / 2**20, 1) for p in seen.values()]
    out["deploy_to_ready_s"] = round(started_s, 1)
    serve.delete(ray_serve.APP_NAME)
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="cnn")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seconds", type=float, default=8)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--cpus", type=int, default=os.cpu_count() or 2)
    p.add_argument("--ingress", choices=["auto", "haproxy", "proxy"], default="auto")
    p.add_argument("--json")
    args = p.parse_args()

    import ray
    from ray import serve

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cores = os.cpu_count() or 1
    environment = ray_serve.local_ray_environment(args.ingress)
    os.environ.update(environment)  # before ray.init: Serve's processes read it when they start
    print(f"ingress: {ray_serve.ingress_name(environment)}", flush=True)
    ray.init(
        num_cpus=max(args.cpus, 2), include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False
    )
    runs: list[dict[str, Any]] = []
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        with tempfile.TemporaryDirectory() as tmp_dir:
            tmp = Path(tmp_dir)
            for _ in range(args.rounds):
                run: dict[str, Any] = {
                    "ingress": ray_serve.ingress_name(environment),
                    "single": single_process(args, tmp),
                    # the same threads as the single process: what the proxy's hop adds
                    "serve_1_all_cores": on_serve(1, cores, url, args, tmp),
                    "serve_1": on_serve(1, 1, url, args, tmp),
                    "serve_2": on_serve(2, 1, url, args, tmp),
                }
                runs.append(run)
                print(json.dumps(run), flush=True)
    finally:
        ray_serve.shutdown(local=True)
    for run in runs:
        s, full, one, two = run["single"], run["serve_1_all_cores"], run["serve_1"], run["serve_2"]
        print(f"two replicas / one (8 clients): {two['c8']['req_s'] / max(one['c8']['req_s'], 1e-9):.2f}x")
        for c in CLIENTS:
            k = f"c{c}"
            p50, p99 = full[k]["p50_ms"] - s[k]["p50_ms"], full[k]["p99_ms"] - s[k]["p99_ms"]
            print(f"{c} client(s): Serve (1 replica, all cores) adds p50 {p50:+.2f} ms, p99 {p99:+.2f} ms")
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
