"""Keep the C allocator's freed big buffers for the next one (glibc).

A backup streams the store in buffers of 8 MiB, one after another. glibc
hands each allocation that big its own fresh mapping and unmaps it once it
is freed, so every chunk is memory the kernel has to find and zero again
(huge pages, on this kind of VM): measured on the 700 MiB bench store,
``backup create -c none`` spent 0.9-2.3 s in the kernel that way against
0.45-0.5 s with the buffers kept, for the same 0.8 s of our own work.

:func:`reuse_big_buffers` raises glibc's mmap threshold above our chunk
size and its trim threshold above what a backup holds at once, so freed
chunks go back to the heap and the next chunk takes the same pages. It is
for a short-lived process that streams big chunks (create, verify); it does
nothing where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

#: mallopt parameters (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: Allocations up to this size come from the heap (glibc caps it at 32 MiB on 64-bit).
MMAP_THRESHOLD = 32 << 20
#: Freed heap memory is given back to the kernel only above this much.
TRIM_THRESHOLD = 512 << 20

_done = False


def reuse_big_buffers() -> bool:
    """Let freed big buffers be reused (once per process); False: not glibc, nothing done."""
    global _done
    if _done:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others: no mallopt
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    _done = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
    return _done
