"""What the steps of one optimize run share: `Run` (what every step reads: the options, the plan, the contract,
the original's answers, the staging folder, the ledger) and `Made` (what the steps have made so far). Each step
is a function `(Run, Made) -> Made` (`builder.optimize.pipeline.STEPS`), so the run reads as its list of steps
and no step takes a long list of arguments or reaches into another's locals.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from builder.optimize.ledger import Ledger
from builder.optimize.options import Options
from builder.report import ArtifactResult, Candidate, Capacity, ModelContract
from builder.say import Say

#: Runners the evaluation opened, by `runner_key`: the race takes each one over instead of loading its file
#: again (MobileNetV2: the SavedModel on TensorFlow 0.9 s, the int8 IR 0.4 s, and their first calls).
Opened = dict[tuple[str, str, "str | None"], Any]


@dataclass(frozen=True)
class Run:
    """Read by every step; made once, after the plan, the original's answers and the contract."""

    options: Options
    plan: Any  # planning.Plan
    contract: ModelContract
    #: the ORIGINAL model's answers on the gate's rows (`Plan.gate_x`): what every artifact is judged against
    reference: Mapping[str, np.ndarray]
    staging: Path
    scratch: Path
    say: Say
    #: the plan's ledger, where every step beyond the SavedModel records what became of it
    ledger: Ledger


@dataclass(frozen=True)
class Made:
    """What the steps have made so far; each step returns a new one (`dataclasses.replace`)."""

    #: the float model the files are made from: the pruned one where pruning was kept, else the original's
    model: Any = None
    sparsity: Any = None  # prune.Sparsity of the pruned model, None when unpruned
    saved_model: Path | None = None
    produced: tuple[tuple[str, Path], ...] = ()  # (format, path) of every file written
    results: tuple[ArtifactResult, ...] = ()
    #: runners opened by the evaluation and the baseline, taken over by the race (emptied after it)
    opened: Opened = field(default_factory=dict)
    baseline: ArtifactResult | None = None
    candidates: tuple[Candidate, ...] = ()
    choice: Any = None  # select.Choice
    serving: Capacity | None = None
    #: what opening the chosen artifact on its runtime added to the resident set (`capacity_step`)
    chosen_runner_bytes: int | None = None


#: A step of the run.
Step = Callable[[Run, Made], Made]
