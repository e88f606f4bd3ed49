"""server/auth.py: the admin token, fixed or from a file rotated while a real server runs on loopback."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from support import ROOT, ServerProcess
from test_server_process import write_models

from poolserve.runtime.errors import UnauthenticatedError
from poolserve.server.auth import CHECK_EVERY_S, AdminToken
from poolserve.server.config import ConfigError, load_config

POOL = "/v1/runtime/run_handler_pool"


def rotate(path: Path, token: str) -> None:
    """Replaces the token file as a deployment should: written beside it, renamed over it."""
    staging = path.with_suffix(".new")
    staging.write_text(token + "\n")
    staging.replace(path)


def test_a_rotated_token_file_takes_effect_without_a_restart(tmp_path: Path) -> None:
    write_models(tmp_path)
    rotate(tmp_path / "admin.token", "first-token")
    config = tmp_path / "server.toml"
    config.write_text(
        '[server]\nadmin_token_file = "admin.token"\n\n[[models]]\nname = "add"\npath = "add.pb"\n'
    )
    server = ServerProcess(config, tmp_path / "server.log")
    try:
        with httpx.Client(base_url=server.url, timeout=10) as http:

            def put(token: str) -> httpx.Response:
                headers = {"Authorization": f"Bearer {token}"}
                return http.put(POOL, json={"enabled": True}, headers=headers)

            assert put("first-token").status_code == 200
            assert http.put(POOL, json={"enabled": True}).status_code == 401
            rotate(tmp_path / "admin.token", "second-token")
            rotated = time.monotonic()
            while put("first-token").status_code == 200:
                assert time.monotonic() - rotated < CHECK_EVERY_S + 5, "the old token still works"
                time.sleep(0.05)
            r = put("first-token")
            assert r.status_code == 401 and "not valid" in r.json()["error"], r.text
            assert r.json()["code"] == "UNAUTHENTICATED"
            assert r.headers["WWW-Authenticate"] == 'Bearer error="invalid_token"'
            assert put("second-token").status_code == 200
            # a token file gone: every guarded call is refused (never open), until it is back
            (tmp_path / "admin.token").unlink()
            time.sleep(CHECK_EVERY_S + 0.1)
            assert put("second-token").status_code == 401
            rotate(tmp_path / "admin.token", "third-token")
            time.sleep(CHECK_EVERY_S + 0.1)
            assert put("third-token").status_code == 200
        assert "admin token replaced" in server.output()
    finally:
        server.stop()


def test_a_token_file_that_cannot_be_read_stops_the_start(tmp_path: Path) -> None:
    write_models(tmp_path)
    config = tmp_path / "server.toml"
    config.write_text(
        '[server]\nadmin_token_file = "missing.token"\n\n[[models]]\nname = "add"\npath = "add.pb"\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("POOLSERVE_")}
    proc = subprocess.run(
        [sys.executable, "-m", "poolserve.server.cli", "serve", "--config", str(config), "--port", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    assert "admin_token_file: cannot read" in proc.stderr and "missing.token" in proc.stderr


def test_the_token_file_is_relative_to_the_config_and_not_beside_a_token(tmp_path: Path) -> None:
    config = tmp_path / "server.toml"
    config.write_text('[server]\nadmin_token_file = "admin.token"\n')
    assert load_config(config).server.admin_token_file == str(tmp_path / "admin.token")
    config.write_text('[server]\nadmin_token = "x"\nadmin_token_file = "admin.token"\n')
    with pytest.raises(ConfigError, match="admin_token or admin_token_file, not both"):
        load_config(config)


def test_a_fixed_token_and_none() -> None:
    AdminToken().check({})  # no token: the calls are open
    token = AdminToken("sesame")
    token.check({"authorization": "Bearer sesame"})
    for headers in ({}, {"authorization": "Basic sesame"}, {"authorization": "Bearer other"}):
        with pytest.raises(UnauthenticatedError, match="Bearer|not valid"):
            token.check(headers)
