"""server/cli.py: the command line's help, its exit status on a bad config or a taken port, and the loadtest
hook."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from support import free_port

from poolserve.server import cli


def test_cli_without_subcommand_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 0
    out = capsys.readouterr().out
    assert "usage: poolserve" in out and "serve" in out


def test_cli_version_is_the_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.metadata

    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"poolserve {importlib.metadata.version('poolserve')}"


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


@pytest.mark.parametrize("taken", ["--port", "--grpc-port"])
def test_a_single_server_on_a_taken_port_exits_1_saying_so(taken: str, tmp_path: Path) -> None:
    # as the supervisor of --workers does; one process exited 3 (uvicorn's bind error) or said grpc's
    # "Failed to bind", each after loading every model
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        ports = {"--port": free_port(), "--grpc-port": free_port(), taken: port}
        env = {k: v for k, v in os.environ.items() if not k.startswith("POOLSERVE_")}
        env["XDG_STATE_HOME"] = str(tmp_path)
        command = [sys.executable, "-m", "poolserve.server.cli", "serve", "--host", "127.0.0.1"]
        command += [str(a) for flag, value in ports.items() for a in (flag, value)]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    grpc = " for gRPC" if taken == "--grpc-port" else ""
    assert done.returncode == 1, done.stderr
    assert f"poolserve: cannot listen{grpc} on 127.0.0.1:{port}: Address already in use" in done.stderr
    assert "loading version" not in done.stderr  # refused before any model loaded


def test_a_single_server_says_where_it_listens(tmp_path: Path) -> None:
    # it binds its port before the models load and hands the socket to uvicorn, which then logs nothing
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("POOLSERVE_")}
    env["XDG_STATE_HOME"] = str(tmp_path)
    command = [sys.executable, "-m", "poolserve.server.cli", "serve", "--host", "127.0.0.1"]
    command += ["--port", str(port), "--grpc-port", "0"]
    with subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True) as server:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and server.poll() is None:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v1/health/live", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        server.send_signal(signal.SIGTERM)
        _, err = server.communicate(timeout=60)
    assert f"Uvicorn running on http://127.0.0.1:{port} (Press CTRL+C to quit)" in err, err


def test_servers_on_port_0_keep_their_traces_apart(tmp_path: Path) -> None:
    # "auto" was traces-<configured port>: every server started on port 0 (one alone, a supervisor of
    # workers) shared traces-0.sqlite3; now each names the port it bound
    config = tmp_path / "one.toml"
    mlp = Path(cli.__file__).resolve().parent.parent / "configs" / "models" / "mlp.pb"
    config.write_text(f'[server]\nport = 0\ngrpc_port = 0\n\n[[models]]\nname = "mlp"\npath = "{mlp}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("POOLSERVE_")}
    env["XDG_STATE_HOME"] = str(tmp_path)
    command = [sys.executable, "-m", "poolserve.server.cli", "serve", "--config", str(config)]
    command += ["--host", "127.0.0.1"]
    logs = [tmp_path / "alone.log", tmp_path / "workers.log"]
    servers = []
    for log, extra in zip(logs, [[], ["--workers", "2"]], strict=True):
        with log.open("wb") as out:
            servers.append(subprocess.Popen(command + extra, env=env, stdout=out, stderr=subprocess.STDOUT))
    ports: list[int] = []
    try:
        for log, server in zip(logs, servers, strict=True):
            deadline, found = time.monotonic() + 90, None
            while time.monotonic() < deadline and server.poll() is None:
                # "Uvicorn running on http://127.0.0.1:<port>", or the supervisor's "2 workers on ..."
                found = re.search(r"(?:running on http://| workers on )127\.0\.0\.1:(\d+)", log.read_text())
                if found and "startup complete" in log.read_text():
                    ports.append(int(found.group(1)))
                    break
                time.sleep(0.1)
            assert server.poll() is None and found, log.read_text()
        for port in ports:
            assert httpx.get(f"http://127.0.0.1:{port}/v1/health/ready", timeout=5).status_code == 200
    finally:
        for server in servers:
            server.send_signal(signal.SIGTERM)
        for server in servers:
            server.wait(timeout=60)
    files = sorted(p.name for p in (tmp_path / "poolserve").glob("traces-*.sqlite3"))
    assert 0 not in ports and files == sorted(f"traces-{port}.sqlite3" for port in ports)
