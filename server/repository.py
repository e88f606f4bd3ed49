"""The model lifecycle, as TF Serving's manager and Triton's repository run it: versions, states, polling.

For every model name in the config the repository keeps its servables (one per version) and their state
(TF Serving's LOADING, AVAILABLE, UNLOADING, END; a failed load is END with its error). What a name offers:

- a SavedModel base path (numbered version folders): the folders its ``version_policy`` picks (the
  ``latest`` N, default 1; ``all``; ``specific`` versions), or the configured ``version``;
- otherwise each ``[[models]]`` entry of the name (a ``.pb`` file or one version folder) is one version.

A poller thread looks at the files (every ``[server] poll_seconds``, or the model's
``file_system_poll_wait_seconds``) and the config file. A new or changed version loads in that thread and
starts serving once loaded; a version the files or the policy no longer offer stops taking new requests at
once and is closed when the requests holding it have finished (``hold``). A version that fails to load
leaves the others serving (under ``latest`` N an older loaded version keeps its place) and its error is in
the status; its files are tried again when they change, or on a repository load call.

Only the event loop reads ``models`` (the available entries by name and version, the service's lookup
table); the poller replaces a name's inner dict whole, so a lookup sees the old versions or the new ones.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from poolserve.runtime.errors import (
    Code,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    OpError,
    UnavailableError,
)
from poolserve.runtime.saved_model import resolve_version, versions
from poolserve.server.config import Config, ConfigError, ModelConfig, config_source, load_config
from poolserve.server.models import ModelEntry, load_model

log = logging.getLogger("poolserve")

STABLE_LABEL = "stable"
# how often a retired version looks whether its last request has finished
_DRAIN_CHECK_SECONDS = 0.005
# how long a change to the table waits for the event loop before it is made from the poller thread
_LOOP_WAIT_SECONDS = 5.0

Fingerprint = tuple[Any, ...]


class State(enum.StrEnum):
    """TF Serving's ModelVersionStatus states."""

    LOADING = "LOADING"
    AVAILABLE = "AVAILABLE"
    UNLOADING = "UNLOADING"
    END = "END"


# Triton's repository index states
_TRITON_STATE = {
    State.LOADING: "LOADING",
    State.AVAILABLE: "READY",
    State.UNLOADING: "UNLOADING",
    State.END: "UNAVAILABLE",
}


@dataclass
class Servable:
    """One version of a model: the entry serving it (kept while a reload of it loads or fails) and the
    last load error."""

    version: int
    state: State = State.LOADING
    entry: ModelEntry | None = None
    fingerprint: Fingerprint | None = None  # of the files ``entry`` was loaded from
    error: OpError | None = None
    failed: Fingerprint | None = None  # of the files whose load failed: not tried again until they change


@dataclass
class Source:
    """A version the config and the files offer: the config that loads it and its files' fingerprint."""

    version: int
    config: ModelConfig
    fingerprint: Fingerprint


@dataclass
class Model:
    name: str
    configs: list[ModelConfig]
    servables: dict[int, Servable] = field(default_factory=dict)
    unloaded: bool = False  # by a repository unload call: polling leaves it alone until a load call
    unloaded_versions: list[int] = field(default_factory=list)  # the versions that call took out of service
    reason: str = ""  # why it offers nothing (its path is gone, ...)
    files_error: str = ""  # why its files could not be listed at the last poll (logged when it changes)
    next_poll: float = 0.0

    @property
    def labels(self) -> dict[str, int]:
        return self.configs[0].labels

    @property
    def poll_seconds(self) -> float | None:
        return self.configs[0].file_system_poll_wait_seconds


