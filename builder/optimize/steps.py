"""The steps after the plan, each a function `(Run, Made) -> Made` over the run's shared context
(`builder.optimize.context`): prune (kept only if it agrees), export, convert, QAT, evaluate every file against
the original, the baseline, the samples, time the candidates, select, and what one core serves. Every step
beyond the model's own SavedModel goes through the ledger (`Run.ledger.attempt`): it may drop out, never the
model, and says why in one line."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from builder.errors import TfsmithError
from builder.optimize import isolated
from builder.optimize.context import Made, Opened, Run
from builder.optimize.contract import REPEAT_ROWS, answers_moved, contract_kept, fit_arguments, teacher_answers
from builder.optimize.layout import (FILE_NAMES, IR_FORMATS, SAMPLES_NAME, SAMPLE_ROWS, TF, XLA_SIGNATURE,
                                     evaluated_on)
from builder.optimize.options import Options, stage
from builder.optimize.planning import PRUNING, QAT, Plan
from builder.optimize.recipe import Recipe
from builder.optimize.ledger import DONE
from builder.report import ArtifactResult, Attempt, Candidate, Latency, ModelContract
from builder.say import Say

# --- prune (and keep it only if it still agrees) ---------------------------------------------------------


def prune_step(run: Run, made: Made) -> Made:
    """The pruned model when it agrees with the original within the gate; the original model on (and the
    ledger says why) when it does not, or when pruning fails: whatever the recipe, every file made from a model
    that disagrees would fail the gate, and the model is always served.

    "Agrees" is fidelity to the original on the held-out rows: top-1 disagreement within --max-accuracy-drop
    for classification outputs, relative error within --max-relative-error for regression outputs.
    """
    from builder.optimize import prune, prune_keras3, prune_oneshot, quality, tfenv
    from builder.optimize.model_io import keras_serving_fn

    plan, contract, options = run.plan, run.contract, run.options
    recipe, data, loaded = plan.recipe, plan.data, plan.loaded
    # tfmot for a tf_keras model; tfsmith's own magnitude pruning for a Keras 3 one (tfmot cannot take it)
    if not recipe.pruning:
        return made
    original, pruner = ((loaded.keras_model, prune.prune_model) if loaded.keras_model is not None
                        else (loaded.keras3(), prune_keras3.prune_model))
    if original is None:
        return made

    def answers(model: Any) -> dict[str, np.ndarray]:
        serve = keras_serving_fn(model, contract.inputs, tuple(o.tensor() for o in contract.outputs))
        from builder.optimize.budget import rows_by_input_bytes

        return _batched_keras(serve, plan.gate_x, tfenv.tensorflow(), batch=rows_by_input_bytes(plan.gate_x))

    def judged(model: Any) -> tuple[bool, str]:
        _, passed, why = quality.judge_retrained(answers(model), run.reference, data.y_val, contract.outputs,
                                                 max_accuracy_drop=options.max_accuracy_drop,
                                                 max_relative_error=options.max_relative_error)
        return passed, why

    def pruned_and_called() -> tuple[Any, Any, dict[str, np.ndarray]]:
        if plan.one_shot:  # nothing to fine-tune on or with: the highest sparsity the gate keeps, untrained
            model, sparsity, tried = prune_oneshot.prune_one_shot(original, judged)
            run.ledger.note(prune_oneshot.search_note(tried))
            return model, sparsity, answers(model)
        teacher = teacher_answers(plan)  # the original's own answers for outputs without labels, before pruning
        x_train, y_train, losses = fit_arguments(original, contract, data.x_train, data.y_train, run.reference,
                                                 teacher)
        model, sparsity = pruner(original, recipe.pruning, x_train, y_train, losses)
        return model, sparsity, answers(model)

    with stage(run.say, "pruning one-shot by magnitude at the highest sparsity the gate keeps" if plan.one_shot else
               f"pruning to {recipe.pruning.target_sparsity:.0%} with {recipe.pruning.epochs} fine-tuning epochs"):
        done = run.ledger.attempt(PRUNING, pruned_and_called, log="prune", kind="prune")
    if done is None:
        return made
    model, sparsity, pruned_out = done
    # Judged by the gate every file made from it gets, on the same rows (against the original: with DATA's
    # held-out labels the accuracy drop, agreement or fidelity without), and, since fine-tuning can trade
    # answers, by the answers it loses of those the original gets right (`quality.judge_retrained`).
    metrics, passed, why = quality.judge_retrained(pruned_out, run.reference, data.y_val, contract.outputs,
                                                   max_accuracy_drop=options.max_accuracy_drop,
                                                   max_relative_error=options.max_relative_error)
    agreement = quality.agreement_summary(metrics)
    if passed:
        run.ledger.kept(PRUNING, f"the pruned float model keeps the original's answers within the gate ({why}; "
                                 f"agreement {agreement:.3f})")
        measure_unpruned(run)
        return replace(made, model=model, sparsity=sparsity)
    run.ledger.dropped(PRUNING, f"the pruned float model changed the original's answers beyond the gate ({why}; "
                                f"agreement {agreement:.3f}), so the original's weights go on")
    return made


def measure_unpruned(run: Run) -> None:
    """The unpruned model's float .tflite (the plan's probe of the original's weights), its size and gzip size
    for the report beside the pruned one's; or why there is none to compare."""
    from builder.optimize.pruning_gains import unpruned_float

    plan = run.plan
    if plan.no_tflite is not None:
        plan.unpruned_why = "the model has no plain .tflite"
    elif plan.loaded.others:
        plan.unpruned_why = "the pruned .tflite carries the model's other signatures, the probe only one"
    elif plan.probe_fp32 is None:
        plan.unpruned_why = "the unpruned float conversion was not made while planning"
    else:
        plan.unpruned_fp32 = unpruned_float(plan.probe_fp32, run.scratch)


def _batched_keras(serve: Callable, x: Mapping[str, np.ndarray], tf: Any, batch: int = 256) -> dict[str, np.ndarray]:
    rows = len(next(iter(x.values())))
    parts = [serve({k: tf.constant(v[i : i + batch]) for k, v in x.items()}) for i in range(0, rows, batch)]
    return {k: np.concatenate([np.asarray(p[k]) for p in parts]) for k in parts[0]}


# --- export, convert, QAT ---------------------------------------------------------------------------


def export_step(run: Run, made: Made) -> Made:
    """The serving SavedModel (the optimized float model, the contract's signature) into staging: the original's
    own SavedModel when the pruned model (or the Keras export with `serving_xla`) cannot be exported, the
    ledger saying why (and the files are then made from the original's weights)."""
    from builder.optimize.model_io import export_keras, saved_signature

    plan, contract = run.plan, run.contract
    loaded, recipe, model = plan.loaded, plan.recipe, made.model
    if loaded.tflite_path is not None:
        return made
    target = run.staging / FILE_NAMES["saved_model"]
    with stage(run.say, "exporting the serving SavedModel"):
        # the original re-exported from Keras only to add serving_xla, and never a mixed-precision model's
        # float32 twin in its place: that one is only converted
        if model is not None and (made.sparsity is not None or (recipe.export.xla and loaded.convert_from is None)):
            def exported() -> Any:
                export_keras(model, target, contract.inputs, tuple(o.tensor() for o in contract.outputs),
                             xla=recipe.export.xla)
                if made.sparsity is not None:  # every file is made from it: one that answers otherwise serves none
                    kept, differs = contract_kept(contract, *saved_signature(target, "serving_default"))
                    if not kept:
                        raise TfsmithError(f"the pruned model's SavedModel {differs}")
                return model

            step = "the pruned SavedModel" if made.sparsity is not None else XLA_SIGNATURE
            failed = "pruning dropped" if made.sparsity is not None else "the Keras export with serving_xla dropped"
            if run.ledger.attempt(step, exported, log="export", failed=failed, kind="export") is not None:
                if made.sparsity is not None and recipe.export.xla:  # serving_xla went into the pruned model's export
                    run.ledger.add([Attempt(XLA_SIGNATURE, DONE)])
                return replace(made, saved_model=target)
            shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(loaded.saved_model_dir, target)
        if recipe.export.xla:
            _add_xla(run, target)
    return replace(made, saved_model=target, model=loaded.keras_model, sparsity=None)


