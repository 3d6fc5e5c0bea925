"""Keep freed CPU memory for the next allocation (glibc's malloc), for CPU training.

A training update allocates and frees the same large tensors every time (activations, their
gradients, dropout masks: megabytes each). glibc serves requests above its mmap threshold with a
fresh ``mmap`` and returns them on ``free``, so every such tensor is page-faulted in anew at each
update, and freed heap above the trim threshold goes back to the system the same way. With the
threshold at its maximum (32 MiB on 64-bit) and trimming off, the heap keeps those blocks and the
next update reuses them without faults. Numbers do not change: only where the bytes live.
Elsewhere (no glibc, e.g. macOS or musl) it does nothing.

A validation's batches have other shapes than training's, so its blocks would join the ones the
heap keeps for the updates (+0.5 GB at the race Transformer's dev set): ``release_freed_memory``
gives the free ones back before and after it (an update re-faults what it needs once). Training
does the same every ``TRIM_EVERY`` updates (each process, row workers too): batches of new shapes
leave holes the kept blocks cannot fill, and the heap would keep growing by them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
MMAP_THRESHOLD = 32 << 20  # glibc's largest accepted value on 64-bit (HEAP_MAX_SIZE / 2)
TRIM_THRESHOLD = 1 << 30  # free heap kept up to 1 GiB

TRIM_EVERY = 50  # updates between two malloc_trim calls while training

_done = False


def _libc():
    return _glibc() if sys.platform.startswith("linux") else None


@functools.cache
def _glibc():  # looked up once: find_library runs ldconfig
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def keep_freed_memory() -> bool:
    """Set glibc's mmap and trim thresholds for this process (and processes forked from it);
    True where they were set. Idempotent."""
    global _done
    if _done:
        return True
    mallopt = getattr(_libc(), "mallopt", None)
    if mallopt is None:  # not glibc
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    ok = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    ok = mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1 and ok
    _done = ok
    return ok


def release_freed_memory() -> bool:
    """Return the heap's free blocks to the system now (glibc's ``malloc_trim``); True where it
    released any."""
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is None:
        return False
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim(0) == 1