def fingerprint(name: str, path: Path) -> Fingerprint:
    """What changes when a model's files are replaced: a file's or a SavedModel's files' mtime and size.
    NotFoundError when ``path`` is gone, also when it goes while it is read: a fingerprint of nothing would
    look like a change and start a load that cannot succeed."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    out: list[Any] = [str(path)]
    for f in files:
        try:
            st = f.stat()
        except OSError:
            continue  # removed while we looked: the next poll sees the folder as it is then
        out.append((str(f.relative_to(path)) if f != path else "", st.st_mtime_ns, st.st_size))
    if not path.exists():
        raise NotFoundError(f"model '{name}': {path} not found")
    return tuple(out)


def _is_base_path(mc: ModelConfig) -> bool:
    """A SavedModel base path served by version policy (no version asked for in the config)."""
    path = mc.path
    if not path.is_dir() or (path / "saved_model.pb").is_file() or (path / "saved_model.pbtxt").is_file():
        return False
    return "version" not in mc.model_fields_set


def select(mc: ModelConfig, found: Sequence[int]) -> list[int]:
    """The versions of ``found`` that ``mc``'s version policy serves (default: the latest 1)."""
    policy = mc.version_policy
    if policy is None or policy.latest is not None:
        n = policy.latest if policy is not None and policy.latest is not None else 1
        return sorted(found)[-n:]
    if policy.all:
        return sorted(found)
    return sorted(v for v in found if v in set(policy.specific or ()))


def offered(configs: Sequence[ModelConfig]) -> tuple[dict[int, Source], set[int]]:
    """(the versions to serve, every version on disk) of a model's configs; OpError when a path is gone."""
    first = configs[0]
    if len(configs) == 1 and _is_base_path(first):
        found = versions(first.path)
        wanted = select(first, list(found))
        sources = {}
        for v in wanted:
            mc = first.model_copy(update={"path": found[v], "version": v})
            sources[v] = Source(v, mc, fingerprint(first.name, found[v]))
        return sources, set(found)
    sources = {}
    for mc in configs:
        if not mc.path.exists():
            raise NotFoundError(f"model '{mc.name}': {mc.path} not found")
        version = mc.version
        if mc.path.is_dir() or mc.path.name in ("saved_model.pb", "saved_model.pbtxt"):
            explicit = mc.version if "version" in mc.model_fields_set else None
            folder, number = resolve_version(mc.path, explicit)
            mc = mc.model_copy(update={"path": folder})
            version = number if number is not None else mc.version
        sources[version] = Source(version, mc, fingerprint(mc.name, mc.path))
    return sources, set(sources)


def _as_op_error(e: Exception) -> OpError:
    if isinstance(e, OpError):
        return e
    return OpError(f"{type(e).__name__}: {e}", code=Code.UNKNOWN)


# the entries the current request holds (``Repository.hold``): its later lookups find them even once they
# stop taking new requests
_held: ContextVar[dict[tuple[str, int | None], ModelEntry] | None] = ContextVar("held", default=None)


class _Hold:
    """A request's hold on a model entry (``Repository.hold``)."""

    __slots__ = ("_entry", "_name", "_repository", "_token", "_version")

    def __init__(self, repository: Repository, name: str, version: int | None, entry: ModelEntry) -> None:
        self._repository, self._name, self._version, self._entry = repository, name, version, entry

    def __enter__(self) -> ModelEntry:
        entry = self._entry
        self._repository._count_hold(entry, 1)
        outer = _held.get()
        held = dict(outer) if outer else {}
        held[(self._name, self._version)] = held[(self._name, entry.version)] = entry
        self._token = _held.set(held)
        return entry

    def __exit__(self, *exc: object) -> None:
        _held.reset(self._token)
        self._repository._count_hold(self._entry, -1)


