"""server/config.py: loading a TOML file, its defaults, relative model paths, environment overrides, and
errors that name the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from poolserve.server.config import ConfigError, load_config


def test_load_config_file_relative_paths_and_defaults(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    path = tmp_path / "sub" / "server.toml"
    path.write_text(
        """
[server]
port = 9001
admin_token = "t"

[run_handler_pool]
enabled = false
max_concurrent_handlers = 8

[[models]]
name = "m"
path = "models/m.pb"
inputs = { in = "x:0" }
session_config = "inter_op_parallelism_threads: 2"
"""
    )
    config = load_config(path)
    assert config.server.port == 9001 and config.server.admin_token == "t"
    assert config.server.host == "127.0.0.1" and config.server.default_timeout_ms == 30000
    assert config.server.max_request_bytes == 64 << 20
    assert config.run_handler_pool.enabled is False and config.run_handler_pool.max_concurrent_handlers == 8
    assert config.traces.capacity == 1000 and config.traces.sample_rate == 0.0
    assert config.models[0].path == (tmp_path / "sub" / "models" / "m.pb").resolve()
    assert config.models[0].inputs == {"in": "x:0"}
    assert config.models[0].config_proto().inter_op_parallelism_threads == 2


def test_environment_overrides_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[server]\nport = 9001\ndefault_timeout_ms = 10\n")
    monkeypatch.setenv("POOLSERVE_SERVER__PORT", "9000")
    monkeypatch.setenv("POOLSERVE_TRACES__SAMPLE_RATE", "0.5")
    config = load_config(path)
    assert config.server.port == 9000
    assert config.server.default_timeout_ms == 10
    assert config.traces.sample_rate == 0.5


@pytest.mark.parametrize(
    ("variable", "value", "fragments"),
    [
        # not JSON: pydantic-settings' SettingsError escaped as a traceback, naming no variable
        (
            "POOLSERVE_MODELS",
            "notjson",
            ["environment variable POOLSERVE_MODELS", "[models] section as JSON"],
        ),
        ("POOLSERVE_SERVER", "{", ["environment variable POOLSERVE_SERVER", "[server] section as JSON"]),
        # a misspelled section was ignored, silently
        ("POOLSERVE_SERVR__PORT", "1", ["unknown environment variable(s) POOLSERVE_SERVR__PORT", "server"]),
        # a bad value was blamed on the file
        (
            "POOLSERVE_SERVER__PORT",
            "70000",
            ["server.port (from environment variable POOLSERVE_SERVER__PORT)"],
        ),
        ("POOLSERVE_SERVER", '{"port": -1}', ["server.port (from environment variable POOLSERVE_SERVER)"]),
    ],
)
def test_bad_environment_overrides_name_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, value: str, fragments: list[str]
) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[server]\nport = 9001\n")
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert all(f in message for f in fragments), message
    assert "c.toml" not in message  # the file is not to blame


def test_the_runtimes_own_variables_are_not_config_sections(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POOLSERVE_KEEP_FREED_MEMORY", "0")
    monkeypatch.setenv("POOLSERVE_RUN_HANDLER_MAX_CONCURRENT_HANDLERS", "4")
    monkeypatch.setenv("POOLSERVE_RUN_HANDLER_POOL__THREADS", "2")
    assert load_config().run_handler_pool.threads == 2


def test_a_bad_file_value_beside_an_override_is_the_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[server]\nport = 'high'\n")
    monkeypatch.setenv("POOLSERVE_SERVER__HOST", "0.0.0.0")
    with pytest.raises(ConfigError, match=r"c\.toml: invalid config: server\.port: Input should be"):
        load_config(path)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[server]\nport = 'high'\n", "server.port"),
        ("[server]\nprot = 1\n", "server.prot"),
        ("[bogus]\nx = 1\n", "bogus"),
        ("[traces]\nsample_rate = 2.0\n", "traces.sample_rate"),
        ("[[models]]\nname = 'a'\n", "models.0.path"),
        ("[[models]]\nname = 'a/b'\npath = 'x.pb'\n", "may not contain"),
        ("[[models]]\nname = 'a'\npath = 'x.pb'\nsession_config = 'nonsense {'\n", "models.0.session_config"),
        (
            "[[models]]\nname = 'a'\npath = 'x.pb'\n[[models]]\nname = 'a'\npath = 'y.pb'\n",
            "configured twice",
        ),
        ("[server\n", "not valid TOML"),
    ],
)
def test_bad_config_names_the_field(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match="c.toml") as info:
        load_config(path)
    assert fragment in str(info.value)


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "nope.toml")


def test_embedded_default_config_loads() -> None:
    config = load_config(None)
    assert {m.name for m in config.models} >= {"mlp"}
    assert all(m.path.is_absolute() and m.path.exists() for m in config.models)
