"""What an optimize run said about its optional steps, read from its report.json: the steps that ended without
a word of their own, and what became of pruning (kept, dropped with its cause, or not tried and why).

Every optional step the recipe asked for (pruning, QAT, each file beyond the SavedModel, serving_xla) has a ledger
entry by the end of a run (`builder.optimize.ledger`); one that was not done must carry a line in the notes
saying why, or be named in a line that does. The sweep counts pruning's outcomes over many models with these,
and the suite asserts the first.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from builder.report import Report

DONE, UNACCOUNTED = "done", "unaccounted"
PRUNING = "pruning"


@dataclass(frozen=True)
class Pruning:
    """What became of pruning in one run: `verdict` is "kept", "dropped", "not pruned" or "not asked";
    `why` the ledger's cause (empty when kept); `train_rows` DATA's training rows."""

    verdict: str
    why: str
    train_rows: int
    one_shot: bool = False
    train_labels: bool = False  # DATA has y_train for some output


def silent_steps(out: Path) -> list[str]:
    """The optional steps of the run in `out` that ended without a line saying why: an entry that is not done
    whose own line is empty and that no line of the run names (one line may say it for several steps it names),
    one the ledger had to mark unaccounted, or a file said done that is not there."""
    report = Report.load(out)
    problems = []
    last = {a.step: a for a in report.attempts}  # a step's last entry is what became of it
    for step, attempt in last.items():
        if attempt.outcome == UNACCOUNTED:
            problems.append(f"{step}: {attempt.line}")
        elif attempt.outcome != DONE and not attempt.line.strip() and not any(step in n for n in report.notes):
            problems.append(f"{step}: {attempt.outcome} ({attempt.cause}) without a line naming it")
        elif attempt.outcome == DONE and step.endswith((".tflite", ".xml")) and not (out / step).exists():
            problems.append(f"{step}: done, but {step} is not in the output")
    return problems


def pruning_outcome(out: Path, data: Path | None = None) -> Pruning:
    """What became of pruning in the run in `out`; `data`: its DATA file (for whether it had training labels)."""
    report = Report.load(out)
    entries = [a for a in report.attempts if a.step == PRUNING]
    one_shot = any("one-shot" in n for n in report.notes)
    rows = report.data.train_rows
    labels = False
    if data is not None and data.is_file():
        with np.load(data, allow_pickle=False) as held:
            rows = rows or max((len(held[k]) for k in held.files if k.startswith("x_train")), default=0)
            labels = any(k.startswith("y_train") for k in held.files)
    if not entries:
        return Pruning("not asked", "", rows, one_shot, labels)
    last = entries[-1]
    if last.outcome == DONE and report.sparsity:
        return Pruning("kept", "", rows, one_shot, labels)
    if last.outcome == DONE:  # done, then its export failed: the ledger said so under another step
        return Pruning("dropped", "the pruned SavedModel could not be exported", rows, one_shot, labels)
    if last.outcome == "dropped":
        return Pruning("dropped", last.cause or last.line, rows, one_shot, labels)
    return Pruning("not pruned", last.cause or last.line, rows, one_shot, labels)