class Repository:
    """The served models' versions and their states; polls their files and the config file."""

    def __init__(
        self,
        config: Config,
        models: dict[str, dict[int, ModelEntry]],
        prepare: Callable[[ModelEntry], None] = lambda entry: None,
    ) -> None:
        self.config = config
        self.models = models  # published: the available entries, read by lookups on the event loop
        self._prepare = prepare
        self._models: dict[str, Model] = {}
        self._lock = threading.RLock()  # one sync at a time (poller, load/unload calls)
        # set in each of several workers (server/workers.py): load and unload calls go through it to every
        # worker, given ("load"|"unload", name), and it answers what each worker made of the call
        self.shared: Callable[[str, str], dict[str, Any]] | None = None
        # told the name of a model that left the config file (there, a call's record of it ends)
        self.on_leave: Callable[[str], None] = lambda name: None
        self._holds: dict[int, int] = {}  # id(entry) -> requests holding it
        self._holds_lock = threading.Lock()
        self._retiring: list[ModelEntry] = []
        # the event loop serving requests (seen by the first hold): changes to ``models`` are made on it, so
        # no code iterating ``models`` there ever sees it change size midway
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None
        self._source = config_source(config)
        self._source_print = self._file_print(self._source)
        self.config_error = ""  # why the config file's last change was not applied

    # --- start and stop ----------------------------------------------------------------------------------

    def start(self) -> None:
        """Loads every configured model (blocking; a model that does not load raises, naming it), then
        starts polling."""
        with self._lock:
            for name, configs in _by_name(self.config.models).items():
                self._models[name] = Model(name, configs)
                self._sync(self._models[name], strict=True)
        if self._intervals():
            self._poller = threading.Thread(
                target=_poll_loop, args=(weakref.ref(self), self._stop), name="poolserve-poller", daemon=True
            )
            self._poller.start()

    def close(self) -> None:
        """Stops polling and closes every session, retired ones included."""
        self._stop.set()
        if self._poller is not None and self._poller is not threading.current_thread():
            self._poller.join(timeout=10)
        with self._lock:
            entries = [e for versions in self.models.values() for e in versions.values()]
            entries += [s.entry for m in self._models.values() for s in m.servables.values() if s.entry]
            entries += self._retiring
            for entry in {id(e): e for e in entries}.values():
                entry.session.close()

    # --- lookups (event loop) ----------------------------------------------------------------------------

    def lookup(self, name: str, version: int | None = None) -> ModelEntry:
        """The entry serving ``name`` (its latest available version by default). NotFoundError for a name or
        version the server does not have; UnavailableError, with the reason, for one it has not loaded."""
        held = _held.get()
        if held is not None:
            entry = held.get((name, version))
            if entry is not None:
                return entry
        versions = self.models.get(name)
        model = self._models.get(name)
        if not versions:
            if model is None:
                known = ", ".join(sorted(set(self.models) | set(self._models))) or "(none)"
                raise NotFoundError(f"Model '{name}' not found; the server has: {known}")
            raise UnavailableError(f"Model '{name}' has no version available: {self._why(model)}")
        entry = versions[max(versions)] if version is None else versions.get(version)
        if entry is None:
            servable = model.servables.get(version) if model is not None and version is not None else None
            if servable is not None:
                raise UnavailableError(
                    f"Model '{name}' version {version} is not available: {self._why_version(servable)}"
                )
            have = ", ".join(str(v) for v in sorted(versions))
            raise NotFoundError(f"Model '{name}' has no version {version}; it has: {have}")
        return entry

    def hold(self, name: str, version: int | None = None) -> _Hold:
        """``with repository.hold(name, version) as entry``: the entry for a request, kept open (and found
        by the request's later lookups) until the block ends, even if it stops taking new requests
        meanwhile. NotFoundError/UnavailableError as ``lookup``."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # the first request, or an app served by a new loop
            self._loop, self._loop_thread = loop, threading.get_ident()
        return _Hold(self, name, version, self.lookup(name, version))

    def _count_hold(self, entry: ModelEntry, delta: int) -> None:
        key = id(entry)
        with self._holds_lock:
            count = self._holds.get(key, 0) + delta
            if count:
                self._holds[key] = count
            else:
                del self._holds[key]

    def label_version(self, name: str, label: str) -> int:
        """The version a label names: the config's ``labels``; "stable" is the latest unless configured."""
        model = self._models.get(name)
        if model is None and name not in self.models:
            self.lookup(name)  # NotFoundError naming the models
        labels = model.labels if model is not None else {}
        if label in labels:
            version = labels[label]
            available = self.models.get(name, {})
            if version not in available:
                raise NotFoundError(
                    f"Label '{label}' of model '{name}' names version {version}, which is not available"
                )
            return version
        if label == STABLE_LABEL:
            return self.lookup(name).version
        have = ", ".join(sorted({*labels, STABLE_LABEL}))
        raise NotFoundError(f"Unrecognized servable version label: {label} (the labels: {have})")

    def labels(self, name: str, version: int) -> list[str]:
        """The config's labels naming this version."""
        model = self._models.get(name)
        return sorted(k for k, v in (model.labels if model is not None else {}).items() if v == version)

    # --- status ------------------------------------------------------------------------------------------

    def status(self, name: str, version: int | None = None) -> list[dict[str, Any]]:
        """TF Serving's model_version_status: every version of ``name`` (newest first) or the one asked
        for, with its state and load error."""
        model = self._models.get(name)
        if model is None:
            entry = self.lookup(name, version)  # NotFoundError; or a model added outside the repository
            known = [version] if version is not None else sorted(self.models[entry.name], reverse=True)
            return [_status(v, State.AVAILABLE, None) for v in known]
        servables = dict(model.servables)
        if version is not None:
            if version not in servables:
                self.lookup(name, version)  # NotFoundError naming the versions
            servables = {version: servables[version]}
        if not servables:
            raise UnavailableError(f"Model '{name}' has no version: {self._why(model)}")
        return [_status(v, s.state, s.error) for v, s in sorted(servables.items(), reverse=True)]

    def unready(self) -> str:
        """Why a model of the config does not serve as it should (Triton's strict readiness), or "": one
        with no version available, or a version that failed to load. A model unloaded by a repository call
        is as asked; a version loading or unloading beside one that serves is a swap, not a fault."""
        for name, model in dict(self._models).items():
            if model.unloaded:
                continue
            servables = dict(model.servables).values()
            if not self.models.get(name) or any(s.state is State.END for s in servables):
                return f"model '{name}' is not ready: {self._why(model)}"
        return ""

    def index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        """Triton's repository index: every configured model's versions with state and reason."""
        rows: list[dict[str, Any]] = []
        for name, model in sorted(dict(self._models).items()):
            for v, s in sorted(dict(model.servables).items()):
                reason = s.error.message if s.error is not None else ""
                row: dict[str, Any] = {
                    "name": name,
                    "version": str(v),
                    "state": _TRITON_STATE[s.state],
                    "reason": reason,
                }
                labels = self.labels(name, v)
                if labels:
                    row["labels"] = labels  # ours: the config's labels naming this version
                rows.append(row)
            if not model.servables:
                # after an unload call, each version it unloaded, as Triton lists them; else the name alone
                why = self._why(model)
                rows += [
                    {"name": name, "version": str(v), "state": "UNAVAILABLE", "reason": why}
                    for v in model.unloaded_versions
                ] or [{"name": name, "state": "UNAVAILABLE", "reason": why}]
        if ready_only:
            rows = [r for r in rows if r["state"] == "READY"]
        return rows

    # --- repository calls (run them off the event loop: they load) ---------------------------------------

    def load(self, name: str) -> dict[str, Any] | None:
        """Triton's load: (re)loads every version ``name`` offers (re-reading the config file first).
        NotFoundError for a name not in the config; FailedPreconditionError when no version loads;
        InvalidArgumentError, naming the error, when the config file does not validate (nothing loads).
        In a worker of several, every worker's (``shared``): what each made of it, or the error."""
        if self.shared is not None:
            return self.shared("load", name)
        self.load_here(name)
        return None

    def unload(self, name: str) -> dict[str, Any] | None:
        """Triton's unload: the model stops taking requests now, each version closes once its requests end.
        In a worker of several, every worker's, as ``load``."""
        if self.shared is not None:
            return self.shared("unload", name)
        self.unload_here(name)
        return None

    def load_here(self, name: str) -> None:
        """``load`` in this process only."""
        with self._lock:
            self._check_config(force=True)
            if self.config_error:
                # the caller changed the file and asked for it to be applied: say why it was not
                raise InvalidArgumentError(f"not loading '{name}': {self.config_error}")
            model = self._models.get(name)
            if model is None:
                known = ", ".join(sorted(self._models)) or "(none)"
                raise NotFoundError(f"Model '{name}' is not in the config; it has: {known}")
            model.unloaded, model.unloaded_versions = False, []
            self._sync(model, force=True)
            failed = [s for s in model.servables.values() if s.error is not None]
            if failed or not self.models.get(name):
                why = "; ".join(f"version {s.version}: {s.error.message}" for s in failed if s.error)
                raise FailedPreconditionError(f"failed to load '{name}': {why or self._why(model)}")

    def unload_here(self, name: str) -> None:
        """``unload`` in this process only."""
        with self._lock:
            model = self._models.get(name)
            if model is None:
                known = ", ".join(sorted(self._models)) or "(none)"
                raise NotFoundError(f"Model '{name}' is not in the config; it has: {known}")
            model.unloaded = True
            model.reason = "unloaded by a repository call"
            # a repeated call finds nothing loaded: the versions the first one took out stay listed
            loaded = {v for v, s in model.servables.items() if s.entry is not None}
            model.unloaded_versions = sorted(loaded.union(model.unloaded_versions))
            for version in list(model.servables):
                self._retire(model, version)
            self._publish(model)

    # --- polling -----------------------------------------------------------------------------------------

    def _intervals(self) -> list[float]:
        default = self.config.server.poll_seconds
        out = [default] if self._source is not None and default > 0 else []
        for model in self._models.values():
            seconds = model.poll_seconds if model.poll_seconds is not None else default
            if seconds > 0:
                out.append(seconds)
        return out

    def poll(self) -> float:
        """One round: the config file, then each model due; returns the seconds until the next round."""
        now = time.monotonic()
        with self._lock:
            if self.config.server.poll_seconds > 0:
                self._check_config()
            default = self.config.server.poll_seconds
            for model in list(self._models.values()):
                seconds = model.poll_seconds if model.poll_seconds is not None else default
                if seconds <= 0 or model.unloaded or now < model.next_poll:
                    continue
                model.next_poll = now + seconds
                self._sync(model)
        return min(self._intervals(), default=1.0)

    def _file_print(self, path: Path | None) -> Fingerprint | None:
        if path is None:
            return None
        try:
            st = path.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def _check_config(self, force: bool = False) -> None:
        """Applies the config file's models when it changed: new names load, removed ones unload, changed
        ones reload. A config that does not validate changes nothing (``config_error`` says why)."""
        if self._source is None:
            return
        now = self._file_print(self._source)
        if now is None or (now == self._source_print and not force):
            return
        self._source_print = now
        try:
            new = load_config(self._source)
        except ConfigError as e:
            self.config_error = str(e)
            log.error("config file change not applied: %s", e)
            return
        self.config_error = ""
        wanted = _by_name(new.models)
        for name in [n for n in self._models if n not in wanted]:
            log.info("model '%s' left the config: unloading it", name)
            gone = self._models.pop(name)
            for version in list(gone.servables):
                self._retire(gone, version)
            self._publish(gone)
            self.on_leave(name)
        for name, configs in wanted.items():
            model = self._models.get(name)
            if model is None:
                log.info("model '%s' joined the config: loading it", name)
                self._models[name] = model = Model(name, configs)
                self._sync(model)
            elif _loading(configs) != _loading(model.configs):
                log.info("model '%s' changed in the config: reloading it", name)
                model.configs = configs
                if not model.unloaded:
                    self._sync(model, force=True)
            elif [c.model_dump() for c in configs] != [c.model_dump() for c in model.configs]:
                model.configs = configs  # labels, version policy, poll interval: no reload
                if not model.unloaded:
                    self._sync(model)
        self.config.models = new.models

    # --- syncing a model with its files ------------------------------------------------------------------

    def _sync(self, model: Model, force: bool = False, strict: bool = False) -> None:
        """Loads the versions the files offer that are new or changed, then retires the ones no longer
        offered. ``force`` reloads every offered version; ``strict`` raises the first load error."""
        try:
            sources, present = offered(model.configs)
        except OpError as e:
            if strict:
                raise
            model.reason = e.message
            serving = any(s.state is State.AVAILABLE for s in model.servables.values())
            why = "{} ({})".format(
                e.message.removeprefix(f"model '{model.name}': "),
                "its loaded versions keep serving" if serving else "no version of it is loaded",
            )
            if why != model.files_error:  # once per change, not at every poll
                model.files_error = why
                log.error("model '%s': %s", model.name, why)
            return
        if model.files_error:
            log.info("model '%s': its files are found again", model.name)
            model.files_error = ""
        model.reason = "" if sources else "no version on disk matches its version policy"
        if strict and not sources:
            try:
                resolve_version(model.configs[0].path)  # NotFoundError saying what the folder lacks
            except OpError as e:
                raise type(e)(f"model '{model.name}': {e.message}") from None
            raise NotFoundError(f"model '{model.name}': {model.reason} (versions on disk: {sorted(present)})")
        for version in sorted(sources, reverse=True):  # the newest first: it is the one most requests get
            self._load_version(model, sources[version], force, strict)
        keep = {v for v in sources if self._available(model, v)}
        policy = model.configs[0].version_policy
        latest = 1 if policy is None else policy.latest
        if latest is not None and len(keep) < latest:
            # a newer version that failed: an older one still loaded and still on disk keeps serving
            older = [v for v in present - keep if self._available(model, v)]
            keep.update(sorted(older, reverse=True)[: latest - len(keep)])
        for version, s in list(model.servables.items()):
            if s.state is State.UNLOADING or version in keep:
                continue
            if version not in sources or s.state is State.AVAILABLE:
                self._retire(model, version)
        self._publish(model)

    def _available(self, model: Model, version: int) -> bool:
        s = model.servables.get(version)
        return s is not None and s.state is State.AVAILABLE

    def _load_version(self, model: Model, source: Source, force: bool, strict: bool) -> None:
        s = model.servables.get(source.version)
        if s is not None and s.state is State.UNLOADING:
            s = None  # offered again while it drains: a fresh load (the draining one closes as planned)
        if s is not None and not force:
            if s.state is State.AVAILABLE and s.fingerprint == source.fingerprint:
                return
            if s.failed == source.fingerprint:
                return  # tried, and the files have not changed since
        if s is None or s.state is not State.AVAILABLE:
            s = model.servables[source.version] = Servable(source.version)
        log.info("model '%s': loading version %d from %s", model.name, source.version, source.config.path)
        try:
            entry = load_model(source.config, self.config)
        except Exception as e:
            if strict:
                raise
            s.error, s.failed = _as_op_error(e), source.fingerprint
            if s.entry is None:
                s.state = State.END
            log.error("model '%s' version %d did not load: %s", model.name, source.version, s.error.message)
            return
        entry.version = source.version
        self._prepare(entry)
        old = s.entry
        s.entry, s.state, s.fingerprint = entry, State.AVAILABLE, source.fingerprint
        s.error = s.failed = None
        if old is not None:  # a reload of the same version: the old entry drains, the new one serves
            self._publish(model)
            self._drain(old)

    def _publish(self, model: Model) -> None:
        """Makes ``models`` show the model's available versions, on the event loop when there is one (and
        returns once it does: a version retired next is out of every later lookup)."""
        available = {v: s.entry for v, s in model.servables.items() if s.state is State.AVAILABLE and s.entry}
        listed = model.name in self._models

        def apply() -> None:
            if available and listed:
                self.models[model.name] = available
            else:
                self.models.pop(model.name, None)

        loop = self._loop
        if loop is None or not loop.is_running() or threading.get_ident() == self._loop_thread:
            apply()  # no loop reads the table now (or this is it)
            return
        applied = threading.Event()

        def on_loop() -> None:
            apply()
            applied.set()

        try:
            loop.call_soon_threadsafe(on_loop)
        except RuntimeError:  # the loop is closed: nothing reads the table concurrently any more
            apply()
            return
        deadline = time.monotonic() + _LOOP_WAIT_SECONDS
        while not applied.wait(0.05):
            # a loop that stopped, or is closing us, never runs the callback (it would apply the same table)
            if self._stop.is_set() or time.monotonic() > deadline:
                apply()
                return

    def _retire(self, model: Model, version: int) -> None:
        """Takes a version out of service: it stops taking new requests now (once published) and closes
        when the requests holding it have finished."""
        s = model.servables[version]
        if s.entry is None:
            del model.servables[version]  # failed and no longer offered
            return
        s.state = State.UNLOADING
        log.info("model '%s': unloading version %d", model.name, version)
        entry = s.entry

        def done() -> None:
            with self._lock:
                if model.servables.get(version) is s:
                    del model.servables[version]

        self._publish(model)
        self._drain(entry, done)

    def _drain(self, entry: ModelEntry, done: Callable[[], None] = lambda: None) -> None:
        self._retiring.append(entry)
        threading.Thread(
            target=self._close_when_idle, args=(entry, done), name="poolserve-unload", daemon=True
        ).start()

    def _close_when_idle(self, entry: ModelEntry, done: Callable[[], None]) -> None:
        """Closes the entry once no request holds it and no step of it runs (at most drain_seconds)."""
        deadline = time.monotonic() + self.config.server.drain_seconds
        while time.monotonic() < deadline and not self._stop.is_set():
            if not self._holds.get(id(entry)) and entry.session.steps_running == 0:
                break
            time.sleep(_DRAIN_CHECK_SECONDS)
        entry.session.close()
        with self._lock:
            self._retiring = [e for e in self._retiring if e is not entry]
        done()
        log.info("model '%s': version %d unloaded", entry.name, entry.version)

    def _why(self, model: Model) -> str:
        servables = list(dict(model.servables).values())  # the poller may change the dict meanwhile
        failed = [s for s in servables if s.error is not None]
        if failed:
            return "; ".join(f"version {s.version}: {self._why_version(s)}" for s in failed)
        if any(s.state is State.LOADING for s in servables):
            return "it is loading"
        return model.reason or "it is not loaded"

    def _why_version(self, s: Servable) -> str:
        if s.error is not None:
            return f"it failed to load: {s.error.message}"
        states = {State.LOADING: "it is loading", State.UNLOADING: "it is unloading"}
        return states.get(s.state, "it is unloaded")


