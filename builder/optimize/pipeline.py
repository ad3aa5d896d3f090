"""The optimize run, step after step (each step lives in the room of its idea):

plan (`planning`: recipe, model, DATA; every refusal happens here, before any work) -> reference outputs of the
ORIGINAL model -> the contract (`contract`) -> prune (kept only if it still agrees with the original, for auto)
-> export -> convert (.tflite files, and OpenVINO's IR: float, NNCF int8) -> QAT -> evaluate (per output, vs the
original) -> measure candidates (`steps` and `candidates`: artifact x runtime x precision, builder.measure's
timing loop, the cost of a new input shape) -> select (`select`) -> the choice at one thread (what one core and
this host serve) -> samples.npz -> report -> publish.

Everything is built in a staging folder next to `--out` and moved into place in one rename at the end, so a
bad input or a crash leaves `--out` as it was. The quality gate runs after publication: rejected artifacts are
kept (and marked) so the user can inspect them, and the command exits with EXIT_GATE_FAILED (3).
"""

from __future__ import annotations

import datetime as _dt
import json
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any


from builder.optimize.contract import check_repeatable, original_answers, settle_contract
from builder.optimize.layout import SAMPLES_NAME, TF
from builder.optimize.options import Options, Optimized, stage
from builder.optimize.planning import make_plan
from builder.optimize.select import select_step
from builder.optimize.steps import (baseline_step, capacity_step, convert_step, drop_unrunnable_xla, evaluate_step,
                                    export_step, measure_step, openvino_available,
                                    prune_step, qat_step, runner_key, samples_step, Opened)
from builder.optimize.target import INTERESTING_FLAGS, host_facts
from builder.report import DataInfo, Gate, ModelInfo, Report
from builder.say import Say
from builder.staging import staged_dir

# --- the run ----------------------------------------------------------------------------------------------


