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


_RELEASE_SCRIPT = """
import numpy as np
from poolserve.runtime import memory
from poolserve.server.idle import resident_bytes
assert memory.keep_freed_memory()
base = resident_bytes()
blocks = [np.ones(2 << 20, np.float32) for _ in range(24)]  # 8 MiB each: below the mmap threshold
del blocks
kept = resident_bytes()
released = memory.release_freed_memory()
print(base >> 20, kept >> 20, resident_bytes() >> 20, released)
"""


@pytest.mark.skipif(not LINUX_GLIBC, reason="malloc is tuned on glibc only")
def test_release_freed_memory_hands_back_what_malloc_kept():
    out = subprocess.run([sys.executable, "-c", _RELEASE_SCRIPT], capture_output=True, text=True, check=True)
    base, kept, after, released = out.stdout.split()
    assert int(kept) > int(base) + 150  # 192 MiB freed and kept for reuse
    assert released == "True" and int(after) < int(base) + 40


def test_release_freed_memory_does_nothing_where_malloc_is_not_tuned(monkeypatch):
    monkeypatch.setattr(memory, "_done", False)
    assert memory.release_freed_memory() is False
