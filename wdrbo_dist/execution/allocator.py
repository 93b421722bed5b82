"""Keep a run's freed memory in its process instead of handing it back to the kernel.

A BO step allocates and frees the same few large arrays (MBs: an Adam step's [b, N, n] forms,
a screening block) thousands of times per run; above glibc's mmap and trim thresholds each is
faulted in page by page, zeroed by the kernel, at every step, and in a VM a page fault is dear.
`keep_freed_memory` raises both thresholds for the process that runs BO, so the arrays are
reused from the heap. Only where memory comes from changes: the records are the same to the
bit; the process keeps its peak heap (tens of MB) until it exits.
`benchmarks/speed/paired.py --preset allocator` measures the effect.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

# mallopt parameters (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# The largest mmap threshold glibc accepts on 64-bit systems (HEAP_MAX_SIZE / 2), and a trim
# threshold no BO step's temporaries reach.
MMAP_THRESHOLD = 32 * 1024 * 1024
TRIM_THRESHOLD = 1024 * 1024 * 1024

_kept = False


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds in this process (once); False where the C library
    is not glibc (macOS, musl) or refuses, which changes nothing but speed."""
    global _kept
    if _kept:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _kept = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _kept