def _status(version: int, state: State, error: OpError | None) -> dict[str, Any]:
    code = Code(error.code).name if error is not None else "OK"
    return {
        "version": str(version),
        "state": state.value,
        "status": {"error_code": code, "error_message": error.message if error is not None else ""},
    }


# the keys that only choose among loaded versions: a change to them reloads nothing
_CHOOSING = frozenset({"labels", "version_policy", "file_system_poll_wait_seconds"})


def _loading(configs: Sequence[ModelConfig]) -> list[dict[str, Any]]:
    """What a model's versions are loaded with: a change here reloads them."""
    return [c.model_dump(exclude=set(_CHOOSING)) for c in configs]


def _by_name(configs: Sequence[ModelConfig]) -> dict[str, list[ModelConfig]]:
    out: dict[str, list[ModelConfig]] = {}
    for mc in configs:
        out.setdefault(mc.name, []).append(mc)
    return out


def _poll_loop(ref: weakref.ref[Repository], stop: threading.Event) -> None:
    """The poller thread; it ends with ``close()`` or when its repository is gone."""
    wait = 0.0
    while not stop.wait(wait):
        repository = ref()
        if repository is None:
            return
        try:
            wait = max(0.01, repository.poll())
        except Exception:  # a poll that failed in an unforeseen way must not end polling
            log.exception("polling the model files failed")
            wait = 1.0
        del repository


__all__ = ["Repository", "State", "offered", "select"]
