"""server/cli.py: the command line's help, its exit status on a bad config, and the loadtest hook."""

from __future__ import annotations

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