def _add_xla(run: Run, target: Path) -> None:
    """serving_xla beside the contract's signature, re-saved from the SavedModel itself (a Keras 3 export, a
    tf.Module); when TensorFlow cannot re-save it, the ledger says why and the SavedModel stays as it was."""
    from builder.optimize.model_io import add_xla_signature

    def added() -> None:
        try:
            # the SavedModel loaded and saved again: a copy of every weight
            apart_or_here(run, "export", add_xla_signature, target, run.plan.loaded.signature)
        except Exception:
            shutil.rmtree(target.with_name(target.name + ".xla"), ignore_errors=True)
            raise

    run.ledger.attempt(XLA_SIGNATURE, added, log="export-xla", failed="xla: serving_xla not added")


def conversion_source(plan: Plan, made: Made) -> Path | None:
    """The SavedModel the .tflite files and the IR are converted from: the served one, except for a
    mixed-precision model not pruned, whose float32 twin converts where the original cannot."""
    return made.saved_model if made.sparsity is not None else (plan.loaded.convert_from or made.saved_model)


def convert_step(run: Run, made: Made) -> Made:
    """The served SavedModel, then each .tflite of the recipe and OpenVINO's IR, converted from
    `conversion_source`; each conversion is an attempt in the ledger (a failure is one line and its log).

    Made from the original's unpruned weights, the float .tflite is the one the plan's probe already converted
    from them (the same converter, signature and weights; the gate judges it like any other file), not a second
    conversion (4-5 CPU seconds for MobileNetV2)."""
    from builder.optimize import evaluate, loads, quantize
    from builder.optimize import signatures as sigs
    from builder.optimize.model_io import copy_original

    plan = run.plan
    if plan.loaded.tflite_path is not None:
        path = run.staging / FILE_NAMES["tflite_original"]
        copy_original(plan.loaded, path)
        return replace(made, produced=(("tflite_original", path),))
    source, saved_model = conversion_source(plan, made), made.saved_model
    assert saved_model is not None and source is not None
    original_weights = made.sparsity is None
    produced: list[tuple[str, Path]] = [("saved_model", saved_model)]
    signature = plan.loaded.signature
    others = tuple(plan.loaded.others)  # converted into the same file: every signature is kept
    other_calib = sigs.calibration(plan.checks, plan.data.x_calib)
    formats = [f for f in plan.recipe.formats if f not in ("saved_model", "tflite_qat_int8", *IR_FORMATS)]
    if plan.no_tflite is not None:
        formats.append("tflite_select_tf")
    apart = in_a_process(run, "convert")
    float_file: Path | None = None  # the float .tflite once written: a big model's int8 is quantized from it
    evaluate.gzip_soon(saved_model)  # each file's gzip size measured while the next conversion runs
    with loads.shared() as load:  # one Python load of `source` for every conversion of it here
        for format in formats:
            mode = format.removeprefix("tflite_")
            if format == "tflite_fp32" and not original_weights:  # the pruned zeros stored sparse
                mode = "sparse_fp32"
            probed = plan.probe_fp32 if format == "tflite_fp32" and original_weights and not others else None
            path = run.staging / FILE_NAMES[format]

            def converted() -> Path:
                nonlocal mode
                if mode == "sparse_fp32":
                    try:
                        return converted_as(mode)
                    except isolated.OverBudget:
                        raise
                    except Exception as error:  # noqa: BLE001 - the plain float file is the second chance
                        from builder.optimize.causes import cause

                        mode = "fp32"
                        plan.notes.append(f"{FILE_NAMES[format]}: the pruned weights are stored dense: the converter "
                                          f"could not store them sparse ({cause(error)})")
                return converted_as(mode)

            def converted_as(mode: str) -> Path:
                if isinstance(probed, Path):
                    shutil.move(probed, path)
                elif probed is not None:
                    path.write_bytes(probed)
                if probed is not None:
                    plan.notes.extend(plan.probe_notes)
                elif apart and mode == "int8" and float_file is not None and original_weights and not others:
                    plan.notes.extend(int8_from_float(run, float_file, source, path, signature))
                elif apart or mode == "int8":
                    # full int8 runs the model in TFLite's calibrator, native code that can take the process down
                    # on a model it does not take (a Keras 3 stateful SimpleRNN: SIGSEGV while calibrating): apart,
                    # such a crash is a dropped file with its note, never the run (one more TensorFlow start, ~3 s)
                    plan.notes.extend(isolated.call(quantize.convert_to_file, source, mode, path, plan.data.x_calib,
                                                    signature, others, other_calib, limit=_limit(run)))
                else:
                    path.write_bytes(quantize.convert_saved_model(source, mode, plan.data.x_calib, plan.notes,
                                                                  signature=signature, others=others,
                                                                  other_calib=other_calib))
                return path

            with stage(run.say, f"converting to TFLite {mode}" + (" (converted while planning)" if probed else "")):
                done = run.ledger.attempt(FILE_NAMES[format], converted, log=f"convert-{mode}",
                                          failed=f"{FILE_NAMES[format]} not written: TFLite {mode} conversion failed",
                                          kind=None if probed else "convert")
            if done is None:
                path.unlink(missing_ok=True)
                continue
            if mode == "sparse_fp32":
                plan.stored_sparse = FILE_NAMES[format]
            if format == "tflite_select_tf":
                run.ledger.note(f"{FILE_NAMES[format]}: converted with Select TF ops (TFLite builtins plus TensorFlow "
                                "kernels); it runs on TensorFlow's own interpreter where TensorFlow carries the Flex "
                                "delegate, never on LiteRT")
            produced.append((format, path))
            evaluate.gzip_soon(path)
            if format == "tflite_fp32":
                float_file = path
        plan.probe_fp32 = None  # written out or not needed: not held in memory for the rest of the run
        produced += ir_files(run, source, load)
    return replace(made, produced=(*produced, *made.produced))  # QAT's file, trained before, listed last


