"""This process's memory, as the kernel counts it: the resident set now and its peak since the peak was last
reset. Standard library only (Linux `/proc/self/status`; elsewhere every figure is None).

Why the peak and not only before/after: a converter or a quantizer can hold several copies of a model's weights
for a moment and give them back before it returns (TFLite's converter serializes a flatbuffer beside the MLIR
module), so the figure that decides whether a step fits in a memory budget is what it reached, not what it
left. Writing "5" to `/proc/self/clear_refs` resets the kernel's high-water mark (`VmHWM`) to the current
resident set, so each step's own peak can be read; where that write is refused the peak is the process's
lifetime peak, which is still an upper bound.
"""

from __future__ import annotations

from pathlib import Path

MIB = 1024 * 1024
_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_kib(field: str) -> int | None:
    try:
        text = _STATUS.read_text(encoding="ascii")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return None


def rss_bytes() -> int | None:
    """The resident set of this process now (VmRSS), in bytes; None where the host cannot say."""
    kib = _status_kib("VmRSS")
    return None if kib is None else kib * 1024


def peak_bytes() -> int | None:
    """The highest resident set since the last `reset_peak` (or the process's start), in bytes."""
    kib = _status_kib("VmHWM")
    return None if kib is None else kib * 1024


def reset_peak() -> bool:
    """Start a new peak at the current resident set; False where the kernel refuses (the peak then stays the
    process's lifetime one)."""
    try:
        _CLEAR_REFS.write_text("5", encoding="ascii")
    except OSError:
        return False
    return True


def mib(value: int | None) -> float | None:
    return None if value is None else round(value / MIB, 1)


def text(value: int | None) -> str:
    """A size for a person: '812 MiB', '3.4 GiB'; '?' when unknown."""
    if value is None:
        return "?"
    return f"{value / MIB:.0f} MiB" if value < 1024 * MIB else f"{value / (1024 * MIB):.1f} GiB"
