"""What one optimize run is asked (Options) and what it gives back (Optimized), and how a step is announced."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


from builder.report import Report
from builder.say import Say

DEFAULT_MAX_RELATIVE_ERROR = 0.05


# --- options and outcome ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    model: Path
    data: str
    recipe_spec: str
    target: str | None
    out: Path
    max_accuracy_drop: float
    threads: int
    cuda_cc: str | None = None
    latency_runs: int = 300
    max_relative_error: float = DEFAULT_MAX_RELATIVE_ERROR
    signature: str | None = None  # the SavedModel signature that is the contract (default serving_default)
    imports: tuple[str, ...] = ()  # the user's modules to import before loading (custom layers)
    memory: int | None = None  # bytes optimize may use (--memory); None: what the host or its cgroup allows


@dataclass(frozen=True)
class Optimized:
    """A finished run: its report, and the --out folder it now fills (the gate's verdict is in the report)."""

    report: Report
    out: Path

    @property
    def gate_passed(self) -> bool:
        return self.report.gate.passed




@contextlib.contextmanager
def stage(say: Say, text: str, *, timing: bool = False) -> Iterator[None]:
    """A step announced, and said done with its time, the memory the process holds after it and, where it
    went higher meanwhile (a converter's copies, a step's own process), its peak: memory is a budget like
    cores, and the progress shows where it goes. A `timing` stage is not watched (the sampler would take the
    interpreter from the timing loop)."""
    from builder.measure import memory

    start = time.perf_counter()
    say(f"... {text}")
    with contextlib.nullcontext(lambda: None) if timing else memory.watch() as peak:
        yield
        highest = peak()
    held = memory.rss_bytes()
    said = f"{time.perf_counter() - start:.1f} s" + (f", {memory.text(held)} resident" if held is not None else "")
    if held is not None and highest is not None and highest > held * 1.1:
        said += f", peak {memory.text(highest)}"
    say(f"ok  {text} ({said})")
