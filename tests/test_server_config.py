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
