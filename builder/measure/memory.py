"""This process's memory, as the kernel counts it: the resident set now and its peak since the peak was last
reset. Standard library only (Linux `/proc/self/status`; elsewhere every figure is None).

Why the peak and not only before/after: a converter or a quantizer can hold several copies of a model's weights
for a moment and give them back before it returns (TFLite's converter serializes a flatbuffer beside the MLIR
module), so the figure that decides whether a step fits in a memory budget is what it reached, not what it
left. The kernel keeps the process's lifetime peak (`VmHWM`, what GNU `time -v` reports); a step's own peak
below it is read by a sampling thread (`_Sampler`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

MIB = 1024 * 1024
_STATUS = Path("/proc/self/status")


def _status(path: Path = _STATUS) -> dict[str, int]:
    """A process's status file (`/proc/<pid>/status`), its memory fields in KiB, read once; {} where there is
    none (the process is gone, or no `/proc`)."""
    try:
        text = path.read_text(encoding="ascii")
    except OSError:
        return {}
    return {name: int(rest.split()[0]) for name, _, rest in (line.partition(":") for line in text.splitlines())
            if rest.strip().endswith("kB")}


def _status_kib(field: str) -> int | None:
    return _status().get(field)


def rss_bytes() -> int | None:
    """The resident set of this process now (VmRSS), in bytes; None where the host cannot say."""
    kib = _status_kib("VmRSS")
    return None if kib is None else kib * 1024


def process_rss_bytes(pid: int) -> int | None:
    """What another process (a child doing a step of its own) holds beside this one, in bytes: its private
    resident memory (`RssAnon` and `RssShmem`), not the library pages it maps from the same files as this
    process (TensorFlow's are about 0.4 GiB, counted once by the kernel and in this process's own resident
    set). None once it is gone."""
    fields = _status(Path(f"/proc/{pid}/status"))
    if "RssAnon" in fields:
        return (fields["RssAnon"] + fields.get("RssShmem", 0)) * 1024
    return fields["VmRSS"] * 1024 if "VmRSS" in fields else None


#: the processes doing a step of the run in a process of their own, while they run (`counting_child`)
_children: set[int] = set()


@contextlib.contextmanager
def counting_child(pid: int) -> Iterator[None]:
    """Count a child's memory with this process's for the block (`family_rss_bytes`). Only children registered
    here count: a library's fork before an exec (`ctypes.util.find_library` runs ldconfig) briefly shows all of
    this process's pages as its own, and would count them twice."""
    _children.add(pid)
    try:
        yield
    finally:
        _children.discard(pid)


def children_rss_bytes() -> int:
    """What the counted children hold beside this process (`process_rss_bytes`), added up: the memory a step
    run in a process of its own takes (`builder.optimize.isolated`)."""
    return sum(process_rss_bytes(pid) or 0 for pid in tuple(_children))


def family_rss_bytes() -> int | None:
    """This process's resident set and its children's: what a machine or a cgroup holds for the run."""
    own = rss_bytes()
    return None if own is None else own + children_rss_bytes()


def lifetime_peak_bytes() -> int | None:
    """The highest resident set since the process started (VmHWM), in bytes."""
    kib = _status_kib("VmHWM")
    return None if kib is None else kib * 1024


class _Sampler:
    """A daemon thread that, while a step is watched, reads the resident set every `INTERVAL_S` and keeps the
    highest for each watch open (they nest: a stage and the steps inside it): a step's own peak, where the
    lifetime peak (VmHWM) says nothing because an earlier step went higher. It sleeps while nothing is watched,
    so it never takes the interpreter from a timing loop.

    Why not reset the kernel's high-water mark (`/proc/self/clear_refs`): the same mark is what the kernel
    reports as the process's maximum resident set when it exits (`getrusage`, GNU `time -v`), so resetting it
    would make those tools under-report the run's peak."""

    INTERVAL_S = 0.02

    def __init__(self) -> None:
        import threading

        #: the highest reading of each open watch, in the order they opened
        self.cells: list[list[int]] = []
        #: the highest reading since the sampler started (this process and its children): the run's peak where
        #: a child held memory beside this process (`run_peak_bytes`)
        self.highest_ever = 0
        self.watching = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tfsmith-rss-sampler", daemon=True)
        self._thread.start()

    def open(self) -> list[int]:
        cell = [rss_bytes() or 0]
        self.cells.append(cell)
        self.watching.set()
        return cell

    def close(self, cell: list[int]) -> None:
        self.cells = [c for c in self.cells if c is not cell]
        if not self.cells:
            self.watching.clear()

    def _run(self) -> None:
        import time

        while True:
            self.watching.wait()
            reading = family_rss_bytes() or 0
            for cell in tuple(self.cells):
                cell[0] = max(cell[0], reading)
            self.highest_ever = max(self.highest_ever, reading)
            time.sleep(self.INTERVAL_S)


