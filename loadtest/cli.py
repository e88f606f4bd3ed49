"""``poolserve loadtest``: load a running server and report throughput and latency.

    poolserve loadtest --url http://127.0.0.1:8500 --model mlp [--model cnn:2 ...]
        [--concurrency N | --rate R] [--duration S | --requests K] [--warmup S] [--batch B]
        [--protocol native|kserve|tfserving|kserve-grpc [--grpc-address H:P]] [--binary] [--timeout-ms T]
        [--pool on|off|default]
        [--compare-pool [--rounds 6]] [--report out.json] [--plot out.png] [--payload inputs.json] [--seed N]
    poolserve loadtest --overload --model cnn [--capacity R | --capacity-duration S] [--multiples 1 2 3 5]
        [--duration S] [--timeout-ms 1000] ...

Closed loop (``--concurrency N``, the default with N=8): N clients, each sending its next request when the
last is answered. Open loop (``--rate R``): Poisson arrivals at R req/s, sent whatever the server does;
latencies count from the scheduled send time. ``--compare-pool`` runs the same load with the run handler
pool on and off in alternating rounds (the two rounds of a turn replay the same arrivals and model picks)
and prints them side by side. ``--overload`` measures the
capacity and offers multiples of it (loadtest/overload.py). Exit status: 0 done, 1 the load could
not run (unreachable server, unknown model, unwritable --report or --plot, ...), or more than 1% of its
requests failed (report.MAX_ERROR_SHARE; not with --overload), or a connection error occurred, 2 bad
arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from rich.console import Console
from rich.text import Text

from poolserve.loadtest import overload, report
from poolserve.loadtest.generator import (
    PROTOCOLS,
    HttpSender,
    Load,
    LoadtestError,
    Picker,
    Recorder,
    Send,
    Target,
    build_payload,
    encode_request,
    fetch_model,
    read_payload_file,
    run_phase,
)

DEFAULT_URL = "http://127.0.0.1:8500"
DEFAULT_CONCURRENCY = 8
DEFAULT_DURATION = 10.0
# the open loop's connection pool: enough for a deep queue, as many as the server's default max_in_flight
OPEN_LOOP_CONNECTIONS = 256
POOL_CHOICES = {"on": "pool", "off": "no_pool", "default": "default"}
OVERLOAD_TIMEOUT_MS = 1000  # the deadline of --overload's requests unless --timeout-ms says otherwise


@dataclass(frozen=True)
class ModelChoice:
    name: str
    weight: float


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse's own errors and ours: usage, message, exit 2
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of at least 0, got {text!r}")
    return value


def _model(text: str) -> ModelChoice:
    name, sep, weight = text.rpartition(":")
    if not sep:
        name, weight = text, "1"
    if not name:
        raise argparse.ArgumentTypeError(f"expected NAME or NAME:WEIGHT, got {text!r}")
    try:
        return ModelChoice(name, _positive_float(weight))
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"the weight in {text!r} must be a positive number (NAME:WEIGHT)"
        ) from None


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="poolserve loadtest",
        description="Load a running poolserve server and report throughput and latency. Payloads follow the "
        "models' KServe v2 metadata (GET /v2/models/NAME).",
        epilog=f"Exit status: 0 when the run passed; 1 when the load could not run, when more than "
        f"{report.MAX_ERROR_SHARE:.0%} of its requests failed (not with --overload, which measures "
        "shedding) or a connection error occurred (the report's 'verdict' says which); 2 bad arguments.",
    )
    p.add_argument("--url", default=DEFAULT_URL, help=f"the server's base URL (default {DEFAULT_URL})")
    p.add_argument(
        "--model",
        action="append",
        type=_model,
        required=True,
        metavar="NAME[:WEIGHT]",
        help="a model to load; repeat for a mix, each request picks one by weight (default 1)",
    )
    loop = p.add_mutually_exclusive_group()
    loop.add_argument(
        "--concurrency",
        type=_positive_int,
        metavar="N",
        help=f"closed loop: N clients with one request in flight each (default {DEFAULT_CONCURRENCY})",
    )
    loop.add_argument(
        "--rate", type=_positive_float, metavar="R", help="open loop: Poisson arrivals at R requests/s"
    )
    length = p.add_mutually_exclusive_group()
    length.add_argument(
        "--duration",
        type=_positive_float,
        metavar="S",
        help=f"seconds of load (default {DEFAULT_DURATION:g})",
    )
    length.add_argument("--requests", type=_positive_int, metavar="K", help="number of requests")
    p.add_argument(
        "--warmup", type=_non_negative_float, default=0.0, metavar="S", help="unmeasured seconds first"
    )
    p.add_argument("--batch", type=_positive_int, default=1, metavar="B", help="batch size (dims of -1)")
    p.add_argument("--protocol", choices=PROTOCOLS, default="native")
    p.add_argument(
        "--grpc-address",
        metavar="HOST:PORT",
        help="--protocol kserve-grpc: the server's gRPC address, its [server] grpc_port "
        "(default: --url's host, port 8501)",
    )
    p.add_argument(
        "--binary",
        action="store_true",
        help="binary bodies: protobuf RunRequest (native), the binary tensor extension (kserve), "
        "raw_input_contents (kserve-grpc)",
    )
    p.add_argument(
        "--timeout-ms",
        type=_positive_int,
        metavar="T",
        help="server-side timeout (native: run_options.timeout_in_ms; kserve: parameters.timeout)",
    )
    p.add_argument(
        "--pool",
        choices=tuple(POOL_CHOICES),
        default="default",
        help="use_run_handler_pool per request: on, off, or the server's default",
    )
    p.add_argument(
        "--compare-pool", action="store_true", help="run the load with the pool on and off, alternating"
    )
    p.add_argument(
        "--rounds",
        type=_positive_int,
        default=6,
        metavar="N",
        help="--compare-pool: alternating rounds (even, default 6)",
    )
    p.add_argument(
        "--overload",
        action="store_true",
        help="measure the capacity (closed loop), then offer --multiples of it (open loop, --duration "
        "each) and report goodput, accepted latency against the deadline, shedding and server RSS",
    )
    p.add_argument(
        "--capacity",
        type=_positive_float,
        metavar="R",
        help="--overload: the capacity in req/s (skips measuring it)",
    )
    p.add_argument(
        "--capacity-duration",
        type=_positive_float,
        default=5.0,
        metavar="S",
        help="--overload: seconds of closed loop measuring the capacity (default 5)",
    )
    p.add_argument(
        "--multiples",
        type=_positive_float,
        nargs="+",
        default=list(overload.DEFAULT_MULTIPLES),
        metavar="M",
        help="--overload: the multiples of the capacity offered (default 1 2 3 5)",
    )
    p.add_argument(
        "--http-client",
        choices=("raw", "httpx"),
        default="raw",
        help="HTTP load loops: a lean HTTP/1.1 sender (default; a tenth of httpx's CPU) or httpx",
    )
    p.add_argument("--report", metavar="FILE.json", help="write the results as JSON")
    p.add_argument("--plot", metavar="FILE.png", help="write latency plots (needs matplotlib)")
    p.add_argument("--payload", metavar="FILE.json", help="inputs as JSON {name: nested list}")
    p.add_argument(
        "--seed", type=int, default=0, metavar="N", help="seed of the payloads, model mix and arrivals"
    )
    return p


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """Refuses combinations that cannot work (exit 2); returns notes about ignored settings."""
    notes: list[str] = []
    if not args.url.startswith(("http://", "https://")):
        parser.error(f"--url must start with http:// or https://, got {args.url!r}")
    names = [m.name for m in args.model]
    if len(set(names)) != len(names):
        parser.error(f"a model is given more than once: {', '.join(names)}")
    if args.compare_pool:
        if args.pool != "default":
            parser.error("--compare-pool sets the pool per request: leave out --pool")
        if args.rounds < 2 or args.rounds % 2:
            parser.error(f"--rounds must be an even number of at least 2, got {args.rounds}")
        if args.requests is not None and args.requests < args.rounds:
            parser.error(f"--requests must be at least --rounds ({args.rounds}) with --compare-pool")
    if args.overload:
        for flag, given in (("--rate", args.rate), ("--requests", args.requests)):
            if given is not None:
                parser.error(f"{flag} does not go with --overload: the rates are multiples of the capacity")
        if args.compare_pool:
            parser.error("--compare-pool does not go with --overload")
        if args.protocol == "tfserving":
            parser.error("--overload needs a per-request deadline: use --protocol native or kserve")
        if args.timeout_ms is None:
            args.timeout_ms = OVERLOAD_TIMEOUT_MS
    if args.grpc_address is not None:
        if args.protocol != "kserve-grpc":
            parser.error("--grpc-address goes with --protocol kserve-grpc")
        from poolserve.loadtest.grpc_sender import check_address

        try:
            check_address(args.grpc_address)
        except ValueError as e:
            parser.error(f"--grpc-address: {e}")
    if args.protocol == "tfserving":
        if args.binary:
            parser.error("--binary is not available with --protocol tfserving (TF Serving REST is JSON)")
        if args.compare_pool:
            parser.error(
                "--compare-pool needs a per-request pool switch, which TF Serving's API does not have: "
                "use --protocol native or kserve"
            )
        if args.pool != "default":
            notes.append(
                f"--pool {args.pool} cannot be expressed in a TF Serving request: "
                "the server's default is used"
            )
            args.pool = "default"
        if args.timeout_ms is not None:
            notes.append(
                "--timeout-ms cannot be expressed in a TF Serving request: the server's default is used"
            )
    return notes


def _config(args: argparse.Namespace, loop: Load, modes: list[str]) -> dict[str, Any]:
    return {
        "url": args.url,
        "models": [{"name": m.name, "weight": m.weight} for m in args.model],
        "protocol": args.protocol,
        "binary": args.binary,
        "loop": "open" if loop.rate is not None else "closed",
        "concurrency": loop.concurrency,
        "rate": loop.rate,
        "duration_s": loop.duration,
        "requests": loop.requests,
        "warmup_s": args.warmup,
        "batch": args.batch,
        "timeout_ms": args.timeout_ms,
        "pool": args.pool,
        "compare_pool": args.compare_pool,
        "rounds": args.rounds if args.compare_pool else 1,
        "modes": modes,
        "payload": args.payload,
        "seed": args.seed,
    }


def _split(load: Load, rounds: int) -> list[Load]:
    """``load`` cut into ``rounds`` equal phases (requests: the remainder goes to the first ones)."""
    if load.requests is not None:
        base, extra = divmod(load.requests, rounds)
        return [Load(load.concurrency, load.rate, None, base + (i < extra)) for i in range(rounds)]
    assert load.duration is not None
    return [Load(load.concurrency, load.rate, load.duration / rounds, None) for _ in range(rounds)]


class Runner:
    """One loadtest invocation: fetch the models, build the requests, warm up, measure, report."""

    def __init__(self, args: argparse.Namespace, out: Console, err: Console) -> None:
        self.args = args
        self.out = out
        self.err = err
        self.modes = ["pool", "no_pool"] if args.compare_pool else [POOL_CHOICES[args.pool]]
        self.load = Load(
            concurrency=None if args.rate is not None else (args.concurrency or DEFAULT_CONCURRENCY),
            rate=args.rate,
            duration=args.duration if args.requests is None else None,
            requests=args.requests,
        )
        if self.load.duration is None and self.load.requests is None:
            self.load = Load(self.load.concurrency, self.load.rate, DEFAULT_DURATION, None)
        self.rng = random.Random(args.seed)
        self.batches: dict[str, dict[str, float]] = {}  # per model, from the server's metrics

    async def targets(self, client: Any) -> dict[str, list[Target]]:
        args = self.args
        given = read_payload_file(args.payload) if args.payload else None
        infos = [await fetch_model(client, m.name) for m in args.model]
        if given is not None:
            known = {spec.name for info in infos for spec in info.inputs}
            unknown = sorted(set(given) - known)
            if unknown:
                raise LoadtestError(
                    f"--payload names input(s) {', '.join(unknown)} that the model(s) do not have; "
                    f"inputs: {', '.join(sorted(known))}"
                )
        data_rng = np.random.default_rng(args.seed)
        payloads = [build_payload(info, args.batch, data_rng, given) for info in infos]
        return {
            mode: [self.encode(info, payload, mode) for info, payload in zip(infos, payloads, strict=True)]
            for mode in self.modes
        }

    def encode(self, info: Any, payload: dict[str, Any], mode: str) -> Target:
        args = self.args
        if args.protocol == "kserve-grpc":
            from poolserve.loadtest.grpc_sender import encode_grpc_request

            return encode_grpc_request(info, payload, mode, args.timeout_ms, args.binary)
        return encode_request(args.protocol, info, payload, mode, args.timeout_ms, args.binary)

    def sender(self, connections: int, client_timeout: float) -> Any:
        args = self.args
        if args.protocol == "kserve-grpc":
            from poolserve.loadtest.grpc_sender import GrpcSender, default_address

            address = args.grpc_address or default_address(args.url)
            return GrpcSender(address, args.url, connections, client_timeout)
        if args.http_client == "raw" and args.url.startswith("http://"):
            from poolserve.loadtest.raw_http import RawHttpSender

            return RawHttpSender(args.url, connections, client_timeout)
        return HttpSender(args.url, connections, client_timeout)

    async def run(self) -> int:
        args = self.args
        if args.overload:
            return await self.run_overload()
        open_loop = self.load.rate is not None
        connections = OPEN_LOOP_CONNECTIONS if open_loop else (self.load.concurrency or 1)
        client_timeout = (args.timeout_ms or 30000) / 1000 + 5.0
        weights = [m.weight for m in args.model]
        async with self.sender(connections, client_timeout) as send:
            targets = await self.targets(send.clients[0])
            # seeded per round by phases()
            pickers = {m: Picker(targets[m], weights, random.Random()) for m in self.modes}
            if args.warmup > 0:
                warm = Load(self.load.concurrency, self.load.rate, args.warmup / len(self.modes), None)
                await self.phases(send, pickers, [warm] * len(self.modes), Recorder(), "warmup")
            phases = _split(self.load, args.rounds if args.compare_pool else 1)
            recorder = Recorder()
            before = await batch_totals(send.clients[0])
            cpu0, wall0 = time.process_time(), time.perf_counter()
            durations = await self.phases(send, pickers, phases, recorder, "load")
            cpu_s, wall_s = time.process_time() - cpu0, time.perf_counter() - wall0
            after = await batch_totals(send.clients[0])
        self.batches = {
            model: {"batched_requests": n - before.get(model, (0.0, 0.0))[0], "mean_rows": 0.0}
            for model, (n, _) in after.items()
        }
        for model, stats in self.batches.items():
            rows0 = before.get(model, (0.0, 0.0))[1]
            if stats["batched_requests"] > 0:
                stats["mean_rows"] = (after[model][1] - rows0) / stats["batched_requests"]
        return self.finish(recorder, durations, cpu_s, wall_s, send.first_errors)

    async def run_overload(self) -> int:
        args = self.args
        weights = [m.weight for m in args.model]
        duration = args.duration or DEFAULT_DURATION
        client_timeout = args.timeout_ms / 1000 + 5.0
        # the lean sender unless --http-client httpx: at 2x-5x of the capacity httpx's CPU per request put
        # the generator seconds behind its schedule on the server's cores
        async with self.sender(OPEN_LOOP_CONNECTIONS, client_timeout) as send:
            targets = await self.targets(send.clients[0])
            pick = Picker(targets[self.modes[0]], weights, random.Random(self.rng.random()))
            if args.warmup > 0:
                warm = Load(concurrency=args.concurrency or DEFAULT_CONCURRENCY, duration=args.warmup)
                await self.phases(send, {self.modes[0]: pick}, [warm], Recorder(), "warmup")
            capacity = args.capacity
            if capacity is None:
                concurrency = args.concurrency or DEFAULT_CONCURRENCY
                recorder = Recorder()
                phase = Load(concurrency=concurrency, duration=args.capacity_duration)
                wall = await self.phases(send, {self.modes[0]: pick}, [phase], recorder, "capacity")
                capacity = sum(1 for s in recorder.samples if s.ok) / wall[self.modes[0]]
                if capacity <= 0:
                    say(self.err, "no request succeeded while measuring the capacity")
                    return 1
            say(self.err, f"capacity: {capacity:.1f} req/s; deadline {args.timeout_ms} ms")
            steps, memory = await overload.run_steps(
                send,
                pick,
                send.clients[0],
                capacity,
                args.multiples,
                duration,
                float(args.timeout_ms),
                self.rng,
                lambda text: say(self.err, text),
            )
        title = f"poolserve loadtest --overload: {', '.join(m.name for m in args.model)} ({args.protocol})"
        self.out.print(title, style="bold", highlight=False)
        self.out.print(overload.table(steps, memory))
        for status, message in sorted(send.first_errors.items()):
            say(self.err, f"first {status} error: {message}")
        if args.report:
            config = _config(args, Load(duration=duration), self.modes)
            config.update(overload=True, capacity_rps=capacity, multiples=args.multiples)
            extra = {"overload": {"capacity_rps": capacity, "steps": steps, **memory}}
            report.write_report(args.report, [], config, extra)
        return 0

    async def phases(
        self, send: Send, pickers: dict[str, Picker], phases: list[Load], recorder: Recorder, label: str
    ) -> dict[str, float]:
        """Runs ``phases`` with the modes in turn, showing progress; returns each mode's total time."""
        by_time = phases[0].requests is None
        total = sum((p.duration or 0.0) if by_time else (p.requests or 0) for p in phases)
        durations = dict.fromkeys(self.modes, 0.0)
        begin = time.perf_counter()
        description = label
        with report.LiveProgress(self.err, total, "s" if by_time else "requests") as progress:

            def show() -> None:
                elapsed = time.perf_counter() - begin
                progress.update(
                    recorder, min(elapsed, total) if by_time else len(recorder.samples), description
                )

            async def tick() -> None:
                while True:
                    show()
                    await asyncio.sleep(0.25)

            ticker = asyncio.create_task(tick())
            try:
                seeds = (0.0, 0.0)
                for i, phase in enumerate(phases):
                    mode = self.modes[i % len(self.modes)]
                    if i % len(self.modes) == 0:
                        # the modes of one turn replay the same arrivals and model picks, so that a mode's
                        # figures differ from the other's by what the server did, not by the draw (an open
                        # loop's rounds once offered each model a different load in each mode)
                        seeds = (self.rng.random(), self.rng.random())
                    pickers[mode].rng = random.Random(seeds[1])
                    rounds = f" round {i + 1}/{len(phases)}" if len(phases) > 1 else ""
                    description = f"{label} {mode}{rounds}"
                    arrivals = random.Random(seeds[0])
                    durations[mode] += await run_phase(send, pickers[mode], recorder, phase, arrivals)
            finally:
                ticker.cancel()
            description = f"{label} done"
            show()
        return durations

    def finish(
        self,
        recorder: Recorder,
        durations: dict[str, float],
        cpu_s: float,
        wall_s: float,
        first_errors: dict[str, str],
    ) -> int:
        args = self.args
        runs = [
            report.summarize([s for s in recorder.samples if s.mode == mode], mode, durations[mode])
            for mode in self.modes
        ]
        title = f"poolserve loadtest: {', '.join(m.name for m in args.model)} ({args.protocol}, " + (
            f"rate {self.load.rate:g}/s)"
            if self.load.rate is not None
            else f"{self.load.concurrency} clients)"
        )
        self.out.print(title, style="bold", highlight=False)
        self.out.print(report.results_table(runs))
        per_model = report.models_table(runs)
        if per_model is not None:
            self.out.print(per_model)
        warnings = report.generator_warnings(
            cpu_s,
            wall_s,
            self.load.rate,
            len(recorder.send_lags),
            recorder.send_span,
            recorder.schedule_span,
        )
        for model, stats in sorted(self.batches.items()):
            if stats["batched_requests"] > 0:
                say(
                    self.out,
                    f"batching: {model}: {stats['batched_requests']:.0f} requests ran in batches of "
                    f"{stats['mean_rows']:.1f} rows on average",
                )
        for status, message in sorted(first_errors.items()):
            say(self.err, f"first {status} error: {message}")
        for w in warnings:
            say(self.err, w, "warning")
        verdict = report.verdict(runs)
        if args.report:
            extra: dict[str, Any] = {
                "verdict": verdict,
                "generator": {
                    "cpu_s": cpu_s,
                    "wall_s": wall_s,
                    "cpu_fraction": cpu_s / wall_s if wall_s > 0 else 0.0,
                    "send_lag_ms": report.latency_ms(recorder.send_lags) if recorder.send_lags else None,
                },
                "warnings": warnings,
                "first_errors": first_errors,
                "batches": self.batches,
            }
            by_mode = {r["mode"]: r for r in runs}
            if "pool" in by_mode and "no_pool" in by_mode:
                extra["comparison"] = {
                    "pool_over_no_pool": report.ratios(by_mode["pool"], by_mode["no_pool"]),
                    "by_model": report.model_ratios(runs),
                }
            report.write_report(args.report, runs, _config(args, self.load, self.modes), extra)
        if args.plot:
            report.write_plot(args.plot, recorder.samples, title)
        for problem in verdict["problems"]:
            say(self.err, problem)
        return 0 if verdict["passed"] else 1


