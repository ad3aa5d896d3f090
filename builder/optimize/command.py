"""`tfsmith optimize` as a command: `--explain`'s plan, or the run with progress, the table and the verdict."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any


from builder.errors import EXIT_GATE_FAILED
from builder.optimize.contract import original_answers, settle_contract
from builder.optimize.options import DEFAULT_MAX_RELATIVE_ERROR, Options
from builder.optimize.pipeline import run
from builder.optimize.planning import explain_lines, make_plan

# --- CLI glue -----------------------------------------------------------------------------------------


def explain_plan(*, model: Path, data: str, recipe: str, target: str | None, cuda_cc: str | None,
                 max_accuracy_drop: float, max_relative_error: float, threads: int, signature: str | None = None,
                 imports: tuple[str, ...] = (), memory: int | None = None) -> list[str]:
    """The plan for THIS model: loads it, reads its contract and DATA, and says what will (not) be done."""
    # --explain writes no output; the full texts its notes name go to a fresh temp folder instead of --out
    logs = Path(tempfile.mkdtemp(prefix="tfsmith-explain-"))
    try:
        return _explained(logs, Options(model=model, data=data, recipe_spec=recipe, target=target, out=logs,
                                        max_accuracy_drop=max_accuracy_drop, threads=threads, cuda_cc=cuda_cc,
                                        max_relative_error=max_relative_error, signature=signature,
                                        imports=imports, memory=memory))
    finally:  # the folder stays only when a note names a file in it
        if logs.is_dir() and not any(logs.iterdir()):
            logs.rmdir()


def _explained(logs: Path, options: Options) -> list[str]:
    """The plan's lines; the full texts its notes name are written to `logs`."""
    from builder.optimize import tfenv
    from builder.optimize.causes import keep_log

    with tfenv.quiet_native_stderr():
        plan = make_plan(options, lambda _: None)
        for name, text in plan.ledger.logs.items():
            keep_log(name, text, logs)
        reference = original_answers(plan.loaded, {k: v[:64] for k, v in plan.data.x_val.items()}, options.model)
        contract = settle_contract(plan, reference, rows=64)
    lines = explain_lines(plan.recipe, plan.reasons, plan.facts, None, contract, one_shot=plan.one_shot)
    if plan.loaded.others:
        lines.append(f"signatures: {contract.signature} (the contract), " + ", ".join(plan.loaded.others)
                     + ": every one is kept in every artifact and judged against the original")
    for spec in contract.outputs:
        lines.append(f"quality of {spec.name}: {spec.task} ({spec.task_why})")
    lines.append(steps_line(plan))
    lines += [f"note: {n}" for n in plan.ledger.lines()]
    plan.loaded.close()
    return lines


def steps_line(plan: Any) -> str:
    """Every step the recipe asked for beyond the SavedModel, as the plan's ledger has it before any work:
    to be tried (each may still drop out with a note), or skipped and why."""
    from builder.optimize.planning import planned_steps

    said = []
    for step in planned_steps(plan.asked or plan.recipe):
        skipped = next((a for a in reversed(plan.ledger.attempts()) if a.step == step), None)
        said.append(f"{step} (skipped: {skipped.cause})" if skipped is not None else step)
    return ("steps: " + "; ".join(said) + " (each one tried may still drop out, with a note)") if said else \
        "steps: none beyond the SavedModel"


def run_optimize_command(*, model: Path, data: str, recipe: str, target: str | None, out: Path,
                         max_accuracy_drop: float, explain: bool, threads: int, cuda_cc: str | None = None,
                         latency_runs: int = 300, max_relative_error: float = DEFAULT_MAX_RELATIVE_ERROR,
                         signature: str | None = None, imports: tuple[str, ...] = (), memory: int | None = None) -> int:
    """What `tfsmith optimize` does; returns the exit status (0, or EXIT_GATE_FAILED). In the tfsmith process
    itself, that status ends the process once everything is written, without the interpreter's teardown
    (`builder.optimize.fast_exit`)."""
    import os
    import sys

    from rich.console import Console
    from rich.table import Table

    from builder.optimize import fast_exit
    from builder.optimize import report as reporting

    done = fast_exit.arm()  # before TensorFlow is imported: its atexit handlers run before the exit
    if explain:
        for line in explain_plan(model=model, data=data, recipe=recipe, target=target, cuda_cc=cuda_cc,
                                 max_accuracy_drop=max_accuracy_drop, max_relative_error=max_relative_error,
                                 threads=threads, signature=signature, imports=imports, memory=memory):
            print(line)
        return done(0)
    # A handle on the real stderr, kept while native code's banners on fd 2 are silenced during the run.
    err = Console(file=os.fdopen(os.dup(2), "w", buffering=1), highlight=False, stderr=True)
    options = Options(model=model, data=data, recipe_spec=recipe, target=target, out=out,
                      max_accuracy_drop=max_accuracy_drop, threads=threads, cuda_cc=cuda_cc,
                      latency_runs=latency_runs, max_relative_error=max_relative_error, signature=signature,
                      imports=imports, memory=memory)
    from builder.optimize import tfenv

    from builder.optimize.progress import step_say

    with err.status("tfsmith optimize") as status, tfenv.quiet_native_stderr():
        outcome = run(options, say=step_say(err, status))
    report = outcome.report
    table = Table(title=f"tfsmith optimize -> {outcome.out}", caption=reporting.TIMINGS)
    for header in reporting.HEADERS:
        table.add_column(header, justify="left" if header in ("artifact", "format", "gate", "quality vs original") else "right")
    for row in reporting.table_rows(report):
        table.add_row(*row)
    out_console = Console()
    if not out_console.is_terminal:
        out_console = Console(width=200)
    out_console.print(table)
    for spec in report.contract.outputs:
        print(f"output {spec.name}: {spec.task} ({spec.task_why})")
    for note in report.notes:
        print(f"note: {note}")
    if report.sparsity:
        print(f"sparsity: target {report.sparsity['target']:.3f}, achieved {report.sparsity['achieved']:.3f}")
        from builder.optimize.pruning_gains import float_against_unpruned

        against = float_against_unpruned(report.sparsity, report.artifacts)
        if against:
            print(f"pruning bought: {against}")
    signature = "" if report.chosen_signature == "serving_default" else f", signature {report.chosen_signature}"
    pick = reporting.chosen_candidate(report)
    print(f"chosen: {report.chosen} on {reporting.runtime_text(report.chosen_runtime, pick.precision if pick else '')}"
          f"{signature} ({report.selection.how})")
    print(f"report: {outcome.out / reporting.REPORT_JSON} ({reporting.REPORT_MD}, {reporting.REPORT_PNG})")
    err.file.flush()
    if not outcome.gate_passed:
        sys.stderr.write(f"tfsmith: error: quality gate failed: {report.chosen}: {report.gate.chosen_reason}; "
                         f"artifacts kept in {outcome.out}, marked rejected\n")
        return done(EXIT_GATE_FAILED)
    return done(0)