def run(options: Options, say: Say = lambda _: None) -> Optimized:
    """Do the whole optimization; raises TfsmithError for bad input with --out untouched."""
    from builder.optimize import report as reporting
    from builder.optimize import tfenv

    from builder.optimize.causes import keep_log

    plan = make_plan(options, say)
    tf = tfenv.tensorflow()
    data, loaded = plan.data, plan.loaded
    with stage(say, "the original model's outputs on the held-out rows"):
        reference = original_answers(loaded, plan.gate_x, options.model)
        check_repeatable(loaded, plan.gate_x, reference, options.model)
    contract = settle_contract(plan, reference)
    data = plan.data  # without the labels that fit no task
    if loaded.others:  # every other signature is kept and judged too, on rows of its own
        from builder.optimize import signatures as sigs

        with stage(say, f"the original's other signatures ({', '.join(loaded.others)})"):
            plan.checks = sigs.make_checks(loaded.others, loaded.predict_signature, data.x_val)
        plan.notes.append(sigs.plan_note(contract.signature, plan.checks) or "")
    out = Path(options.out).resolve()
    scratch = Path(tempfile.mkdtemp(prefix="tfsmith-optimize-"))
    try:
        with staged_dir(out) as staging:  # --out appears whole, or stays as it was
            model, sparsity, prune_notes = prune_step(plan, contract, reference, options, say)
            plan.notes.extend(prune_notes)
            saved_model, exported = export_step(plan, model, contract, staging, say)
            if exported is not model:  # the pruned model could not be exported: the original's is served
                model, sparsity = exported, None
            produced = convert_step(plan, saved_model, conversion_source(plan, saved_model, sparsity), staging, say,
                                    original_weights=sparsity is None and exported is plan.loaded.keras_model)
            produced += qat_step(plan, model, sparsity is not None, contract, reference, staging, scratch, say)
            opened: Opened = {}  # the evaluation's runners, each taken over by its candidate in the race
            results = evaluate_step(produced, staging, plan, contract, reference, options, say, opened)
            with stage(say, "the float baseline (SavedModel signature)"):
                baseline, baseline_runner = baseline_step(plan, contract, reference, options)
            if baseline_runner is not None:
                opened[runner_key(plan.loaded.saved_model_dir, TF, contract.signature)] = baseline_runner
            samples_step(staging, plan, contract, reference)
            unpruned_export = sparsity is None and any(r.format == "saved_model" for r in results)
            results, candidates, extra = measure_step(results, staging, plan, contract, reference,
                                                      None if unpruned_export else loaded.saved_model_dir, options, say,
                                                      opened)
            opened.clear()  # what the race did not take over is not held for the rest of the run
            results = drop_unrunnable_xla(results, candidates, staging, plan)
            same = next((r for r in results if r.format == "saved_model"), None) if sparsity is None else None
            if baseline is not None and same is not None:  # the original's weights, re-exported: one measurement
                baseline = replace(baseline, latency_us=same.latency_us, throughput=same.throughput,
                                   extra={**baseline.extra, "same_as": same.path})
            elif baseline is not None and "baseline" in extra:
                baseline = replace(baseline, latency_us=extra["baseline"], throughput=extra["baseline_throughput"])
            choice, select_notes = select_step(plan.recipe, plan.facts, results, candidates, contract.signature)
            chosen, runtime, selection = choice.artifact, choice.runtime, choice.selection
            plan.notes.extend(select_notes)
            chosen_result = next((r for r in results if r.path == chosen), None)
            passed = bool(chosen_result and chosen_result.accepted)
            serving = (capacity_step(staging, chosen, runtime, choice.signature, plan, say)
                       if selection.measured and passed else None)
            if serving is not None:
                plan.notes.append(serving.line())
            if plan.checks:
                from builder.optimize import signatures as sigs

                plan.notes.append(sigs.served_note(chosen, runtime, contract.signature, plan.checks, passed) or "")
            report = Report(
                tfsmith=_version(),
                created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                model=ModelInfo(str(options.model), loaded.facts.format, loaded.facts.keras_version, loaded.params,
                                contract),
                data=DataInfo(options.data, data.train_rows, len(next(iter(data.x_calib.values()))) if data.x_calib else 0,
                              data.calibration_from, data.held_out_rows, tuple(sorted(data.y_val))),
                recipe=plan.recipe.to_dict(), reasons=tuple(plan.reasons), notes=tuple(plan.notes),
                target={"name": plan.facts.name, "arch": plan.facts.arch, "is_host": plan.facts.is_host,
                        "gpu_capabilities": list(plan.facts.gpu_capabilities),
                        "features": sorted(plan.facts.features & set(INTERESTING_FLAGS))},
                host={"cpu_features": sorted(host_facts().features), "threads": options.threads,
                      "tensorflow": tf.__version__, "litert": _version("ai-edge-litert"),
                      "openvino": _version("openvino") if openvino_available() else None},
                baseline=baseline, sparsity=sparsity.to_dict() if sparsity else None, artifacts=tuple(results),
                chosen=chosen, chosen_runtime=runtime, samples=SAMPLES_NAME,
                gate=Gate(options.max_accuracy_drop, options.max_relative_error, "original", passed,
                          chosen_result.reason if chosen_result else f"{chosen} was not produced"),
                selection=selection, chosen_signature=choice.signature, capacity=serving)
            report = relocated(report, staging, out)  # what it says of files names them where they will be
            with stage(say, "writing report.json, report.md, report.png"):
                reporting.write_report(report, staging)
                for name, text in plan.logs.items():
                    keep_log(name, text, staging)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        loaded.close()

    return Optimized(report=report, out=Path(options.out))


def conversion_source(plan: Any, saved_model: Path | None, sparsity: Any) -> Path | None:
    """The SavedModel the .tflite files and the IR are converted from: the served one, except for a
    mixed-precision model not pruned, whose float32 twin converts where the original cannot."""
    return saved_model if sparsity is not None else (plan.loaded.convert_from or saved_model)


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
