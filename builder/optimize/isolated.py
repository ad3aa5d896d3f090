"""A heavy step in a process of its own, watched against the memory budget.

TensorFlow does not give a converter's memory back to the operating system when the converter returns: the
TFLite converter takes about six times a model's float32 weights at its peak (2.5 GiB over TensorFlow itself
for a BERT-base-sized classifier), and what optimize holds stays that high for the rest of the run. Run in a
process of its own, a conversion's memory is the machine's again when the process ends, and it never adds
to what the next step starts from.

The process is watched while it runs: when what this process holds plus what the child holds reaches the
budget, the child is stopped and the step drops out with both figures, as any step that does not fit, instead
of the kernel's OOM killer ending the whole run without a word.

A process costs a second start of TensorFlow (about 3 s, and 0.4 GiB of its own beside the library pages it
shares with this process) and its own load of the SavedModel, so only steps expected to need a real share of
the memory run apart (`worth_a_process`); a small model's conversions run here, sharing one load (the digits
CNN's take about a second each). Measured on a 25M-parameter MLP (101 MB of weights, 2 cores): its
conversions took as long apart as here (5.5 s against 5.1 s for the dynamic-range one) and left nothing
behind, where each one here kept up to 0.3 GiB resident for the rest of the run.
"""

from __future__ import annotations

import pickle
import signal
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from builder.measure import memory

T = TypeVar("T")

#: A step expected to need at least this share of the budget runs in a process of its own.
SHARE = 0.125
#: ... and so does one expected to need at least this much, whatever the budget.
LARGE = 256 * 1024**2
#: The share of the budget at which a child is stopped: below the limit, since the watch reads every
#: `INTERVAL_S` and a converter can take hundreds of MiB between two readings.
STOP_AT = 0.95
INTERVAL_S = 0.1
#: What the child runs: this module's `_serve`, imported by name (never the caller's main module).
CHILD = "import sys; from pathlib import Path; from builder.optimize.isolated import _serve; " \
        "_serve(Path(sys.argv[1]), Path(sys.argv[2]))"


class OverBudget(MemoryError):
    """The child was stopped because this process and it together reached the budget."""

    def __init__(self, line: str) -> None:
        super().__init__(line)
        self.cause = line


class ChildFailed(RuntimeError):
    """The step raised in its process: its first line, and the child's traceback as the log's text."""

    def __init__(self, message: str, full_text: str, cause: str | None = None) -> None:
        super().__init__(message)
        self.full_text = full_text
        if cause:
            self.cause = cause

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.full_text, getattr(self, "cause", None)))


def worth_a_process(need: int, limit: int | None) -> bool:
    """Whether a step expected to need `need` bytes runs in a process of its own under a budget of `limit`."""
    return need >= LARGE or (limit is not None and need >= SHARE * limit)


def call(work: Callable[..., T], *args: Any, limit: int | None) -> T:
    """`work(*args)` in a new Python process and its result. `work` and its arguments travel by pickle (a
    module-level function, paths and arrays); the child runs `_serve` of this module (`CHILD`), never the
    caller's main module, and finds modules where this process does. Raises what `work` raised where
    it can be pickled (else ChildFailed with its text), OverBudget when the child was stopped, and ChildFailed
    when the child ended without a word (a signal, the kernel's OOM killer)."""
    with tempfile.TemporaryDirectory(prefix="tfsmith-step-") as folder:
        order, answer, said = Path(folder) / "order", Path(folder) / "answer", Path(folder) / "stderr"
        order.write_bytes(pickle.dumps((list(sys.path), pickle.dumps((work, args)))))
        with said.open("wb") as stderr:
            child = subprocess.Popen([sys.executable, "-c", CHILD, str(order), str(answer)],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr)
            try:
                with memory.counting_child(child.pid):
                    _wait(child, limit)
            finally:
                if child.poll() is None:
                    child.kill()
                child.wait()
        if child.returncode != 0 or not answer.is_file():
            code = child.returncode
            how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
            killed = " (the kernel's OOM killer stops a process with SIGKILL)" if code == -signal.SIGKILL else ""
            line = f"its process ended with {how} and no result{killed}"
            raise ChildFailed(line, f"{line}\n{said.read_text(errors='replace')[-20000:]}")
        kind, payload = pickle.loads(answer.read_bytes())
    if kind == "ok":
        return payload  # type: ignore[no-any-return]
    raise payload


def _wait(child: subprocess.Popen[bytes], limit: int | None) -> None:
    """Until the child ends; stopped (OverBudget) when this process and it together reach the budget."""
    while child.poll() is None:
        own, theirs = memory.rss_bytes() or 0, memory.process_rss_bytes(child.pid) or 0
        memory.note_family_reading(own + theirs)
        if limit is not None and own + theirs >= STOP_AT * limit:
            child.kill()
            raise OverBudget(f"not enough memory: its process took {memory.text(theirs)} (and growing) beside the "
                             f"{memory.text(own)} in use, and {memory.text(limit)} is usable (--memory); stopped "
                             "before the machine ran out")
        try:
            child.wait(INTERVAL_S)
        except subprocess.TimeoutExpired:
            pass


def _serve(order: Path, answer: Path) -> None:
    """In the child: run the order, and write ("ok", result) or ("error", the exception, or a ChildFailed
    carrying its text) to `answer`, whole or not at all."""
    from builder.optimize.tfenv import quiet_native_stderr, setup

    path, packed = pickle.loads(order.read_bytes())
    sys.path[:] = path
    setup()  # TensorFlow's environment, as the parent set it before its own import
    try:
        work, args = pickle.loads(packed)
        with quiet_native_stderr():  # the child's words come back in `answer`, never onto the terminal
            message: tuple[str, Any] = ("ok", work(*args))
    except BaseException as error:  # noqa: BLE001 - everything goes back to the parent, which decides
        text = "".join(traceback.format_exception(error))
        try:
            if not getattr(error, "full_text", None):
                error.full_text = text  # type: ignore[attr-defined]
            pickle.loads(pickle.dumps(error))
            message = ("error", error)
        except Exception:  # noqa: BLE001 - an exception that does not survive pickling: its text does
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            message = ("error", ChildFailed(first, getattr(error, "full_text", None) or text,
                                            getattr(error, "cause", None)))
    partial = answer.with_suffix(".partial")
    partial.write_bytes(pickle.dumps(message))
    partial.replace(answer)