def int8_from_float(run: Run, float_file: Path, saved_model: Path, path: Path, signature: str) -> list[str]:
    """A big model's full-int8 .tflite, calibrated and quantized from its float .tflite in a process of its own
    (`quantize.int8_from_float_file`: the converter's own later steps, without holding the SavedModel, its
    graph and MLIR's module beside them); where that route fails for any reason but memory, converted from the
    SavedModel as every other file is, with a note. The notes made."""
    from builder.optimize import quantize

    calib = run.plan.data.x_calib
    try:
        return isolated.call(quantize.int8_from_float_file, float_file, path, calib, saved_model, signature,
                             limit=_limit(run))
    except isolated.OverBudget:
        raise
    except Exception as error:  # noqa: BLE001 - the converter's whole route is the second chance
        from builder.optimize.causes import cause

        path.unlink(missing_ok=True)
        notes = isolated.call(quantize.convert_to_file, saved_model, "int8", path, calib, signature, (), None,
                              limit=_limit(run))
        return [f"int8: quantized from the SavedModel: quantizing the float .tflite failed ({cause(error)})", *notes]


def ir_files(run: Run, saved_model: Path, load: Any = None) -> list[tuple[str, Path]]:
    """OpenVINO's IR of the SavedModel (`builder.optimize.openvino_ir`): the float one, and the NNCF int8 one
    where the recipe quantizes to int8, calibrated on DATA's calibration rows here, at optimize time. Where
    OpenVINO is not installed, or refuses the model (its converter, NNCF, a model with several signatures),
    the ledger says why and optimize goes on without it. `load`: the SavedModel loaded already
    (`builder.optimize.loads.shared`), else it is loaded here."""
    plan, ledger = run.plan, run.ledger
    wanted = [f for f in IR_FORMATS if f in plan.recipe.formats]
    if not wanted:
        return []
    names = ", ".join(FILE_NAMES[f] for f in wanted)
    if not openvino_available():
        for n, format in enumerate(wanted):
            ledger.skipped(FILE_NAMES[format], "OpenVINO is not installed here",
                           said=f"{FILE_NAMES[format]} not written: OpenVINO is not installed here" if n else
                           f"{names} not written: OpenVINO is not installed here (pip install 'tfsmith[bench]')")
        return []
    from builder.optimize import evaluate, openvino_ir

    produced: list[tuple[str, Path]] = []
    fp32, int8 = FILE_NAMES["openvino_ir_fp32"], FILE_NAMES["openvino_ir_int8"]
    signature, others = plan.loaded.signature, tuple(plan.loaded.others)

    def converted() -> Any:
        """The float IR: written by a process of its own (its path back), or converted here (the model)."""
        if in_a_process(run, "ir"):
            return isolated.call(openvino_ir.convert_to_file, saved_model, signature, others, run.staging / fp32,
                                 limit=_limit(run))
        return openvino_ir.convert_saved_model(saved_model, signature, others, load=load)

    with stage(run.say, "converting to OpenVINO's IR (float)"):
        model = ledger.attempt(fp32, converted, log="convert-openvino", failed=f"{names} not written", kind="ir")
        if model is not None:
            written = model if isinstance(model, Path) else openvino_ir.write_ir(model, run.staging / fp32)
            produced.append(("openvino_ir_fp32", written))
            evaluate.gzip_soon(written)
    if "openvino_ir_int8" not in wanted:
        return produced
    if model is None:
        ledger.skipped(int8, "the float IR it is quantized from was not written")
        return produced

    def quantized() -> Path:
        rows = plan.recipe.quantization.calibration_samples
        if in_a_process(run, "nncf"):
            return isolated.call(openvino_ir.quantize_file, run.staging / fp32, plan.data.x_calib, rows,
                                 run.staging / int8, limit=_limit(run))
        float_ir = openvino_ir.read_ir(model) if isinstance(model, Path) else model
        return openvino_ir.write_ir(openvino_ir.quantize_int8(float_ir, plan.data.x_calib, rows), run.staging / int8)

    with stage(run.say, "quantizing OpenVINO's IR to int8 with NNCF on the calibration rows"):
        path = ledger.attempt(int8, quantized, log="quantize-openvino", failed=f"{int8} not written", kind="nncf")
    if path is not None:
        produced.append(("openvino_ir_int8", path))
        evaluate.gzip_soon(path)
    return produced


def _limit(run: Run) -> int | None:
    return run.ledger.budget.limit if run.ledger.budget is not None else None


def in_a_process(run: Run, kind: str) -> bool:
    """Whether a step of `kind` runs in a process of its own (`builder.optimize.budget.Budget.in_a_process`)."""
    return run.ledger.budget is not None and run.ledger.budget.in_a_process(kind)


def apart_or_here(run: Run, kind: str, work: Callable[..., Any], *args: Any) -> Any:
    """`work(*args)` in a process of its own where the budget says so (`in_a_process`), else here."""
    if in_a_process(run, kind):
        return isolated.call(work, *args, limit=_limit(run))
    return work(*args)


def qat_step(run: Run, made: Made) -> Made:
    """Quantization-aware training of the float model (pruning-preserving where it was pruned), converted to
    an int8 .tflite: an attempt in the ledger like every other step beyond the SavedModel."""
    from builder.optimize import quantize

    plan, contract, model = run.plan, run.contract, made.model
    recipe = plan.recipe
    if not recipe.quantization.qat or model is None:
        plan.train_answers = None  # the original's answers on the training rows: no later step fine-tunes
        return made
    path = run.staging / FILE_NAMES["tflite_qat_int8"]

    def trained_and_converted() -> Path:
        x_train, y_train, losses = fit_arguments(model, contract, plan.data.x_train, plan.data.y_train, run.reference,
                                                 teacher_answers(plan))
        qat_model = quantize.quantization_aware_train(
            model, x_train, y_train, losses,
            recipe.quantization.qat_epochs, recipe.pruning.batch_size if recipe.pruning else 32, pruned=made.sparsity is not None)
        path.write_bytes(quantize.convert_qat(qat_model, contract.inputs, tuple(o.tensor() for o in contract.outputs),
                                              plan.data.x_calib, run.scratch, like=model))
        return path

    with stage(run.say, f"quantization-aware training{' (pruning-preserving)' if made.sparsity is not None else ''}"):
        done = run.ledger.attempt(QAT, trained_and_converted, log="qat", kind="qat")
    plan.train_answers = None
    return made if done is None else replace(made, produced=(*made.produced, ("tflite_qat_int8", done)))


def release_step(run: Run, made: Made) -> Made:
    """The original's weights (and the pruned model's) out of this process once nothing needs them in memory:
    every step after this one reads files, and each conversion, evaluation and the race then has the memory the
    original held (for a BERT-base, its Keras model and its loaded export: about 1 GB)."""
    from builder.optimize import tfenv

    with stage(run.say, "releasing the original model's weights from memory (every later step reads its files)"):
        run.plan.loaded.release()
        made = replace(made, model=None)
        tfenv.give_memory_back()
    return made


# --- evaluate ------------------------------------------------------------------------------------------


def openvino_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("openvino") is not None


