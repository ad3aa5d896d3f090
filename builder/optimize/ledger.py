"""The ledger of one optimize run: every optional step beyond the model's own SavedModel (pruning, a
conversion, a quantizer, the IR, serving_xla, quantization-aware training) goes through `Ledger.attempt`, which
runs it, measures its time and memory, and records what became of it as one `builder.report.Attempt`:
done, dropped (the library's own first error line, whole, and its full text in OUT/logs) or skipped (not
tried, and why). The run's notes are the ledger's lines in the order they happened; the report's `attempts`,
`notes` and `--explain` are all read from it, so a step never drops out in one of them and not another.

Why one mechanism: a model that loads and runs is always served, so every step beyond the floor must be able to
fail without taking the run down, and say why in one line. Written out at each call site (20-odd try/except
blocks), the lines drifted, some steps said nothing, and a drop was recorded in three places.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from builder.measure import memory
from builder.report import Attempt

T = TypeVar("T")

DONE, DROPPED, SKIPPED = "done", "dropped", "skipped"
#: A step the recipe asked for that ended with no entry at all: said in the report rather than hidden.
UNACCOUNTED = "unaccounted"


class Ledger:
    """What a run tried and noted, in order. Plain notes (facts the report states: the race, shapes, what
    serves) sit beside the attempts; `lines()` gives both as the report's notes."""

    def __init__(self, out: Path | str = ".", budget: Any = None) -> None:
        self.out = Path(out)
        #: the run's memory budget (`builder.optimize.budget.Budget`): an attempt that does not fit is skipped
        self.budget = budget
        self._entries: list[Attempt | str] = []
        #: full texts of the libraries' errors, written to OUT/logs/<name>.log with the output
        self.logs: dict[str, str] = {}

    # --- recording ---------------------------------------------------------------------------------------

    def log(self, name: str, text: str) -> Path:
        """Keep a full error text for OUT/logs/<name>.log; returns the path it will have."""
        self.logs[name] = text
        return self.out / "logs" / f"{name}.log"

    def add(self, entries: Iterable[Attempt]) -> None:
        """Entries decided elsewhere (the plan's skips, `builder.optimize.planning.skip`)."""
        self._entries.extend(entries)

    def note(self, text: str | None) -> None:
        """A fact the report states (not an attempt); empty texts are nothing to say."""
        if text:
            self._entries.append(text)

    def attempt(self, step: str, work: Callable[[], T], *, log: str, failed: str | None = None,
                kind: str | None = None, size: int | None = None) -> T | None:
        """`work()`, recorded: its result, or None and a DROPPED entry when it raises anything (whatever a
        library raises, the run goes on without this step). The line is `<failed>: <cause> (full text: <log>)`,
        `failed` defaulting to "<step> dropped"; the cause is the error's own `cause` attribute where it carries
        one (the converter's cleaned diagnostic), else its first line (`builder.optimize.causes.cause`), and
        the log its `full_text` where it has one, else the message and traceback.

        `kind` (and `size`, the bytes it reads; default the model's weights): what the memory budget knows the
        step as. A step that does not fit in it is SKIPPED without running, its line giving what it needs and
        what is usable; one that runs teaches the budget what its kind takes."""
        if kind is not None and self.budget is not None:
            refused = self.budget.refusal(kind, size)
            if refused is not None:
                self.skipped(step, f"not enough memory: {refused} (--memory)",
                             said=f"{failed or step + ' dropped'}: not enough memory: {refused} (--memory)")
                return None
        start, before = time.perf_counter(), memory.rss_bytes()
        with memory.watch() as peak:
            try:
                result = work()
            except Exception as error:  # noqa: BLE001 - a step beyond the floor drops out, never the model
                from builder.optimize.causes import cause, log_text

                said = getattr(error, "cause", None) or cause(error)
                full = getattr(error, "full_text", None) or log_text(error, step)
                self._record(step, DROPPED, said, f"{failed or step + ' dropped'}: {said}", log, full, start, before,
                             peak())
                return None
            finally:
                if kind is not None and self.budget is not None:
                    self.budget.learn(kind, before, peak(), size)
            self._record(step, DONE, "", "", None, None, start, before, peak())
        return result

    def dropped(self, step: str, cause: str, *, failed: str | None = None, log: str | None = None,
                full_text: str | None = None) -> None:
        """A step found unable to go on without an exception (a result judged and refused, a check that failed):
        the step's own entry when `attempt` just ran it (its time and memory kept), else a new one."""
        path = str(self.log(log, full_text)) if log is not None and full_text is not None else None
        line = f"{failed or step + ' dropped'}: {cause}" + (f" (full text: {path})" if path else "")
        self._settle(step, DROPPED, line, cause, path)

    def skipped(self, step: str, why: str, *, said: str | None = None) -> None:
        """A step not tried, and why (`said`: the line, default "<step> skipped: <why>"; "" when another
        entry's line says it already)."""
        self._entries.append(Attempt(step, SKIPPED, f"{step} skipped: {why}" if said is None else said, why))

    def kept(self, step: str, why: str) -> None:
        """A step that ran and whose result was judged and kept, with the judgement in one line."""
        self._settle(step, DONE, f"{step} kept: {why}", "")

    def _settle(self, step: str, outcome: str, line: str, cause: str, log: str | None = None) -> None:
        from dataclasses import replace

        last = self._entries[-1] if self._entries else None
        if isinstance(last, Attempt) and last.step == step and last.outcome == DONE and not last.line:
            self._entries[-1] = replace(last, outcome=outcome, line=line, cause=cause, log=log)
        else:
            self._entries.append(Attempt(step, outcome, line, cause, log))

    def _record(self, step: str, outcome: str, cause: str, line: str, log: str | None, full: str | None,
                start: float, before: int | None, peak: int | None = None) -> None:
        path = str(self.log(log, full)) if log is not None and full is not None else None
        if path is not None:
            line = f"{line} (full text: {path})"
        self._entries.append(Attempt(step, outcome, line, cause, path, round(time.perf_counter() - start, 3),
                                     memory.mib(before), memory.mib(memory.rss_bytes()), memory.mib(peak)))

    # --- reading -------------------------------------------------------------------------------------------

    def attempts(self) -> tuple[Attempt, ...]:
        return tuple(e for e in self._entries if isinstance(e, Attempt))

    def lines(self) -> tuple[str, ...]:
        """The run's notes: each plain note and each attempt that has something to say, in order."""
        return tuple(e if isinstance(e, str) else e.line for e in self._entries if isinstance(e, str) or e.line)

    def outcome(self, step: str) -> str | None:
        """What became of `step` (its last entry), None when the ledger has none."""
        return next((e.outcome for e in reversed(self.attempts()) if e.step == step), None)

    def unaccounted(self, steps: Iterable[str]) -> list[str]:
        """The steps of `steps` that the ledger has no entry for: a step that ended without a word."""
        known = {e.step for e in self.attempts()}
        return [s for s in steps if s not in known]

    def account_for(self, steps: Iterable[str]) -> list[str]:
        """Give every step of `steps` that has no entry an UNACCOUNTED one with a line saying so (no step of a
        run ends without a word, even one that was never reached); returns those steps."""
        missing = self.unaccounted(steps)
        for step in missing:
            self._entries.append(Attempt(step, UNACCOUNTED, f"{step}: not tried, and no step of the run said why",
                                         "no entry"))
        return missing

    @property
    def notes(self) -> "NoteSink":
        """A list-like view for code that appends notes (`notes.append(text)`, `notes.extend(texts)`)."""
        return NoteSink(self)


class NoteSink:
    """`append`/`extend` into the ledger's plain notes; iterating gives the ledger's lines."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger

    def append(self, text: str | None) -> None:
        self._ledger.note(text)

    def extend(self, texts: Iterable[str | None]) -> None:
        for text in texts:
            self._ledger.note(text)

    def __iter__(self) -> Iterator[str]:
        return iter(self._ledger.lines())

    def __len__(self) -> int:
        return len(self._ledger.lines())

    def __getitem__(self, index: Any) -> Any:
        return self._ledger.lines()[index]
