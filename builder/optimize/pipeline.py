"""The optimize run: the plan, the original's answers and the contract, then the list of steps.

plan (`planning`: recipe, model, DATA; every refusal happens here, before any work) -> the ORIGINAL model's
answers on the gate's rows -> the contract (`contract`) -> `STEPS`, each `(Run, Made) -> Made` over the run's
shared context (`builder.optimize.context`) -> the report, read from what the steps made and from the ledger
(`builder.optimize.ledger`: every optional step, done, dropped or skipped, with its one-line cause) -> publish.

Everything is built in a staging folder next to `--out` and moved into place in one rename at the end, so a
bad input or a crash leaves `--out` as it was. The quality gate runs after publication: rejected artifacts are
kept (and marked) so the user can inspect them, and the command exits with EXIT_GATE_FAILED (3).
"""

from __future__ import annotations

import datetime as _dt
import json
import shutil
import tempfile
from pathlib import Path

from builder.optimize import select, steps
from builder.optimize.context import Made, Run, Step
from builder.optimize.contract import answered_gate, check_repeatable, settle_contract
from builder.optimize.layout import SAMPLES_NAME
from builder.optimize.options import Options, Optimized, stage
from builder.optimize.planning import Plan, make_plan, planned_steps
from builder.optimize.target import INTERESTING_FLAGS, host_facts
from builder.measure import memory
from builder.report import DataInfo, Gate, MemoryUse, ModelContract, ModelInfo, Report
from builder.say import Say
from builder.staging import staged_dir

#: The run after the plan, in order (NNCF's pipelines have this shape: a list of steps with one interface).
STEPS: tuple[Step, ...] = (
    steps.prune_step,  # pruned + fine-tuned, kept only if it agrees with the original
    steps.export_step,  # the serving SavedModel (with serving_xla where the recipe asks)
    steps.qat_step,  # quantization-aware training to an int8 .tflite
    steps.release_step,  # the original's weights out of memory: every later step reads files
    steps.convert_step,  # each .tflite of the recipe, OpenVINO's IR float and int8
    steps.evaluate_step,  # every file on its runtime, judged against the original
    steps.baseline_step,  # the original's own SavedModel on TensorFlow: the reference row
    steps.samples_step,  # samples.npz: the original's requests and answers, for the smoke test
    steps.measure_step,  # the race: every artifact x runtime x precision in one interleaved loop
    steps.drop_unrunnable_xla,  # serving_xla out of the served folder where it cannot run here
    select.choice_step,  # the fastest accepted candidate measured here, else by rule
    steps.capacity_step,  # the choice at one thread: what one core and this host serve
)


def run(options: Options, say: Say = lambda _: None) -> Optimized:
    """Do the whole optimization; raises TfsmithError for bad input with --out untouched."""
    from builder.optimize import report as reporting
    from builder.optimize.causes import keep_log

    plan = make_plan(options, say)
    loaded = plan.loaded
    with stage(say, "the original model's outputs on the held-out rows"):
        plan.gate_x, reference, gate_note = answered_gate(loaded, plan.gate_x, plan.data.held_out_rows, options.model)
        check_repeatable(loaded, plan.gate_x, reference, options.model)
    plan.ledger.note(gate_note)
    contract = settle_contract(plan, reference)
    contract = with_accepted_ranges(contract, plan, say)
    if loaded.others:  # every other signature is kept and judged too, on rows of its own
        from builder.optimize import signatures as sigs

        with stage(say, f"the original's other signatures ({', '.join(loaded.others)})"):
            plan.checks = sigs.make_checks(loaded.others, loaded.predict_signature, plan.data.x_val)
        plan.ledger.note(sigs.plan_note(contract.signature, plan.checks))
    out = Path(options.out).resolve()
    scratch = Path(tempfile.mkdtemp(prefix="tfsmith-optimize-"))
    try:
        with staged_dir(out) as staging:  # --out appears whole, or stays as it was
            context = Run(options, plan, contract, reference, staging, scratch, say, plan.ledger)
            made = Made(model=loaded.keras_model)
            for step in STEPS:
                made = step(context, made)
            plan.ledger.account_for(planned_steps(plan.asked or plan.recipe))
            report = relocated(make_report(context, made), staging, out)  # files named where they will be
            with stage(say, "writing report.json, report.md, report.png"):
                reporting.write_report(report, staging)
                for name, text in plan.ledger.logs.items():
                    keep_log(name, text, staging)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        loaded.close()
    return Optimized(report=report, out=Path(options.out))