def evaluate_artifact(format: str, path: Path, rel: str, runtime: str, plan: Plan, contract: ModelContract,
                      reference: Mapping[str, np.ndarray], options: Options) -> tuple[ArtifactResult, Any]:
    """Outputs on the held-out rows with the serving runtime, judged per output against the original."""
    from builder.optimize import evaluate, quality

    runner = evaluate.Runner(runtime, path, options.threads, evaluated_signature(path, plan, contract))
    kept, differs = contract_kept(contract, runner.inputs, runner.outputs)
    outputs = runner.predict_all(plan.gate_x)
    metrics, passed, why = quality.judge(outputs, reference, plan.data.y_val, contract.outputs,
                                         max_accuracy_drop=options.max_accuracy_drop,
                                         max_relative_error=options.max_relative_error)
    # the same rows asked again: a file whose answers carry over between calls (a .tflite whose fused LSTM keeps
    # its state in variable tensors, as the converter makes it for a fixed batch) is no function to serve
    moved = answers_moved(outputs, runner.predict_all(repeated_rows(plan)))
    if moved:
        passed, why = False, (f"its answers change from call to call on the same rows ({moved}): state carried "
                              "between requests")
    verdict = judge_other_signatures(runner, plan.checks, options, contract.signature)
    raw, packed = evaluate.file_sizes(path)
    variables = evaluate.raw_bytes(path / "variables") if (path / "variables").is_dir() else 0
    extra: dict[str, Any] = {"signatures": list(runner.signatures)}
    if plan.checks:
        extra["other_signatures"] = dict(verdict.per_signature)
    # every failure said (the contract's outputs, then the other signatures); passing, the contract's numbers
    # and how every other signature was judged
    failures = [text for text, ok in ((why, passed), (verdict.why, verdict.passed)) if not ok and text]
    reason = differs if not kept else "; ".join(failures) if failures else "; ".join(t for t in (why, verdict.why) if t)
    result = ArtifactResult(
        path=rel, format=format, runtime=runtime, size_bytes=raw, gzip_bytes=packed, threads=options.threads,
        latency_us=Latency(0.0, 0.0, 0), throughput={},
        inputs=runner.inputs, outputs=runner.outputs, metrics=metrics, contract_kept=kept,
        accepted=passed and kept and verdict.passed, reason=reason, variables_bytes=variables, extra=extra)
    return result, runner


def repeated_rows(plan: Plan) -> dict[str, np.ndarray]:
    """The gate's first rows, asked again to see that a file answers them as it did: REPEAT_ROWS of them, or for
    a model of 100 MiB of weights or more (`budget.rows_per_call`), without a fixed batch, two: state carried
    from call to call shows on any row, and each row of a BERT-base-sized float file costs about 0.1 s on 2
    cores (six rows fewer on each of its files: about 4 s of an 8 GiB run's 5 min)."""
    from builder.model.rows import fixed_batch
    from builder.optimize.budget import FEW_ROWS, rows_per_call

    weights = plan.ledger.budget.weights if plan.ledger.budget is not None else None
    few = rows_per_call(weights or None) == FEW_ROWS and fixed_batch(plan.loaded.inputs) is None
    return {k: v[: 2 if few else REPEAT_ROWS] for k, v in plan.gate_x.items()}


def runner_key(path: Path, runtime: str, signature: str | None) -> tuple[str, str, str | None]:
    """What makes two runners the same: the file, the runtime, the signature asked for (None: the file's own).
    (`evaluate.Runner` takes the thread count too: optimize opens every one at --threads.)"""
    return str(Path(path).resolve()), runtime, signature


def runner_for(runtime: str, path: Path, asked: str | None, opened: Opened, loaded_folders: dict[str, Any],
               open_runner: Callable[[Any], Any]) -> Any:
    """The runner for `path` on `runtime` calling `asked`: the evaluation's own (taken out of `opened`, so no
    two candidates share one); else a new one (`open_runner(backend)`), which for a SavedModel on TensorFlow
    shares the load of the first runner of that folder (`loaded_folders`, filled here): serving_xla and
    TensorFlow's bf16 beside the f32 contract signature, one `tf.saved_model.load` instead of three
    (MobileNetV2: 0.6-1.5 s each)."""
    runner = opened.pop(runner_key(path, runtime, asked), None)
    folder = str(Path(path).resolve())
    if runner is None:
        first = loaded_folders.get(folder)
        runner = open_runner(first.shared_load(runtime) if first is not None else None)
    if runner.holds_saved_model:
        loaded_folders.setdefault(folder, runner)
    return runner


def evaluated_signature(path: Path, plan: Plan, contract: ModelContract) -> str | None:
    """The signature an artifact is called by: the contract's for a SavedModel or a file with several, else
    the file's own (None)."""
    return contract.signature if path.is_dir() or plan.checks else None


def judge_other_signatures(runner: Any, checks: tuple[Any, ...], options: Options, contract_signature: str) -> Any:
    """The artifact on this runtime, judged on every other signature of the original
    (`builder.optimize.signatures.judge`): present, the original's names and dtypes, within the gate."""
    from builder.optimize import quality
    from builder.optimize import signatures as sigs

    def judge_outputs(check: Any, answers: Mapping[str, np.ndarray], original: Mapping[str, np.ndarray]
                      ) -> tuple[bool, str]:
        _, passed, why = quality.judge(answers, original, {}, check.outputs,
                                       max_accuracy_drop=options.max_accuracy_drop,
                                       max_relative_error=options.max_relative_error)
        return passed, why

    return sigs.judge(runner.signature_of, runner.call, checks, judge_outputs, contract_signature)


def evaluate_step(run: Run, made: Made) -> Made:
    """Every file evaluated on its runtime (`evaluate_artifact`); each runner kept in `Made.opened` for the race
    while the memory budget has room for it and for the next evaluations' peaks (`keeps_room`; else it is
    closed, and the race opens it again when its turn comes). A file whose runner does not fit in the budget is
    rejected with both figures."""
    from builder.optimize import tfenv

    plan, contract, options, budget = run.plan, run.contract, run.options, run.ledger.budget
    results = []
    for index, (format, path) in enumerate(made.produced):
        with stage(run.say, f"evaluating {path.name}"):
            runtime = evaluated_on(format)
            kind, size = runner_kind(runtime, format), file_bytes(path)
            refused = budget.refusal(kind, size) if budget is not None and format != "saved_model" else None
            if refused is not None:
                results.append(unrunnable(format, path, runtime, plan, MemoryError(f"not enough memory: {refused} "
                                                                                   "(--memory)"), options))
                continue
            with budget.measured(kind, size) if budget is not None else contextlib.nullcontext():
                try:
                    result, runner = evaluate_artifact(format, path, path.name, runtime, plan, contract,
                                                       run.reference, options)
                except Exception as error:  # noqa: BLE001 - a file this host cannot run is rejected, with why
                    if format == "saved_model":
                        raise
                    result, runner = unrunnable(format, path, runtime, plan, error, options), None
            if runner is not None and keeps_room(budget, made.produced[index + 1:]):
                made.opened[runner_key(path, runtime, evaluated_signature(path, plan, contract))] = runner
            else:
                del runner
                # the runner's memory goes back to the machine once glibc is asked (a BERT-base-sized float .tflite
                # on LiteRT: 1.32 GiB open, 0.56 after; TensorFlow's too, its tensors taken from malloc: `tfenv.setup`)
                tfenv.give_memory_back()
        results.append(result)
    return replace(made, results=tuple(results))


def keeps_room(budget: Any, ahead: tuple[tuple[str, Path], ...]) -> bool:
    """Whether a runner just evaluated stays open for the race: while what is resident, plus what the largest
    evaluation still to come is expected to take at its peak (OpenVINO compiling a float IR took 7x its file
    for a BERT-base), fits in the race's share of the budget. Runners closed here are opened again by the
    race when their group comes (a few seconds each), rather than stacking under the next one's peak."""
    if budget is None:
        return True
    room = budget.room(RACE_SHARE)
    if room is None:
        return True
    needs = [budget.need(runner_kind(evaluated_on(format), format), file_bytes(path)) for format, path in ahead]
    return room > max(needs, default=0)


