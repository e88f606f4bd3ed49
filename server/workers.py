"""``poolserve serve --workers N``: N worker processes serving one port.

The supervisor (the process started) loads no model. It reserves the ports (HTTP and gRPC), makes a
runtime folder (prometheus-client's multiprocess files, the shared RunHandlerPool flag, each worker's
statistics, the repository calls every worker applies), forks the workers, restarts one that dies, and on
SIGTERM (or SIGINT) passes the signal on and waits for every worker to drain, answering new connections 503
meanwhile; it exits 0 when they did.
Each worker binds its own listening socket to the port with SO_REUSEPORT (the kernel spreads new
connections over the workers' sockets), loads the models and runs exactly the single-process server
(``cli.run_server``: same middleware, same drain on SIGTERM), with the pool's threads and the BLAS threads
sized to its share of the cores.

uvicorn's own supervisor (uvicorn.supervisors.Multiprocess, 0.54) restarts dead workers too, but runs a
plain ``uvicorn.Server`` from an import string on one shared socket: no hook for our per-worker set-up or
our drain, and no SO_REUSEPORT. The workers are forked (not spawned) from this process, which has
started no thread and imported prometheus-client only once its multiprocess variable was set: forking is
fast and safe here.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import importlib
import json
import logging
import mmap
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from poolserve.runtime.errors import (
    DeadlineExceededError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    OpError,
)
from poolserve.server.config import Config, ConfigError, config_source, load_config
from poolserve.server.trace_db import resolve_path

if TYPE_CHECKING:
    from poolserve.server.repository import Repository

log = logging.getLogger("poolserve")

WORKER_HEADER = "X-Poolserve-Worker"  # every answer of a worker of several names its pid
_POLL_S = 0.2
# a worker that dies this soon after loading is restarted only after a pause (a crash loop costs little)
_QUICK_DEATH_S = 1.0
# what a worker still draining gets beyond drain_seconds before it is killed
_STOP_GRACE_S = 10.0
_MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# how often a worker looks whether another one took a repository call (a read of a mapped counter)
_CALLS_POLL_S = 0.05
# how long the worker answering a repository call waits for the others to have applied it (a load may
# take this long in each: they load at once, on their shares of the cores)
CALLS_WAIT_S = 120.0
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
# while the workers drain, what a new connection gets from the supervisor (it reads no more than this
# long from one client: it answers them one by one)
_ANSWER_TIMEOUT_S = 0.2
_UNAVAILABLE_BODY = b'{"error":"The server is shutting down; retry later","code":"UNAVAILABLE"}'
_UNAVAILABLE = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(_UNAVAILABLE_BODY), _UNAVAILABLE_BODY)
)


def core_share(workers: int) -> int:
    """Threads each worker's pool and BLAS get: its share of the cores, at least one."""
    from poolserve.runtime.threadpool import usable_cores

    return max(1, usable_cores() // workers)


# --- what the workers share ------------------------------------------------------------------------------


class SharedFlag:
    """One byte in a file every worker maps: the RunHandlerPool default that ``PUT
    /v1/runtime/run_handler_pool`` sets. A write through one worker's map is what every other reads next
    (MAP_SHARED, one page cache), with no system call per read."""

    def __init__(self, path: Path) -> None:
        with path.open("r+b") as f:
            self._map = mmap.mmap(f.fileno(), 1)

    @staticmethod
    def create(path: Path, enabled: bool) -> None:
        path.write_bytes(bytes([int(enabled)]))

    @property
    def enabled(self) -> bool:
        return self._map[0] == 1

    @enabled.setter
    def enabled(self, value: bool) -> None:
        self._map[0] = int(value)


class SharedCounter:
    """Eight bytes in a file every worker maps, as ``SharedFlag``: the number of the last repository call."""

    def __init__(self, path: Path) -> None:
        with path.open("r+b") as f:
            self._map = mmap.mmap(f.fileno(), 8)

    @staticmethod
    def create(path: Path) -> None:
        path.write_bytes(bytes(8))

    @property
    def value(self) -> int:
        return int.from_bytes(self._map[:8], "little")

    @value.setter
    def value(self, value: int) -> None:
        self._map[:8] = value.to_bytes(8, "little")


class SharedCalls:
    """Repository load and unload calls made through any worker reach every worker, as the pool toggle does
    (a file in the runtime folder every worker maps).

    The worker answering a call applies it, writes it to ``repository.json`` (each model's last call and its
    number, the state a worker started later takes up: a model unloaded by a call stays unloaded) and
    bumps the counter in ``repository.seq``; every worker's watcher thread sees the counter move, applies
    the calls it has not, and writes what it made of them to ``repository/<pid>.json``. The answering worker
    waits (``CALLS_WAIT_S`` at most) for every live worker's file to show the call and answers which applied
    it. One call at a time (a lock file): each is applied everywhere in the order they were made."""

    def __init__(self, folder: Path, repository: Repository) -> None:
        self.folder = folder
        self.repository = repository
        self.counter = SharedCounter(folder / "repository.seq")
        self.mine = folder / "repository" / f"{os.getpid()}.json"
        self.applied = 0
        self._applying = threading.Lock()  # a call taken here, or the watcher applying others'

    @staticmethod
    def create(folder: Path) -> None:
        (folder / "repository").mkdir()
        (folder / "repository.json").write_text("{}")
        SharedCounter.create(folder / "repository.seq")

    def start(self) -> None:
        """Takes up the calls made before this worker started (it has loaded the configured models:
        the ones unloaded by a call are unloaded again) and starts watching for new ones."""
        # the counter read before the record: every call it counts is in the record (written before the
        # counter moves) or was dropped from it (left_config), so this worker has taken up all of them
        seen = self.counter.value
        calls = self._calls()
        for model, (_, verb) in sorted(calls.items(), key=lambda c: c[1][0]):
            if verb == "unload":
                try:
                    self._apply(verb, model)
                except OpError as e:  # a model since gone from the config: nothing to unload
                    log.info("repository call not taken up: %s", e.message)
        # not the last call recorded alone: with the last call's record dropped, the counter stayed ahead of
        # it and the watcher read the record every poll until the next call
        self.applied = max([seen, *(seq for seq, _ in calls.values())])
        self._ack("")
        self.repository.shared = self.call
        self.repository.on_leave = self.left_config
        threading.Thread(target=self._watch, name="poolserve-repository-calls", daemon=True).start()

    def call(self, verb: str, model: str) -> dict[str, Any]:
        """A load or unload call made through this worker: applied here, then by every other worker."""
        with (self.folder / "repository.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            with self._applying:
                error = ""
                try:
                    self._apply(verb, model)
                except (NotFoundError, InvalidArgumentError):
                    raise  # not in the config, or a config that does not validate: nothing changed anywhere
                except OpError as e:
                    error = e.message  # a model that failed to load here: the others try it too
                seq = self.counter.value + 1
                self._record(model, (seq, verb))
                self.applied = seq
                self._ack(error)
                self.counter.value = seq
            answers = self._wait(seq)
        workers = [
            {"pid": pid, "applied": err == "", "error": err or ""} for pid, err in sorted(answers.items())
        ]
        pending = ", ".join(str(pid) for pid, err in sorted(answers.items()) if err is None)
        failed = {pid: err for pid, err in answers.items() if err}
        if failed:
            why = "; ".join(f"worker {pid}: {err}" for pid, err in sorted(failed.items()))
            raise FailedPreconditionError(
                f"{verb} '{model}' failed in {len(failed)} of {len(answers)} workers ({why})"
                + (f"; worker(s) {pending} had not applied it after {CALLS_WAIT_S:g} s" if pending else "")
            )
        if pending:
            raise DeadlineExceededError(
                f"{verb} '{model}': worker(s) {pending} of {len(answers)} had not applied it after "
                f"{CALLS_WAIT_S:g} s (they will, once done with what they are doing)"
            )
        return {"workers": workers, "applied_by_all": True}

    def _record(self, model: str, call: tuple[int, str] | None) -> None:
        """Sets (or, None, drops) a model's last call in ``repository.json``, under a lock held only for
        this (a call holds the other one while it waits for the workers)."""
        with (self.folder / "repository.json.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            calls = self._calls()
            if call is None:
                if calls.pop(model, None) is None:
                    return
            else:
                calls[model] = call
            partial = self.folder / f"repository.json.{os.getpid()}"
            partial.write_text(json.dumps({m: list(c) for m, c in calls.items()}))
            os.replace(partial, self.folder / "repository.json")

    def left_config(self, model: str) -> None:
        """A model that left the config file: a call's record of it ends, so a worker started after it
        came back (it loads afresh in the others) loads it too, instead of taking up an old unload."""
        try:
            self._record(model, None)
        except (OSError, ValueError):
            log.exception("forgetting the repository calls of '%s' failed", model)

    def _apply(self, verb: str, model: str) -> None:
        if verb == "load":
            self.repository.load_here(model)
        else:
            self.repository.unload_here(model)

    def _calls(self) -> dict[str, tuple[int, str]]:
        raw = json.loads((self.folder / "repository.json").read_text())
        return {m: (int(seq), str(verb)) for m, (seq, verb) in raw.items()}

    def _ack(self, error: str) -> None:
        partial = self.mine.with_suffix(".tmp")
        partial.write_text(json.dumps({"applied": self.applied, "error": error}))
        os.replace(partial, self.mine)

    def _wait(self, seq: int) -> dict[int, str | None]:
        """Every live worker's answer to call ``seq``: "" applied, its error, or None not yet."""
        deadline = time.monotonic() + CALLS_WAIT_S
        while True:
            answers: dict[int, str | None] = {}
            for path in self.mine.parent.glob("*.json"):
                try:
                    ack = json.loads(path.read_text())
                except (OSError, ValueError):  # a worker gone (the supervisor removes its file)
                    continue
                answers[int(path.stem)] = ack["error"] if ack["applied"] >= seq else None
            if None not in answers.values() or time.monotonic() > deadline:
                return answers
            time.sleep(_CALLS_POLL_S)

    def _watch(self) -> None:
        while True:
            time.sleep(_CALLS_POLL_S)
            seen = self.counter.value  # before the record: as in start
            if seen <= self.applied:
                continue
            try:
                with self._applying:  # not while this worker applies a call it took
                    calls = sorted((seq, verb, m) for m, (seq, verb) in self._calls().items())
                    for seq, verb, model in (c for c in calls if c[0] > self.applied):
                        error = ""
                        try:
                            self._apply(verb, model)
                        except Exception as e:  # answered as this worker's error, never tried again
                            error = e.message if isinstance(e, OpError) else f"{type(e).__name__}: {e}"
                            if not isinstance(e, OpError):
                                log.exception("applying another worker's repository call failed")
                        self.applied = seq
                        self._ack(error)
                    if seen > self.applied:  # calls whose record was dropped: nothing left to apply
                        self.applied = seen
                        self._ack("")
            except Exception:  # the files unreadable for a moment: looked at again next round
                log.exception("reading the repository calls failed")


class WorkerHeader:
    """Adds ``X-Poolserve-Worker: <pid>`` to every answer (which worker served it)."""

    def __init__(self, app: ASGIApp, pid: int) -> None:
        self.app = app
        self.header = (WORKER_HEADER.lower().encode(), str(pid).encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_header(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), self.header]
            await send(message)

        await self.app(scope, receive, send_with_header)


@dataclass
class Worker:
    """What a worker process needs from its supervisor; used on the worker's side of the fork."""

    index: int
    host: str
    port: int
    runtime_dir: Path
    # the worker sends "loaded" once its models are loaded and it listens on both ports: a worker that
    # exits before could not start, and every replacement would fail the same way
    ready: multiprocessing.connection.Connection

    def attach(self, app: Any) -> None:
        """Makes a freshly created app one worker of several (called by ``cli.run_server``)."""
        service = app.state.service
        service.pool_default = SharedFlag(self.runtime_dir / "run_handler_pool")
        # each worker's statistics, added up by whichever worker answers for them
        service.statistics.share(
            self.runtime_dir / "statistics",
            lambda: [(e.name, e.version, e.stats) for e in service.list_models()],
        )
        # the repository calls made through any worker reach every worker; this one takes up those made
        # before it started
        SharedCalls(self.runtime_dir, service.repository).start()
        app.add_middleware(WorkerHeader, pid=os.getpid())
        # the answers admission gives from the protocol, without the app, name the worker too
        app.state.early_admission.extra_headers.append(
            (WORKER_HEADER.lower().encode(), str(os.getpid()).encode())
        )

    def started(self) -> None:
        """Called by the server once it serves (both ports bound): tells the supervisor."""
        self.ready.send("loaded")

    def sockets(self) -> list[socket.socket]:
        """This worker's listening socket: its own, on the shared port."""
        return [reuseport_socket(self.host, self.port)]


def reuseport_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _reserve(host: str, port: int) -> socket.socket:
    """A socket that holds the port while workers come and go (bound, and listening only during the
    drain: until then it takes no connections). A plain bind first: SO_REUSEPORT alone would let this
    server share the port with another one of the same user already on it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))
        port = probe.getsockname()[1]
    return reuseport_socket(host, port)


def _drain_when_orphaned(supervisor: int) -> None:
    """A supervisor killed outright (kill -9) leaves no worker behind: Linux sends each a SIGTERM (they
    drain) when it goes."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: orphans keep serving until stopped
        return
    if os.getppid() != supervisor:  # it went before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)


def _worker_main(
    worker: Worker, config: Config, args: argparse.Namespace, share: int, supervisor: int
) -> None:
    """The worker process: the single-process server on its own socket."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)  # the supervisor's handlers are not ours
    _drain_when_orphaned(supervisor)
    from threadpoolctl import threadpool_limits

    from poolserve.runtime import threadpool
    from poolserve.server import cli

    # the models of the config file as it is now: a worker started later (a replacement) loads what the
    # others have taken from the file since the supervisor read it (they poll it, and a load call re-reads it)
    source = config_source(config)
    if source is not None:
        try:
            config.models = load_config(source).models
        except ConfigError as e:  # as the others, it keeps the last models that validated
            log.error("config file change not applied: %s", e)
    # BLAS's own thread count is what KernelThreads takes for a whole process: the share, not every core
    limits = threadpool_limits(limits=share, user_api="blas")
    threadpool.share_cores(share)
    try:
        code = cli.run_server(config, args, worker)
    finally:
        del limits
    sys.exit(code)


# --- the supervisor --------------------------------------------------------------------------------------


class _Slot:
    def __init__(self, index: int) -> None:
        self.index = index
        self.process: Any = None
        self.ready: multiprocessing.connection.Connection | None = None
        self.loaded_at = 0.0  # when its worker said its models were loaded (0: not yet)
        self.restart_at = 0.0


class Supervisor:
    def __init__(
        self,
        config: Config,
        args: argparse.Namespace,
        workers: int,
        runtime_dir: Path,
        reserved: socket.socket,
    ) -> None:
        self.config = config
        self.args = args
        self.runtime_dir = runtime_dir
        self.reserved = reserved
        self.listening = False
        self.metrics_dir = runtime_dir / "metrics"
        self.share = core_share(workers)
        self.slots = [_Slot(i) for i in range(workers)]
        self.stopping = False
        self.failed: int | None = None  # exit code of a worker that could not start
        self._ctx = multiprocessing.get_context("fork")

    def start(self, slot: _Slot) -> None:
        receive, send = self._ctx.Pipe(duplex=False)
        worker = Worker(slot.index, self.config.server.host, self.config.server.port, self.runtime_dir, send)
        process = self._ctx.Process(
            target=_worker_main,
            args=(worker, self.config, self.args, self.share, os.getpid()),
            name=f"poolserve-worker-{slot.index}",
        )
        process.start()
        send.close()
        slot.process, slot.ready, slot.loaded_at, slot.restart_at = process, receive, 0.0, 0.0
        log.info("worker %d started (pid %d)", slot.index, process.pid)

    def stop(self, signum: int, frame: FrameType | None) -> None:
        if not self.stopping:
            log.info("supervisor: %s, draining the workers", signal.Signals(signum).name)
            self._listen()
        self.stopping = True
        for slot in self.slots:
            if slot.process is not None and slot.process.is_alive():
                os.kill(slot.process.pid, signal.SIGTERM)

    def run(self) -> int:
        for slot in self.slots:
            self.start(slot)
        while not self.stopping and self.failed is None:
            waitables: list[Any] = [s.process.sentinel for s in self.slots if s.process is not None]
            waitables += [s.ready for s in self.slots if s.ready is not None and not s.loaded_at]
            multiprocessing.connection.wait(waitables, timeout=_POLL_S)
            if not self.stopping:
                self._check()
        return self._drain()

    def _check(self) -> None:
        now = time.monotonic()
        for slot in self.slots:
            process = slot.process
            if process is None:
                if now >= slot.restart_at:
                    self.start(slot)
                continue
            if not slot.loaded_at and slot.ready is not None and slot.ready.poll():
                try:
                    slot.ready.recv()
                    slot.loaded_at = now
                except EOFError:  # it exits without having loaded: seen below
                    pass
            if process.is_alive():
                continue
            process.join()
            self._forget(process.pid)
            if slot.ready is not None:  # at its end of file now: no longer worth waiting on
                slot.ready.close()
                slot.ready = None
            code = process.exitcode
            if not slot.loaded_at and code is not None and code > 0:
                # a model that does not load, a port taken: every restart would fail the same way
                log.error("worker %d exited with %d while starting; stopping", slot.index, code)
                self.failed = code
                self.stop(signal.SIGTERM, None)
                return
            log.warning("worker %d (pid %d) died (exit %s); starting another", slot.index, process.pid, code)
            quick = slot.loaded_at and now - slot.loaded_at < _QUICK_DEATH_S
            slot.process = None
            slot.restart_at = now + (_QUICK_DEATH_S if quick else 0.0)
            if not quick:
                self.start(slot)

    def _forget(self, pid: int) -> None:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid, str(self.metrics_dir))  # type: ignore[no-untyped-call]
        # a repository call waits for the live workers only (a replacement takes the calls up as it starts)
        (self.runtime_dir / "repository" / f"{pid}.json").unlink(missing_ok=True)

    def _listen(self) -> None:
        """The reserved socket joins the port's listeners: as the workers close theirs to drain, new
        connections reach this one and are answered 503, not refused."""
        try:
            self.reserved.listen(128)
            self.reserved.setblocking(False)
            self.listening = True
        except OSError as e:
            log.warning("supervisor: new connections will be refused while draining: %s", e)

    def _answer_unavailable(self) -> None:
        try:
            conn, _ = self.reserved.accept()
        except OSError:  # taken by a worker's socket after all, or gone
            return
        with conn:
            conn.settimeout(_ANSWER_TIMEOUT_S)
            try:
                conn.recv(65536)  # the request, as far as it came: closing on unread data would reset
                conn.sendall(_UNAVAILABLE)
                conn.shutdown(socket.SHUT_WR)
                while conn.recv(65536):  # until the client closes (or the timeout)
                    pass
            except OSError:
                pass

    def _drain(self) -> int:
        deadline = time.monotonic() + self.config.server.drain_seconds + _STOP_GRACE_S
        processes = [slot.process for slot in self.slots if slot.process is not None]
        while time.monotonic() < deadline:
            alive = [p for p in processes if p.is_alive()]
            if not alive:
                break
            waitables: list[Any] = [p.sentinel for p in alive]
            if self.listening:
                waitables.append(self.reserved)
            for ready in multiprocessing.connection.wait(waitables, timeout=_POLL_S):
                if ready is self.reserved:
                    self._answer_unavailable()
        codes: list[int | None] = []
        for process in processes:
            if process.is_alive():
                log.error("worker (pid %d) did not drain in time; killing it", process.pid)
                process.kill()
            process.join(5.0)
            self._forget(process.pid)
            codes.append(process.exitcode)
        if self.failed is not None:
            return self.failed
        # 130: a worker that got Ctrl-C's SIGINT itself (the terminal signals the whole group) and drained;
        # -SIGTERM: one the signal reached before it had set its handlers, serving nothing yet
        return 0 if all(c in (0, 130, -signal.SIGTERM) for c in codes) else 1


_RUNTIME_PREFIX = "poolserve-"
_PID_FILE = "supervisor.pid"


def remove_stale_runtime_dirs(root: Path) -> list[Path]:
    """Removes the runtime folders under ``root`` whose supervisor is gone (one killed outright could not
    remove its own) and returns them. A folder without a pid file is left alone: not known to be ours."""
    removed = []
    for folder in root.glob(f"{_RUNTIME_PREFIX}*"):
        try:
            pid = int((folder / _PID_FILE).read_text())
            os.kill(pid, 0)
        except (OSError, ValueError) as e:
            if not isinstance(e, ProcessLookupError):  # no pid file, or its process lives (maybe not ours)
                continue
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def supervise(config: Config, args: argparse.Namespace, workers: int) -> int:
    """Runs ``workers`` worker processes on config.server's host and port until SIGTERM; the exit code."""
    if "prometheus_client" in sys.modules:
        # its value class (one process or many) is fixed at import: it must see the variable first
        print("poolserve: cannot run workers: prometheus_client was imported too early", file=sys.stderr)
        return 1
    host = config.server.host
    try:
        reserved = _reserve(host, config.server.port)
    except OSError as e:
        print(f"poolserve: cannot listen on {host}:{config.server.port}: {e.strerror}", file=sys.stderr)
        return 1
    config.server.port = reserved.getsockname()[1]
    # the gRPC port too: the workers bind it with SO_REUSEPORT, which alone would let a second server
    # share it (and its calls) with this one, or leave the workers failing on a port another program holds
    reserved_grpc = None
    if config.server.grpc_port:
        try:
            reserved_grpc = _reserve(host, config.server.grpc_port)
        except OSError as e:
            reserved.close()
            print(
                f"poolserve: cannot listen for gRPC on {host}:{config.server.grpc_port}: {e.strerror}",
                file=sys.stderr,
            )
            return 1
        config.server.grpc_port = reserved_grpc.getsockname()[1]
    # "auto" traces: the file of the port reserved (not of port 0, which every such server would share)
    config.traces.path = resolve_path(config.traces, config.server.port)
    if config.traces.path == ":memory:":
        log.warning("traces kept in memory: each worker finds only the traces it recorded")
    for stale in remove_stale_runtime_dirs(Path(tempfile.gettempdir())):
        log.info("removed %s: its supervisor is gone", stale)
    runtime_dir = Path(tempfile.mkdtemp(prefix=_RUNTIME_PREFIX))
    (runtime_dir / _PID_FILE).write_text(str(os.getpid()))
    (runtime_dir / "metrics").mkdir()
    os.environ[_MULTIPROC_ENV] = str(runtime_dir / "metrics")
    # the app's modules (FastAPI, prometheus-client in its multiprocess mode now, the runtime's kernels)
    # imported once here: each worker, and each replacement, starts without importing them (about 1 s
    # each on this machine) and shares their pages. Importing them starts no thread.
    importlib.import_module("poolserve.server.app")
    SharedFlag.create(runtime_dir / "run_handler_pool", config.run_handler_pool.enabled)
    SharedCalls.create(runtime_dir)
    supervisor = Supervisor(config, args, workers, runtime_dir, reserved)
    previous = {sig: signal.signal(sig, supervisor.stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    log.info(
        "poolserve: %d workers on %s:%d, %d thread(s) each",
        workers,
        host,
        config.server.port,
        supervisor.share,
    )
    try:
        return supervisor.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        reserved.close()
        if reserved_grpc is not None:
            reserved_grpc.close()
        os.environ.pop(_MULTIPROC_ENV, None)
        shutil.rmtree(runtime_dir, ignore_errors=True)