_sampler: _Sampler | None = None


@contextlib.contextmanager
def watch() -> Iterator[Callable[[], int | None]]:
    """Watch a step's memory: yields a function giving its peak so far (exact where the process reached a new
    lifetime peak meanwhile, as VmHWM says; else the sampler's highest reading, which can miss a spike shorter
    than its interval). The sampler adds the resident sets of this process's children, so a step run in a
    process of its own is counted with what this one holds. Watches nest. Outside `/proc` the peak is None."""
    global _sampler
    if rss_bytes() is None:
        yield lambda: None
        return
    if _sampler is None:
        _sampler = _Sampler()
    sampler = _sampler
    lifetime_before = lifetime_peak_bytes() or 0
    cell = sampler.open()

    def peak() -> int | None:
        now, lifetime = rss_bytes(), lifetime_peak_bytes()
        highest = max(now or 0, cell[0])
        if lifetime is not None and lifetime > lifetime_before:
            return max(lifetime, highest)
        return highest

    try:
        yield peak
    finally:
        sampler.close(cell)


def run_peak_bytes() -> int | None:
    """The highest resident set of the run: this process's since it started (what GNU `time -v` reports at its
    exit), or where a step ran in a process of its own, this process's and that child's together as the
    sampler read them (GNU `time -v` reports the largest single process of the tree, not their sum)."""
    own = lifetime_peak_bytes()
    if own is None:
        return None
    return max(own, _noted_family_peak, _sampler.highest_ever if _sampler is not None else 0)


_noted_family_peak = 0


def note_family_reading(value: int) -> None:
    """A reading of this process and a child together taken elsewhere (the watch over a step's own process),
    kept for `run_peak_bytes`."""
    global _noted_family_peak
    _noted_family_peak = max(_noted_family_peak, value)


def mib(value: int | None) -> float | None:
    return None if value is None else round(value / MIB, 1)


def text(value: int | None) -> str:
    """A size for a person: '812 MiB', '3.4 GiB'; '?' when unknown."""
    if value is None:
        return "?"
    return f"{value / MIB:.0f} MiB" if value < 1024 * MIB else f"{value / (1024 * MIB):.1f} GiB"


_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1000, "kib": 1024, "m": MIB, "mb": 10**6, "mib": MIB,
          "g": 1024 * MIB, "gb": 10**9, "gib": 1024 * MIB, "t": 1024**4, "tb": 10**12, "tib": 1024**4}


def parse_size(text: str) -> int:
    """'8G', '8GiB', '7.5 GB', '512Mi', '1073741824' -> bytes (K/M/G/T alone and Ki/Mi/Gi/Ti are powers of 1024,
    KB/MB/GB/TB powers of 1000, as Kubernetes and GNU tools spell them); ValueError with the text otherwise."""
    import re

    found = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", text or "")
    unit = found.group(2).lower() if found else ""
    unit = unit + "b" if unit in ("ki", "mi", "gi", "ti") else unit
    unit = unit[:-2] + "ib" if unit.endswith("ib") else unit
    if not found or unit not in _UNITS:
        raise ValueError(f"{text!r} is not a size (e.g. 8G, 7.5GB, 512Mi)")
    return int(float(found.group(1)) * _UNITS[unit])


# --- what the process may use (cgroup-aware; standard library only: serving images size the server with it) ----


def cgroup_memory_limit(root: Path = Path("/")) -> int | None:
    """Bytes allowed by this process's cgroup memory limits (v2 `memory.max`, v1 `memory.limit_in_bytes`), the
    tightest level of the hierarchy; None where there is none."""
    from builder.measure.cores import _cgroup_dirs, _read

    limits: list[int] = []
    for directory in _cgroup_dirs(root, None):
        text = _read(directory / "memory.max")
        if text and text.isdigit():
            limits.append(int(text))
    for directory in _cgroup_dirs(root, "memory"):
        text = _read(directory / "memory.limit_in_bytes")
        if text and text.isdigit() and int(text) < 2**62:
            limits.append(int(text))
    return min(limits) if limits else None


def mem_total(root: Path = Path("/")) -> int | None:
    """MemTotal from /proc/meminfo, in bytes."""
    from builder.measure.cores import _read

    for line in (_read(root / "proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return None


def usable_memory(total: int | None, limit: int | None) -> int | None:
    """The tighter of the machine's memory and the cgroup's limit (either may be unknown)."""
    if total is None:
        return limit
    return min(total, limit) if limit is not None else total