def runner_kind(runtime: str, format: str | None = None) -> str:
    """What the memory budget knows a runner of `runtime` as (`builder.optimize.budget.RULES`), and where the
    artifact's format is known, of that format: one runtime holds very different multiples of a file by its
    format (a BERT-base-sized model on LiteRT, opened and asked once: the float .tflite 1.84x its file, the
    float16 one 4.85x, widened to float32 beside its own copy; the dynamic-range one 2.05x), so a runner is
    sized by what a runner of its own format took, where one was opened (`Budget.need`)."""
    for family in ("tensorflow", "litert", "openvino"):
        if runtime.startswith(family):
            return f"runner:{family}" + (f"/{format}" if format else "")
    return "runner:tensorflow" + (f"/{format}" if format else "")


def file_bytes(path: Path) -> int:
    """An artifact's size: the file, or the folder's files (a SavedModel), or the IR's .xml and .bin."""
    path = Path(path)
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    extra = path.with_suffix(".bin") if path.suffix == ".xml" else None
    return path.stat().st_size + (extra.stat().st_size if extra is not None and extra.exists() else 0)


def unrunnable(format: str, path: Path, runtime: str, plan: Plan, error: BaseException,
               options: Options) -> ArtifactResult:
    """A file kept in OUT that this host's runtime cannot run (a Select-TF-ops .tflite on a TensorFlow without
    the Flex delegate, as the stock wheel is; a .tflite LiteRT cannot prepare at the held-out rows' shapes):
    rejected here, with the runtime's own first line, the log in OUT/logs and what serves it instead. A file the
    memory budget had no room to open (a MemoryError) is said to be that, not something the runtime cannot do."""
    from builder.optimize import evaluate
    from builder.optimize.causes import cause, log_text

    raw, packed = evaluate.file_sizes(path)
    if isinstance(error, MemoryError):
        reason = f"not evaluated: {cause(error)}"
    else:
        log = plan.log(f"run-{path.stem}", log_text(error, f"running {path.name} on {runtime}"))
        reason = (f"not run on this host: {runtime} cannot run {path.name}: {cause(error)} (full text: {log}); "
                  + ("a TensorFlow build with the Flex delegate can" if format == "tflite_select_tf"
                     else "the SavedModel in the same folder serves the model on TensorFlow"))
    return ArtifactResult(
        path=path.name, format=format, runtime=runtime, size_bytes=raw, gzip_bytes=packed, threads=options.threads,
        latency_us=Latency(0.0, 0.0, 0), throughput={}, inputs=(), outputs=(), metrics=(), contract_kept=False,
        accepted=False, reason=reason, extra={"runnable_here": False})


def baseline_step(run: Run, made: Made) -> Made:
    """The unoptimized float model served as a SavedModel (the original's signature): the reference row. Where
    the served SavedModel holds the original's own weights (unpruned, re-exported or copied), its evaluation is
    the baseline's (the same function on the same weights: one evaluation and one runner, not two); else the
    original's SavedModel is evaluated, and its runner is the race's for the baseline."""
    plan, contract = run.plan, run.contract
    if plan.loaded.saved_model_dir is None:
        return made
    served = next((r for r in made.results if r.format == "saved_model"), None)
    if served is not None and made.sparsity is None:
        from builder.optimize import evaluate

        raw, packed = evaluate.file_sizes(plan.loaded.saved_model_dir)
        return replace(made, baseline=replace(served, path="baseline", size_bytes=raw, gzip_bytes=packed,
                                              extra={**served.extra, "same_as": served.path}))
    with stage(run.say, "the float baseline (SavedModel signature)"):
        baseline, runner = evaluate_artifact("saved_model", plan.loaded.saved_model_dir, "baseline", TF, plan,
                                             contract, run.reference, run.options)
    made.opened[runner_key(plan.loaded.saved_model_dir, TF, contract.signature)] = runner
    return replace(made, baseline=baseline)


# --- samples ---------------------------------------------------------------------------------------------


def samples_step(run: Run, made: Made) -> Made:
    """samples.npz: `x/<input>` (original dtypes), `expected/<output>` (the ORIGINAL model's outputs),
    `y/<output>` (labels where DATA has them); the first SAMPLE_ROWS held-out rows, named keys always.
    Strings are fixed-width UTF-8 bytes (`S<n>`): np.load(allow_pickle=False) reads them back."""
    plan, contract, reference = run.plan, run.contract, run.reference
    from builder.optimize.data import as_bytes, numpy_dtype, sample_rows

    def typed(values: np.ndarray, dtype: str) -> np.ndarray:
        return as_bytes(values) if dtype == "string" else np.asarray(values, dtype=numpy_dtype(dtype))

    arrays: dict[str, np.ndarray] = {}
    # one request's rows (an input that takes no batch as declared); the gate's added rows are not samples
    inputs, rows = sample_rows(contract.inputs, plan.data.x_val, SAMPLE_ROWS)
    for spec in contract.inputs:
        arrays[f"x/{spec.name}"] = typed(inputs[spec.name], spec.dtype)
    for spec in contract.outputs:
        arrays[f"expected/{spec.name}"] = typed(reference[spec.name][:rows], spec.dtype)
        if spec.name in plan.data.y_val:
            arrays[f"y/{spec.name}"] = np.asarray(plan.data.y_val[spec.name][:rows])
    np.savez(run.staging / SAMPLES_NAME, **arrays)
    return made


# --- time the candidates --------------------------------------------------------------------------------