async def batch_totals(client: Any) -> dict[str, tuple[float, float]]:
    """Per model, the server's count of batched requests and the sum of their batches' rows (from
    ``/metrics``; empty when the server does not say)."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        response = await client.get("/metrics")
        text = response.text if response.status_code == 200 else ""
    except Exception:  # the load still ran: only this summary is missing
        return {}
    totals: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "poolserve_batch_size":
            continue
        for sample in family.samples:
            model = sample.labels.get("model", "")
            if sample.name.endswith("_count"):
                totals.setdefault(model, [0.0, 0.0])[0] = sample.value
            elif sample.name.endswith("_sum"):
                totals.setdefault(model, [0.0, 0.0])[1] = sample.value
    return {model: (n, rows) for model, (n, rows) in totals.items()}


def say(console: Console, message: str, kind: str = "") -> None:
    """One unwrapped line on stderr: ``poolserve loadtest: message``, or ``warning: ...``/``note: ...``."""
    line = Text(f"{kind}: ", style="yellow") if kind else Text("poolserve loadtest: ")
    line.append(message)
    console.print(line, soft_wrap=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    notes = check_args(parser, args)
    out, err = Console(), Console(stderr=True)
    for note in notes:
        say(err, note, "note")
    try:
        if args.plot:
            report.check_plotting()
        # before the load, not after it: a typo in a folder name cost the whole run
        for flag, path in (("--report", args.report), ("--plot", args.plot)):
            if path:
                report.check_writable(flag, path)
        return asyncio.run(Runner(args, out, err).run())
    except LoadtestError as e:
        say(err, str(e))
        return 1
    except KeyboardInterrupt:
        say(err, "interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
