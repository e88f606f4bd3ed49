"""What the benchmarks that start a server in a child process share: a free port, waiting for the server to
be ready, and a process's CPU time (from /proc: the servers and load generators share the machine)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(
    url: str,
    proc: subprocess.Popen[bytes] | None = None,
    seconds: float = 60.0,
    path: str = "/v1/health/ready",
) -> None:
    """Returns once ``url + path`` answers 200; SystemExit if ``proc`` exits first or after ``seconds``
    (the process is killed then)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}{path}", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"the server at {url} exited with {proc.returncode} at start-up")
        time.sleep(0.1)
    if proc is not None:
        proc.kill()
    raise SystemExit(f"the server at {url} did not become ready within {seconds:g} s")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far, all its threads (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