def measure_step(run: Run, made: Made) -> Made:
    """Time every artifact x runtime (x precision, x signature) in ONE interleaved loop, judge what runs
    differently from the evaluated path by the gate, and record each candidate's cost at a new input shape
    (`builder.optimize.candidates`); then rows/s of each artifact's own row. A runner the evaluation opened
    (`Made.opened`) is taken over by its candidate (once), not opened again: the same file on the same runtime
    at the same threads, and every candidate is still proved by one call at the data's shapes before it is
    timed, each warmed up by the loop before its first sample. The baseline is timed beside them (never chosen)
    unless the served SavedModel is the original's own, re-exported: then that row is its measurement."""
    plan, contract, reference, options, say, staging = (run.plan, run.contract, run.reference, run.options,
                                                         run.say, run.staging)
    results, opened = list(made.results), made.opened
    unpruned_export = made.sparsity is None and any(r.format == "saved_model" for r in results)
    baseline_dir = None if unpruned_export else plan.loaded.saved_model_dir
    from builder.measure import memory
    from builder.optimize import candidates as cands
    from builder.optimize import evaluate, quality, tfenv
    from builder.optimize.causes import cause

    def judge(runner: Any) -> tuple[bool, str]:
        """The gate on this runtime: the contract's outputs on the gate's rows (asked twice: answers that carry
        over between calls fail), then every other signature."""
        outputs = runner.predict_all(plan.gate_x)
        _, passed, why = quality.judge(outputs, reference, plan.data.y_val,
                                       contract.outputs, max_accuracy_drop=options.max_accuracy_drop,
                                       max_relative_error=options.max_relative_error)
        if not passed:
            return passed, why
        moved = answers_moved(outputs, runner.predict_all(repeated_rows(plan)))
        if moved:
            return False, f"its answers change from call to call on the same rows ({moved}): state carried between requests"
        verdict = judge_other_signatures(runner, plan.checks, options, contract.signature)
        return verdict.passed, verdict.why or why

    loaded_folders: dict[str, Any] = {}  # a SavedModel's first runner on TensorFlow, by folder

    held_to = run.ledger.budget  # the memory budget (`budget` below is the race's time)
    formats = {r.path: r.format for r in results}  # what the budget knows each file's runners by

    def opened_within_budget(runtime: str, path: Path, asked: str | None, backend: Any) -> Any:
        """A new runner, where the budget has room for it (one sharing a SavedModel's load needs no more)."""
        kind, size = runner_kind(runtime, formats.get(Path(path).name)), file_bytes(path)
        refused = held_to.refusal(kind, size) if held_to is not None and backend is None else None
        if refused is not None:
            raise MemoryError(f"not opened: not enough memory: {refused} (--memory)")
        with held_to.measured(kind, size) if held_to is not None and backend is None else contextlib.nullcontext():
            return evaluate.Runner(runtime, path, options.threads, asked, backend=backend)

    def make(runtime: str, path: Path, signature: str | None) -> Any:
        # a file with several signatures is called by the contract's key, as a request without one gets it
        asked = signature or (contract.signature if plan.checks else None)
        return runner_for(runtime, path, asked, opened if opened is not None else {}, loaded_folders,
                          lambda backend: opened_within_budget(runtime, path, asked, backend))

    pairs = sum(len(cands.candidate_pairs(r, contract, allowed_precisions(plan.recipe))) for r in results)
    budget = min(60.0, max(0.5, (pairs + (baseline_dir is not None)) * min(3.0, max(0.1, options.latency_runs / 100))))
    baseline_key = "baseline@tensorflow"

    def timer(calls: Mapping[str, Callable[[], Any]], share: float, entrants: Mapping[str, Any]
              ) -> tuple[dict[str, Latency], dict[str, Any]]:
        from builder.measure.race import Race

        if with_baseline[0]:  # the reference row: timed beside them (in the first group), never chosen
            calls = {**calls, baseline_key: baseline_runner.row_caller(plan.data.x_val)}
        with stage(say, f"timing {len(calls)} artifact x runtime pairs (interleaved, at most {share:.0f} s: each "
                        "until slower than the best beyond noise or the choice is settled)", timing=True):
            latencies, stops = evaluate.timed_run(calls, share, Race(entrants))
        timed.update(stops)
        return latencies, stops

    timed: dict[str, Any] = {}
    with_baseline = [baseline_dir is not None]
    baseline_runner = make(TF, baseline_dir, contract.signature) if baseline_dir is not None else None
    named = FILE_NAMES.get(plan.recipe.choose, plan.recipe.choose) if plan.recipe.choose_named else None
    precisions = allowed_precisions(plan.recipe)
    candidates: list[Candidate] = []
    latencies: dict[str, Latency] = {}
    rows_per_s: dict[str, dict[str, float]] = {}
    primaries = {r.path: cands.key(r.path, r.runtime, contract.signature if r.format == "saved_model" else "")
                 for r in results}
    best_so_far: tuple[ArtifactResult, Candidate, Latency] | None = None  # the best so far, timed beside each group
    # each group is formed when its turn comes, from the room left then: the runners the evaluation kept open
    # are closed after the first group, and what is resident falls
    left: list[Pair] = [(r, runtime, signature) for r in results
                        for runtime, signature in cands.candidate_pairs(r, contract, precisions)]
    groups = 0
    while left:
        group, expected = costed_groups(left, staging, opened, held_to)[0]
        left = [p for p in left if all(p is not q for q in group)]
        resident_before = memory.rss_bytes()
        single = groups == 0 and not left
        n, groups = groups, groups + 1
        members = [r for r in results if any(p[0] is r for p in group)]
        if best_so_far is not None and all(best_so_far[0] is not m for m in members):
            members.append(best_so_far[0])
        keep = None if single else _keeping(group, best_so_far[1] if best_so_far is not None else None)
        share = budget * max(1, len(group)) / max(1, pairs)
        with_baseline[0] = n == 0 and baseline_runner is not None
        label = "" if single else f"group {n + 1} ({len(group)} pairs, {len(left)} after it): "
        found, timing, runners = cands.measure(
            members, staging, contract, plan.data.x_val, precisions, make, judge, timer, max(0.5, share), cause,
            lambda text: stage(say, label + text), only=named, keep=keep,
            known_shapes={cands.key(c.artifact, c.runtime, _own(c)) for c in candidates if c.new_shape_us is not None})
        if with_baseline[0]:
            runners[baseline_key] = baseline_runner
        if best_so_far is not None:  # this group's figures on the scale of the first: the best so far is in both
            found, timing = _on_reference_scale(found, timing, best_so_far, contract)
        candidates += found
        latencies |= timing
        rows_per_s |= _time_batches({k: timing[k] for k in [*primaries.values(), baseline_key]
                                     if k in runners and k in timing}, runners, plan, share, say)
        best_so_far = _best_so_far(candidates, results, latencies, contract, named) or best_so_far
        if held_to is not None:  # what this group's runners grew to while timed, against what was expected
            held_to.learn_race_growth(expected, resident_before, memory.rss_bytes())
        if left:  # close this group's runners but the best so far's: the next group takes it over
            kept = runners.get(cands.key(best_so_far[1].artifact, best_so_far[1].runtime, _own(best_so_far[1]))) \
                if best_so_far is not None else None
            runners.clear()
            opened.clear()
            loaded_folders.clear()
            if kept is not None:
                path = staging / best_so_far[1].artifact
                opened[runner_key(path, best_so_far[1].runtime, _asked(best_so_far[1], contract, plan))] = kept
            del kept
            tfenv.give_memory_back()
    if timed:
        run.ledger.note(cands.race_line(timed, budget))
    if groups > 1:
        run.ledger.note(f"memory: the {pairs} artifact x runtime pairs were raced in {groups} groups, each "
                        f"beside the best so far, so that the runners open at once fit in {RACE_SHARE:.0%} of the budget "
                        f"({held_to.describe() if held_to is not None else 'unknown'}); each group's timings are on "
                        "the first group's scale through that shared candidate")
    updated = cands.primary_rows(results, latencies, contract)
    updated = [replace(r, throughput=rows_per_s.get(primaries[r.path], r.throughput)) for r in updated]
    extra = ({"baseline": latencies[baseline_key], "baseline_throughput": rows_per_s.get(baseline_key, {})}
             if baseline_key in latencies else {})
    run.ledger.note(cands.shape_line(contract, candidates))
    for line in cands.cannot_run_lines(candidates):
        run.ledger.note(line)
    for c in candidates:  # a runner the memory budget had no room for: the candidate drops out, and says so
        if "not enough memory" in c.error:
            run.ledger.note(f"{c.artifact} on {c.runtime} is not a candidate: {c.error.removeprefix('MemoryError: ')}")
    opened.clear()  # what the race did not take over is not held for the rest of the run
    return replace(made, results=tuple(updated), candidates=tuple(candidates),
                   baseline=_baseline_figures(made.baseline, updated, extra, made.sparsity is not None))


