"""benchmarks/servers.py: the helpers the benchmarks that start servers share."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from benchmarks.servers import cpu_seconds, free_port, wait_ready


class _Ready(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/v1/health/ready" else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_wait_ready_returns_once_the_server_answers():
    server = HTTPServer(("127.0.0.1", free_port()), _Ready)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        wait_ready(f"http://127.0.0.1:{server.server_port}", seconds=5)
        with pytest.raises(SystemExit, match="did not become ready"):  # no such route: never ready
            wait_ready(f"http://127.0.0.1:{server.server_port}", seconds=0.3, path="/nope")
    finally:
        server.shutdown()
        server.server_close()


def test_wait_ready_stops_when_the_server_process_exits():
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    proc.wait(10)
    with pytest.raises(SystemExit, match="exited with 3"):
        wait_ready(f"http://127.0.0.1:{free_port()}", proc, seconds=10)


def test_cpu_seconds_counts_this_process():
    import os

    before = cpu_seconds(os.getpid())
    end = time.process_time() + 0.05
    while time.process_time() < end:
        pass
    assert cpu_seconds(os.getpid()) > before
