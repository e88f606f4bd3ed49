"""Keeping freed memory for reuse: glibc's malloc tuned the way TensorFlow's own allocator behaves.

Kernels allocate their outputs and temporaries with numpy, which takes them from C's malloc. By default
glibc serves blocks above 128 KiB with a fresh ``mmap`` each time and returns freed memory at the top of
its heaps to the system at once, so a step that allocates the same few hundred kilobytes on every run
pays a page fault for every 4 KiB page, every time. That made a small ResNet three times slower than
the same kernels with memory kept (1.5 ms against 0.5 ms a step on the 2-core test machine).
TensorFlow avoids it with its own allocator, which keeps what it has taken.

``keep_freed_memory()`` (called when the first Session is made) raises the mmap threshold to glibc's
maximum (32 MiB on 64-bit), keeps up to ``TRIM_THRESHOLD`` bytes of freed memory in each heap, and grows
heaps in steps of ``TOP_PAD`` bytes. The process's resident memory then stays near its peak instead of
following each step up and down, as with TensorFlow. Set ``POOLSERVE_KEEP_FREED_MEMORY=0`` to leave
malloc as it is. Other C libraries (musl, macOS) are left alone.

``release_freed_memory()`` hands what malloc keeps back to the system (``malloc_trim``): the server calls it
when it has been idle a while after serving (``server.release_memory_idle_s``), so a burst's peak does not
stay resident; the next step faults its pages in once more.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
import threading

# mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 32 << 20  # glibc refuses more than HEAP_MAX_SIZE / 2 (32 MiB on 64-bit)
TRIM_THRESHOLD = 512 << 20
TOP_PAD = 64 << 20
ENV = "POOLSERVE_KEEP_FREED_MEMORY"
_SETTINGS = ((_M_MMAP_THRESHOLD, MMAP_THRESHOLD), (_M_TRIM_THRESHOLD, TRIM_THRESHOLD), (_M_TOP_PAD, TOP_PAD))

_lock = threading.Lock()
_done: bool | None = None
_libc: ctypes.CDLL | None = None


def keep_freed_memory() -> bool:
    """Tunes glibc's malloc once per process; True when it is in effect."""
    global _done
    with _lock:
        if _done is None:
            _done = _tune()
        return _done


def _tune() -> bool:
    if os.environ.get(ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    if not sys.platform.startswith("linux"):
        return False
    global _libc
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt, trim = libc.mallopt, libc.malloc_trim
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    results = [mallopt(p, v) for p, v in _SETTINGS]
    if all(r == 1 for r in results):
        _libc = libc
        return True
    return False


def release_freed_memory() -> bool:
    """Returns the free memory malloc keeps (in every heap) to the system; True when some was returned.
    Only where ``keep_freed_memory`` is in effect (elsewhere malloc returns it by itself). It walks the
    heaps under their locks: for an idle moment, not a step's path."""
    libc = _libc if _done else None
    if libc is None:
        return False
    return bool(libc.malloc_trim(0))