#: The share of the memory budget the evaluation's kept runners and the race's runners may hold at once, with
#: everything else resident. Runners grow after they open (first calls at new shapes, LiteRT's arenas, oneDNN's
#: caches): the race sizes its later groups by the growth its groups showed (`Budget.race_growth`), and the
#: share leaves room for the first group's. A BERT-base-sized classifier under an 8 GiB budget, on 2 quiet
#: cores: at half, optimize peaked at 4.6 GiB; at 0.4, 4.1 GiB in 5.6 min (10 groups); at 0.35, 3.8 GiB in 6.1
#: min (14 groups, most of one pair: what optimize held beside them, 2-3 GiB, left little of the share). With
#: TensorFlow's tensors from malloc and runners sized by their own format, at 0.4: 3.2-3.3 GiB in 4.75-5 min
#: (6-7 groups).
RACE_SHARE = 0.4


#: One artifact on one runtime, at one signature ("": the file's own): what the race opens and times.
Pair = tuple[ArtifactResult, str, str]


def race_groups(pairs: list[Pair], staging: Path, opened: Opened, budget: Any) -> list[list[Pair]]:
    """The artifact x runtime pairs in groups whose runners fit at once in the race's share of the memory budget
    beside what is resident now (a group holds at least one pair): those whose runners are open already (the
    evaluation kept them) first, then in order. Pairs, not artifacts: each runtime loads its own copy of a file
    (a BERT-base-sized float .tflite on LiteRT, OpenVINO and OpenVINO's bf16 took 2.6 GiB at once), except
    TensorFlow's runtimes, which share one load of a SavedModel within a group. What a pair costs is what
    opening its runtime took (`Budget.need`) times what the race's groups so far grew beyond that while they
    were timed (`Budget.race_growth`). One group where everything fits, or where the budget is unknown: one
    race, as on a host with room to spare."""
    return [group for group, _ in costed_groups(pairs, staging, opened, budget)]


def costed_groups(pairs: list[Pair], staging: Path, opened: Opened, budget: Any) -> list[tuple[list[Pair], int]]:
    """`race_groups`, each group with what its pairs are expected to add together (`pair_cost`; 0 where the
    budget is unknown): what the race compares the group's growth with."""
    room = budget.room(RACE_SHARE) if budget is not None else None
    if room is None:
        return [(pairs, 0)]
    held = {(key[0], key[1]) for key in opened}

    def is_held(pair: Pair) -> bool:
        return (str((staging / pair[0].path).resolve()), pair[1]) in held

    groups: list[tuple[list[Pair], int]] = [([], 0)]
    shared: set[str] = set()  # SavedModels loaded on TensorFlow in this group
    for pair in sorted(pairs, key=lambda p: not is_held(p)):  # stable: the open ones first, each in order
        cost = pair_cost(pair, staging, is_held(pair), shared, budget)
        if groups[-1][0] and groups[-1][1] + cost > room:
            groups.append(([], 0))
            shared = set()
            cost = pair_cost(pair, staging, is_held(pair), shared, budget)
        groups[-1] = ([*groups[-1][0], pair], groups[-1][1] + cost)
        if runner_kind(pair[1]) == "runner:tensorflow":
            shared.add(pair[0].path)
    return groups


def pair_cost(pair: Pair, staging: Path, held: bool, shared: set[str], budget: Any) -> int:
    """What opening and timing one pair is expected to add: nothing for a runner open already or a SavedModel
    whose load another TensorFlow runtime of the group shares (`shared`), else `Budget.need` for its runtime
    and file, times the growth the race's groups have shown."""
    result, runtime, _ = pair
    path = staging / result.path
    kind = runner_kind(runtime, result.format)
    if held or not path.exists() or (runner_kind(runtime) == "runner:tensorflow" and result.path in shared):
        return 0
    return int(budget.need(kind, file_bytes(path)) * budget.race_growth)


def _own(candidate: Candidate) -> str:
    """A candidate's signature as its key spells it: "" for a file's own, the name for a SavedModel's."""
    return candidate.signature if candidate.artifact == FILE_NAMES["saved_model"] else ""


def _asked(candidate: Candidate, contract: ModelContract, plan: Plan) -> str | None:
    """The signature a runner of this candidate was opened asking for (`measure_step.make`)."""
    own = _own(candidate)
    return own or (contract.signature if plan.checks else None)


def _keeping(group: list[Pair], reference: Candidate | None) -> Callable[[ArtifactResult, str, str], bool]:
    """The pairs a group times: its own, and the best so far (on its own runtime and signature) beside them."""
    chosen = {(r.path, runtime, signature) for r, runtime, signature in group}

    def keep(result: ArtifactResult, runtime: str, signature: str) -> bool:
        if (result.path, runtime, signature) in chosen:
            return True
        return (reference is not None and result.path == reference.artifact and runtime == reference.runtime
                and (signature or reference.signature) == reference.signature)

    return keep


def _on_reference_scale(found: list[Candidate], timing: dict[str, Latency],
                        reference: tuple[ArtifactResult, Candidate, Latency], contract: ModelContract
                        ) -> tuple[list[Candidate], dict[str, Latency]]:
    """A later group's candidates and latencies scaled by the ratio of the best so far's median in the group
    where it was first timed to its median in this one (the two races share that candidate), without its own
    second row. Where it could not be timed again, the figures stay as they were measured."""
    from builder.optimize import candidates as cands

    _, best, first = reference
    k = cands.key(best.artifact, best.runtime, _own(best))
    again = timing.get(k)
    ratio = first.p50 / again.p50 if again is not None and again.p50 > 0 else 1.0

    def scaled(c: Candidate) -> Candidate:
        if c.p50_us is None:
            return c
        return replace(c, p50_us=c.p50_us * ratio,
                       ci_low_us=None if c.ci_low_us is None else c.ci_low_us * ratio,
                       ci_high_us=None if c.ci_high_us is None else c.ci_high_us * ratio)

    rows = [scaled(c) for c in found if cands.key(c.artifact, c.runtime, _own(c)) != k]
    times = {name: Latency(t.p50 * ratio, t.p99 * ratio, t.runs, t.ci_low * ratio, t.ci_high * ratio)
             for name, t in timing.items() if name != k}
    return rows, times


def _best_so_far(candidates: list[Candidate], results: list[ArtifactResult], latencies: Mapping[str, Latency],
                 contract: ModelContract, named: str | None) -> tuple[ArtifactResult, Candidate, Latency] | None:
    """The fastest candidate that could be chosen so far (an accepted file, no error, timed): the next group's
    reference."""
    from builder.optimize import candidates as cands
    from builder.optimize.select import pick_fastest

    accepted = {r.path: r for r in results if r.accepted and (named is None or r.path == named)}
    eligible = [c for c in candidates if c.artifact in accepted and not c.error and c.p50_us is not None
                and cands.key(c.artifact, c.runtime, _own(c)) in latencies]
    if not eligible:
        return None
    best = pick_fastest(eligible, contract.signature)
    return accepted[best.artifact], best, latencies[cands.key(best.artifact, best.runtime, _own(best))]


