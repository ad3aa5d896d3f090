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


@dataclass(frozen=True)
class Optimized:
    """A finished run: its report, and the --out folder it now fills (the gate's verdict is in the report)."""

    report: Report
    out: Path

    @property
    def gate_passed(self) -> bool:
        return self.report.gate.passed




@contextlib.contextmanager
def stage(say: Say, text: str) -> Iterator[None]:
    start = time.perf_counter()
    say(f"... {text}")
    yield
    say(f"ok  {text} ({time.perf_counter() - start:.1f} s)")
