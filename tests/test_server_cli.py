"""server/cli.py: the command line's help, its exit status on a bad config, and the loadtest hook."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from poolserve.server import cli


def test_cli_without_subcommand_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 0
    out = capsys.readouterr().out
    assert "usage: poolserve" in out and "serve" in out


def test_cli_bad_config_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[server]\nport = -1\n")
    assert cli.main(["serve", "--config", str(bad)]) == 2
    assert "server.port" in capsys.readouterr().err


def test_cli_loadtest_hook(capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    if importlib.util.find_spec("poolserve.loadtest.cli") is None:
        assert cli.main(["loadtest", "--help"]) == 2
        assert "loadtest command is not available" in capsys.readouterr().err
        return
    with pytest.raises(SystemExit) as info:  # argparse's --help of loadtest.cli, reached through poolserve
        cli.main(["loadtest", "--help"])
    assert info.value.code == 0
    assert "usage:" in capsys.readouterr().out


@pytest.mark.parametrize("flag", ["--port", "--grpc-port"])
@pytest.mark.parametrize("value", ["70000", "-1", "65536", "http"])
def test_cli_port_out_of_range_exits_2(flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    # --port 70000 listened on 4464 (wrapped) and --grpc-port -1 on 65535; refused by the parser, before
    # anything loads (the parser alone here: before the check, main would have served on the wrapped port)
    with pytest.raises(SystemExit) as info:
        cli._parser().parse_args(["serve", flag, value])
    assert info.value.code == 2
    assert f"argument {flag}: expected a port from 0 to 65535, got '{value}'" in capsys.readouterr().err


def test_cli_port_bounds_parse() -> None:
    args = cli._parser().parse_args(["serve", "--port", "0", "--grpc-port", "65535"])
    assert (args.port, args.grpc_port) == (0, 65535)


def test_cli_bad_environment_override_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("POOLSERVE_MODELS", "notjson")  # was a pydantic_settings traceback
    assert cli.main(["serve"]) == 2
    assert "poolserve: environment variable POOLSERVE_MODELS" in capsys.readouterr().err


def test_cli_ray_without_the_extra_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # as if the ray extra were not installed (None in sys.modules: find_spec says so, an import fails)
    monkeypatch.setitem(sys.modules, "ray", None)
    monkeypatch.setitem(sys.modules, "poolserve.server.ray_serve", None)
    with pytest.raises(SystemExit) as info:  # was a ModuleNotFoundError traceback
        cli.main(["serve", "--ray"])
    assert info.value.code == 2
    assert "pip install 'poolserve[ray]'" in capsys.readouterr().err