def _baseline_figures(baseline: ArtifactResult | None, results: list[ArtifactResult], extra: Mapping[str, Any],
                      pruned: bool) -> ArtifactResult | None:
    """The baseline row's timing: the served SavedModel's own where it is the original's weights re-exported
    (one measurement of one model), else the race's timing of the original's SavedModel."""
    same = next((r for r in results if r.format == "saved_model"), None) if not pruned else None
    if baseline is not None and same is not None:
        return replace(baseline, latency_us=same.latency_us, throughput=same.throughput,
                       extra={**baseline.extra, "same_as": same.path})
    if baseline is not None and "baseline" in extra:
        return replace(baseline, latency_us=extra["baseline"], throughput=extra["baseline_throughput"])
    return baseline




def drop_unrunnable_xla(run: Run, made: Made) -> Made:
    """The SavedModel without its `serving_xla` when that signature could not make one call here (a model
    with ops XLA has no kernel for, `tf.image.combined_non_max_suppression`): the served folder keeps only
    signatures that answer, and a note says why (the candidate's note names the runtime's reason)."""
    from builder.optimize import evaluate
    from builder.optimize.candidates import CANNOT_RUN
    from builder.optimize.model_io import remove_signature

    results, candidates, staging, plan = list(made.results), made.candidates, run.staging, run.plan
    broken = next((c for c in candidates if c.signature == XLA_SIGNATURE and c.error.startswith(CANNOT_RUN)), None)
    saved = next((r for r in results if r.format == "saved_model"), None)
    if broken is None or saved is None or XLA_SIGNATURE == plan.loaded.signature or XLA_SIGNATURE in plan.loaded.others:
        return made

    def taken_out() -> bool:
        # the SavedModel loaded and saved again: a copy of every weight
        apart_or_here(run, "export", remove_signature, staging / saved.path, XLA_SIGNATURE)
        return True

    removed = run.ledger.attempt("serving_xla taken out", taken_out,
                                 log="remove-xla", failed=f"xla: serving_xla stays in {saved.path} although it cannot "
                                                          "run here: re-saving without it failed")
    if removed is None:
        return made
    run.ledger.note(f"xla: serving_xla taken out of {saved.path}: it cannot run on this host (its candidate says "
                      "why), so the served folder offers only signatures that answer")
    raw, packed = evaluate.file_sizes(staging / saved.path)
    signatures = [s for s in saved.extra.get("signatures", []) if s != XLA_SIGNATURE]
    return replace(made, results=tuple(replace(r, size_bytes=raw, gzip_bytes=packed,
                                               extra={**r.extra, "signatures": signatures})
                                       if r is saved else r for r in results))


def allowed_precisions(recipe: Recipe) -> tuple[str, ...]:
    """What the recipe lets a runtime compute in: float always; int8 where the recipe quantizes to int8."""
    from builder.optimize.candidates import allowed_precisions as allowed

    return allowed("int8" in recipe.quantization.modes or recipe.quantization.qat)


#: Seconds of the rows/s pass per runner timed at most. rows/s is a figure reported, not compared, and it differs
#: 1.1-1.5x between whole runs of the same model anyway; on 2 cores beside other work (load 2.4-3.6) the digits
#: CNN's 7-8 files never all knew theirs to +-10% over their rounds, and the pass ran to whatever cap it had (a
#: third of the race's budget, 15 s; then 0.5 s a runner, 4 s). A figure stopped by the cap is marked in the
#: report (`report.rows_per_s`: "~"), not hidden.
ROWS_PER_S_S_EACH = 0.25


def _time_batches(rows: Mapping[str, Latency], made: Mapping[str, Any], plan: Plan, budget: float, say: Say
                  ) -> dict[str, dict[str, float]]:
    """rows/s of each table row (`rows`: its batch-1 latency): batch-B calls timed in one interleaved loop like
    batch 1, so rows/s and p50 come from the same kind of measurement (B: `evaluate.batch_for`; at B = 1 the
    batch-1 timing itself). Each stops once its median is known (`builder.measure.race.PerRunner`, +-10%), or
    when the pass has had ROWS_PER_S_S_EACH a runner (the budget's third at most); a figure stopped before it
    was known says so (`throughput_from`'s `settled`)."""
    from builder.optimize import evaluate

    batches = {k: evaluate.batch_for(made[k], plan.data.x_val, row.p50) for k, row in rows.items()}
    out = {k: evaluate.throughput_from(1, rows[k]) for k, b in batches.items() if b == 1}
    calls = {k: evaluate.batch_caller(made[k], plan.data.x_val, b) for k, b in batches.items() if b > 1}
    if calls:
        from builder.measure.race import SETTLED, PerRunner
        from builder.optimize.candidates import guarded

        share = max(0.5, min(budget / 3, ROWS_PER_S_S_EACH * len(calls)))
        failed: dict[str, BaseException] = {}
        with stage(say, f"timing {len(calls)} artifacts at batch {max(batches.values())} for rows/s (interleaved, "
                        f"each until its median is known, at most {share:.0f} s)", timing=True):
            per_call, stops = evaluate.timed_run(guarded(calls, failed), share, PerRunner(), warmup=1)
        out |= {k: evaluate.throughput_from(batches[k], per_call[k], settled=stops[k].why == SETTLED)
                for k in calls if k in per_call and k not in failed}
    return out


# --- what one core and this host serve -------------------------------------------------------------


#: Timing budget for the chosen candidate at one thread (a few hundred calls of a small model, dozens of a big one).
CAPACITY_BUDGET_S = 3.0


def capacity_step(run: Run, made: Made) -> Made:
    """The chosen artifact x runtime timed at batch 1 on ONE thread (the timing loop every candidate used, until
    its median is known: `builder.measure.race.PerRunner`), and what that bounds (`builder.report.capacity`):
    one core answers about 1e6 / p50 a second of model time, this host's usable cores at most that many times
    it. None where the choice was not measured here or cannot run."""
    from builder.measure import memory
    from builder.measure.cores import read_cores
    from builder.measure.race import PerRunner
    from builder.optimize import evaluate
    from builder.report import capacity

    plan, choice = run.plan, made.choice
    chosen, runtime, signature = choice.artifact, choice.runtime, choice.signature
    chosen_result = next((r for r in made.results if r.path == chosen), None)
    path = run.staging / chosen
    if not (choice.selection.measured and chosen_result and chosen_result.accepted) or not path.exists():
        return made
    resident: list[int] = []

    def timed() -> Any:
        before = memory.rss_bytes()
        runner = evaluate.Runner(runtime, path, 1, signature if path.is_dir() or plan.checks else None)
        runner.predict({k: v[:1] for k, v in plan.data.x_val.items()})
        after = memory.rss_bytes()
        if before is not None and after is not None:  # the chosen model's own share of a serving process
            resident.append(max(0, after - before))
        return evaluate.time_runners({"chosen": runner.row_caller(plan.data.x_val)}, CAPACITY_BUDGET_S,
                                     policy=PerRunner())["chosen"]

    with stage(run.say, "timing the chosen artifact on one thread (what one core serves)"):
        # the choice was timed already: a failure here only leaves the serving line out, and says why
        found = run.ledger.attempt("one-thread timing", timed, log="capacity",
                                   failed="serving: the chosen artifact's one-thread timing dropped")
    if found is None:
        return made
    serving = capacity(chosen, runtime, signature, found.p50, found.ci_low, found.ci_high, read_cores().count)
    run.ledger.note(serving.line())
    return replace(made, serving=serving, chosen_runner_bytes=resident[0] if resident else None)


