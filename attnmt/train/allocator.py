"""Keep freed CPU memory for the next allocation (glibc's malloc), for CPU training.

A training update allocates and frees the same large tensors every time (activations, their
gradients, dropout masks: megabytes each). glibc serves requests above its mmap threshold with a
fresh ``mmap`` and returns them on ``free``, so every such tensor is page-faulted in anew at each
update, and freed heap above the trim threshold goes back to the system the same way. With the
threshold at its maximum (32 MiB on 64-bit) and trimming off, the heap keeps those blocks and the
next update reuses them without faults. Numbers do not change: only where the bytes live.
Elsewhere (no glibc, e.g. macOS or musl) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
MMAP_THRESHOLD = 32 << 20  # glibc's largest accepted value on 64-bit (HEAP_MAX_SIZE / 2)
TRIM_THRESHOLD = 1 << 30  # free heap kept up to 1 GiB

_done = False


def keep_freed_memory() -> bool:
    """Set glibc's mmap and trim thresholds for this process (and processes forked from it);
    True where they were set. Idempotent."""
    global _done
    if _done:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    ok = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    ok = mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1 and ok
    _done = ok
    return ok
