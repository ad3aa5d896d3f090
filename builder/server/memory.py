"""Request bodies in memory the process keeps, instead of memory mapped afresh for each one.

glibc serves an allocation above its mmap threshold (128 KiB at first, rising to the largest one freed) with
fresh pages from the kernel, and gives freed memory at the top of its heap back above its trim threshold:
each large body is then paid for again in page faults, as it arrives (uvicorn's buffer, its copy, the joined
body) and while it is decoded. A 3 MB JSON image spent ~2.5 ms of server CPU on that alone, more than half of
receiving it (REST 404 of a 3.2 MB body on a 2-core host: 4.7 ms -> 2.2 ms of server CPU). Raising both
thresholds keeps such buffers in the heap, reused from request to request; the price is that up to
`TRIM_THRESHOLD_BYTES` of freed memory stays with the process.
"""

from __future__ import annotations

import ctypes

#: mallopt's parameter numbers (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: Allocations up to this size come from the heap (glibc's ceiling for the threshold on 64-bit hosts);
#: the default --max-body-bytes (16 MiB) is below it.
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
TRIM_THRESHOLD_BYTES = 2 * MMAP_THRESHOLD_BYTES


def keep_large_buffers() -> bool:
    """Raise glibc's mmap and trim thresholds for this process; False where the C library has no mallopt
    (musl) or refuses the values, and nothing changes."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD,
                                                                                    TRIM_THRESHOLD_BYTES))