def with_accepted_ranges(contract: ModelContract, plan: Plan, say: Say) -> ModelContract:
    """The contract with the ranges the original accepts of its integer inputs, measured on it
    (`builder.optimize.accepted`), and a note for each: the server refuses what the original refuses."""
    from dataclasses import replace

    from builder.model.signature import is_integer
    from builder.optimize.accepted import measure_ranges, range_note

    loaded = plan.loaded
    if not any(is_integer(s.dtype) for s in contract.inputs):
        return contract
    with stage(say, "the values the original accepts of its integer inputs"):
        ranges, notes = measure_ranges(loaded.predict, contract.inputs, plan.gate_x)
    for note in [*notes, range_note(ranges)]:
        plan.ledger.note(note)
    return replace(contract, input_ranges=ranges) if ranges else contract


def make_report(run: Run, made: Made) -> Report:
    """The report of a finished run: what the steps made, and the ledger's attempts and notes."""
    from builder.optimize import tfenv

    plan, options, contract, data, loaded = run.plan, run.options, run.contract, run.plan.data, run.plan.loaded
    choice = made.choice
    chosen_result = next((r for r in made.results if r.path == choice.artifact), None)
    passed = bool(chosen_result and chosen_result.accepted)
    return Report(
        tfsmith=_version(),
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        model=ModelInfo(str(options.model), loaded.facts.format, loaded.facts.keras_version, loaded.params, contract),
        data=DataInfo(options.data, data.train_rows, len(next(iter(data.x_calib.values()))) if data.x_calib else 0,
                      data.calibration_from, data.held_out_rows, tuple(sorted(data.y_val))),
        recipe=plan.recipe.to_dict(), reasons=tuple(plan.reasons), notes=plan.ledger.lines(),
        target={"name": plan.facts.name, "arch": plan.facts.arch, "is_host": plan.facts.is_host,
                "gpu_capabilities": list(plan.facts.gpu_capabilities),
                "features": sorted(plan.facts.features & set(INTERESTING_FLAGS))},
        host={"cpu_features": sorted(host_facts().features), "threads": options.threads,
              "tensorflow": tfenv.tensorflow().__version__, "litert": _version("ai-edge-litert"),
              "openvino": _version("openvino") if steps.openvino_available() else None},
        baseline=made.baseline, sparsity=pruning_bought(run, made),
        artifacts=tuple(made.results), chosen=choice.artifact, chosen_runtime=choice.runtime, samples=SAMPLES_NAME,
        gate=Gate(options.max_accuracy_drop, options.max_relative_error, "original", passed,
                  chosen_result.reason if chosen_result else f"{choice.artifact} was not produced"),
        selection=choice.selection, chosen_signature=choice.signature, capacity=made.serving,
        attempts=plan.ledger.attempts(),
        memory=MemoryUse(plan.ledger.budget.limit if plan.ledger.budget else None, memory.run_peak_bytes(),
                         made.chosen_runner_bytes))


def pruning_bought(run: Run, made: Made) -> dict | None:
    """The pruned model's sparsity and what it bought (`pruning_gains`): the unpruned float .tflite's size and
    gzip size, and per runtime timed here whether sparse kernels ran it. None when the model is not pruned."""
    from builder.optimize.pruning_gains import sparse_kernels

    if made.sparsity is None:
        return None
    plan = run.plan
    runtimes = [c.runtime for c in made.choice.selection.candidates] or [r.runtime for r in made.results]
    return {**made.sparsity.to_dict(), "one_shot": plan.one_shot, "unpruned_fp32": plan.unpruned_fp32,
            "unpruned_why": plan.unpruned_why, "stored_sparse": plan.stored_sparse,
            "sparse_kernels": sparse_kernels(runtimes, host_facts().features, plan.stored_sparse)}


def relocated(report: Report, staging: Path, out: Path) -> Report:
    """The report with every mention of the staging folder (a runtime's error naming the file it could not
    load, say) turned into the folder the user gets: the staging folder is gone once the run ends."""
    text = report.to_json().replace(json.dumps(str(staging))[1:-1], json.dumps(str(out))[1:-1])
    return Report.from_dict(json.loads(text))


def _version(package: str = "tfsmith") -> str:
    try:
        from importlib.metadata import version

        return version(package)
    except Exception:
        return "unknown"
