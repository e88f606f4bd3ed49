"""What the benchmarks that start a server in a child process share: a free port, waiting for the server to
be ready, a process's CPU time (from /proc: the servers and load generators share the machine), and a
lean HTTP client for one request at a time (``RawClient``)."""

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


class RawClient:
    """One keep-alive HTTP/1.1 connection on a plain socket, sending one prepared POST at a time and
    reading its answer into one buffer kept for the connection (``recv_into``: no bytes object per read,
    no copies as the answer grows). An HTTP library costs its client more than the server spends on a
    request (httpx: ~1 ms for a 1 MiB answer, which alone is more than a twentieth of the same tensor in
    JSON), so a figure taken through one measures the client."""

    def __init__(self, port: int, path: str, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        fields = {"host": "127.0.0.1", "content-type": "application/json", **(headers or {})}
        head = f"POST {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items())
        self.request = f"{head}content-length: {len(body)}\r\n\r\n".encode() + body
        self._buf = bytearray(1 << 16)
        self.headers: dict[str, str] = {}  # the last answer's, names in lower case

    def call(self) -> memoryview:
        """The answer's body (a view of the connection's buffer: the next call may write over it);
        SystemExit for anything but a 200."""
        self.sock.sendall(self.request)
        got, end = 0, -1
        while end < 0:
            got += self._read(got)
            end = self._buf.find(b"\r\n\r\n", 0, got)
        head = bytes(self._buf[:end]).decode("latin-1").split("\r\n")
        if not head[0].startswith("HTTP/1.1 200"):
            raise SystemExit(f"unexpected answer: {bytes(self._buf[: min(got, 300)])!r}")
        self.headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:])}
        start = end + 4
        stop = start + int(self.headers["content-length"])
        if len(self._buf) < stop:
            self._grow(stop, got)
        while got < stop:
            got += self._read(got)
        return memoryview(self._buf)[start:stop]

    def _grow(self, size: int, keep: int) -> None:
        """A larger buffer, with the first ``keep`` bytes of the old one (a view of it stays valid)."""
        larger = bytearray(size)
        larger[:keep] = self._buf[:keep]
        self._buf = larger

    def _read(self, at: int) -> int:
        if at == len(self._buf):
            self._grow(2 * at, at)
        with memoryview(self._buf) as view:
            n = self.sock.recv_into(view[at:])
        if not n:
            raise SystemExit("the server closed the connection")
        return n

    def close(self) -> None:
        self.sock.close()
