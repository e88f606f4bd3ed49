import subprocess
import sys

import pytest

from poolserve.runtime import memory

LINUX_GLIBC = sys.platform.startswith("linux") and "glibc" in " ".join(__import__("platform").libc_ver())


@pytest.mark.skipif(not LINUX_GLIBC, reason="malloc is tuned on glibc only")
def test_session_keeps_freed_memory_on_glibc():
    code = (
        "from poolserve.runtime import memory; from poolserve.runtime.session import Session; "
        "assert memory._done is None; Session(); print(memory._done)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_keep_freed_memory_can_be_turned_off():
    code = "from poolserve.runtime import memory; print(memory.keep_freed_memory())"
    env = {"POOLSERVE_KEEP_FREED_MEMORY": "0", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == "False"


def test_keep_freed_memory_is_done_once(monkeypatch):
    first = memory.keep_freed_memory()
    calls = []
    monkeypatch.setattr(memory, "_tune", lambda: calls.append(1) or not first)
    assert memory.keep_freed_memory() is first
    assert calls == []  # malloc is tuned once per process, not once per session
