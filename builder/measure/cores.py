"""The cores this process may use: its affinity mask and its cgroup's CPU quota (v2 `cpu.max`, v1
`cpu.cfs_quota_us`/`cpu.cfs_period_us`), the tightest level of the hierarchy. Standard library only: serving
images size the server with it, and host detection (`builder.hardware.cpu`) reads the same way.

A container limited to 4 CPUs on a 64-core host sees 64 in `os.cpu_count()`; sizing by that would start 64
busy threads on 4 cores' worth of time.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return None


def _cgroup_dirs(root: Path, controller: str | None) -> list[Path]:
    """Directories of this process's cgroup for a v1 controller (or v2 when None), leaf to top."""
    text = _read(root / "proc/self/cgroup") or ""
    dirs: list[Path] = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        wanted = controllers == "" if controller is None else controller in controllers.split(",")
        if not wanted:
            continue
        if controller is None:
            mounts = [root / "sys/fs/cgroup", root / "sys/fs/cgroup/unified"]
        else:
            mounts = [root / "sys/fs/cgroup" / controllers, root / "sys/fs/cgroup" / controller]
        for mount in mounts:
            current = Path(rel.strip() or "/")
            while True:
                candidate = mount / str(current).lstrip("/")
                if candidate.is_dir() and candidate not in dirs:
                    dirs.append(candidate)
                if current == current.parent:
                    break
                current = current.parent
    return dirs


def cgroup_cpu_limit(root: Path = Path("/")) -> float | None:
    """CPUs allowed by cgroup quotas (v2 cpu.max, v1 cfs_quota/period), the tightest level; None if none."""
    limits: list[float] = []
    for directory in _cgroup_dirs(root, None):
        text = _read(directory / "cpu.max")
        if text:
            quota, _, period = text.partition(" ")
            if quota != "max" and period:
                limits.append(int(quota) / int(period))
    for directory in _cgroup_dirs(root, "cpu"):
        quota, period = _read(directory / "cpu.cfs_quota_us"), _read(directory / "cpu.cfs_period_us")
        if quota and period and int(quota) > 0 and int(period) > 0:
            limits.append(int(quota) / int(period))
    return min(limits) if limits else None


def usable_cpus(logical: int, affinity: int | None, quota: float | None) -> int:
    """CPUs this process may really use: affinity mask and cgroup quota (rounded up), at least 1."""
    usable = logical
    if affinity:
        usable = min(usable, affinity)
    if quota is not None:
        usable = min(usable, max(1, math.ceil(quota)))
    return max(1, usable)


@dataclass(frozen=True)
class Cores:
    """The CPUs this process may run on (`ids`, its affinity) and its CPU quota in cores (None: none)."""

    ids: tuple[int, ...]
    quota: float | None = None

    @property
    def count(self) -> int:
        """Whole cores of time this process may use: the affinity set, cut by the quota (rounded down: a
        quota of 2.5 keeps three busy threads waiting for each other's time slices), at least one."""
        count = len(self.ids)
        if self.quota is not None:
            count = min(count, max(1, math.floor(self.quota)))
        return max(1, count)

    def describe(self) -> str:
        quota = "no CPU quota" if self.quota is None else f"a CPU quota of {self.quota:g} cores"
        return f"{self.count} core{'s' if self.count != 1 else ''} (affinity {_ranges(self.ids)}, {quota})"


def read_cores(root: Path = Path("/")) -> Cores:
    """This process's cores, as the kernel and its cgroup allow them."""
    try:
        ids = tuple(sorted(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        ids = tuple(range(os.cpu_count() or 1))
    return Cores(ids, cgroup_cpu_limit(root))


def _ranges(ids: tuple[int, ...]) -> str:
    """0-3,8 style."""
    spans: list[list[int]] = []
    for cpu in ids:
        if spans and spans[-1][1] == cpu - 1:
            spans[-1][1] = cpu
        else:
            spans.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def release_free_memory() -> None:
    """Hand the C heap's free pages back to the system (glibc's malloc_trim); a no-op elsewhere. Called after a
    model's interpreters are let go (the start-up sizing's, a retired version's): their packed weights are freed
    into the heap, and without this the process keeps their pages."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass


#: glibc's mallopt parameters (malloc.h) and what the server sets them to: blocks up to 64 MiB come from the
#: heap and freed memory up to 256 MiB stays there, so a request's buffers (a 600 KB tensor as gRPC hands it
#: over, its protobuf copy, a 3 MB JSON body) reuse pages instead of mapping fresh ones and faulting them in
#: (the default maps every block over 128 KiB anew). `release_free_memory` hands pages back when a model goes.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
HEAP_BLOCKS_UP_TO = 64 * 1024 * 1024
HEAP_KEEPS_UP_TO = 256 * 1024 * 1024


def keep_request_memory() -> None:
    """Let request-sized blocks live in the C heap and be reused (glibc's mallopt); a no-op elsewhere."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(M_MMAP_THRESHOLD, HEAP_BLOCKS_UP_TO)
        libc.mallopt(M_TRIM_THRESHOLD, HEAP_KEEPS_UP_TO)
    except (OSError, AttributeError):
        pass
