"""The optimize pipeline: recipe -> load -> check DATA -> prune / QAT -> export -> convert -> evaluate -> gate.

Everything is built in a staging folder next to `--out` and moved into place in one rename at the end, so a
bad input or a crash leaves `--out` as it was. The quality gate runs after publication: rejected artifacts
are kept (and marked) so the user can inspect them, and the command exits with GATE_FAILED.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from builder.optimize import recipe as recipes
from builder.optimize.recipe import Recipe

GATE_FAILED = 3  # exit status when the chosen artifact loses more accuracy than allowed (bad input is 2)
SAMPLES_NAME = "samples.npz"
SAMPLE_ROWS = 32
FILE_NAMES = {
    "saved_model": "saved_model",
    "tflite_fp32": "model_fp32.tflite",
    "tflite_dynamic": "model_dynamic.tflite",
    "tflite_float16": "model_float16.tflite",
    "tflite_int8": "model_int8.tflite",
    "tflite_qat_int8": "model_qat_int8.tflite",
}
INTERESTING_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni",
                     "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16", "asimd", "asimddp",
                     "asimdhp", "i8mm", "bf16", "sve", "sve2")


# --- target facts -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TargetFacts:
    name: str
    arch: str
    features: frozenset[str]
    gpu_capabilities: tuple[str, ...]


def _cpuinfo_flags(text: str) -> frozenset[str]:
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def host_facts() -> TargetFacts:
    """This machine's CPU flags and GPU capabilities (builder.hardware; /proc/cpuinfo if that fails)."""
    import platform

    try:
        from builder.hardware import detect_host

        host = detect_host()
        ccs = tuple(d.compute_capability for d in host.gpu.devices if d.compute_capability)
        return TargetFacts(f"host ({host.cpu.microarchitecture})", host.cpu.arch, frozenset(host.cpu.features), ccs)
    except Exception:  # detection is best effort here: the kernel's own flag list is enough to choose
        try:
            text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""
        return TargetFacts("host", platform.machine(), _cpuinfo_flags(text), ())


def target_facts(name: str | None, cuda_cc: str | None = None) -> TargetFacts:
    """Facts of a named build target (builder.targets.resolve_target), or of this host when no name is given."""
    if (not name or name.strip().lower() == "host") and not cuda_cc:
        return host_facts()
    from builder.targets import resolve_target

    target = resolve_target(name or "host", cuda_cc=cuda_cc)
    ccs = tuple(target.cuda.capabilities) if target.cuda else ()
    return TargetFacts(target.name, target.arch, frozenset(target.features), ccs)


def choose_recipe(spec: str, facts: TargetFacts) -> tuple[Recipe, tuple[str, ...]]:
    if spec == "auto":
        return recipes.auto_recipe(facts.features, facts.gpu_capabilities, facts.arch, facts.name)
    recipe = recipes.load_recipe(Path(spec))
    return recipe, (f"recipe: from {spec}",)


def adapt_recipe(recipe: Recipe, why_not_trainable: str | None, has_train: bool) -> tuple[Recipe, list[str]]:
    """Drop what the model or DATA cannot support (with a note), keeping the chosen artifact meaningful."""
    notes: list[str] = []
    pruning, quant = recipe.pruning, recipe.quantization
    if why_not_trainable and (pruning or quant.qat):
        notes.append(f"pruning and QAT skipped: the model is {why_not_trainable}")
        pruning, quant = None, replace(quant, qat=False)
    elif recipe.name == "auto" and pruning and not has_train:
        notes.append("pruning skipped: DATA has no x_train/y_train to fine-tune on")
        pruning = None
    adapted = replace(recipe, pruning=pruning, quantization=quant)
    if adapted.choose not in adapted.kinds:
        fallback = next(k for k in ("tflite_int8", "tflite_dynamic", "tflite_fp32", "saved_model") if k in adapted.kinds)
        notes.append(f"chosen artifact {adapted.choose} is not produced any more; choosing {fallback}")
        adapted = replace(adapted, choose=fallback)
    return adapted, notes


def explain_lines(recipe: Recipe, reasons: tuple[str, ...], facts: TargetFacts, model_note: str | None) -> list[str]:
    lines = [f"target: {facts.name} ({facts.arch}); int8/half features: "
             f"{', '.join(sorted(facts.features & set(INTERESTING_FLAGS))) or 'none'}; "
             f"GPUs: {', '.join(facts.gpu_capabilities) or 'none'}",
             f"recipe: {recipe.name}; artifacts: {', '.join(FILE_NAMES[k] for k in recipe.kinds)}; "
             f"chosen: {FILE_NAMES[recipe.choose]}"]
    if recipe.pruning:
        p = recipe.pruning
        lines.append(f"pruning: {p.structured and f'{p.structured[0]}:{p.structured[1]} structured' or f'{p.sparsity:.0%} {p.schedule}'}"
                     f", {p.epochs} fine-tuning epochs")
    lines.append(f"quantization: {', '.join(recipe.quantization.modes) or 'none'}"
                 f"{'; QAT ' + str(recipe.quantization.qat_epochs) + ' epoch(s)' if recipe.quantization.qat else ''}")
    lines += [f"why: {r}" for r in reasons]
    if model_note:
        lines.append(f"model: {model_note}")
    return lines


# --- the run ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    model: Path
    data: str
    recipe_spec: str
    target: str | None
    out: Path
    max_accuracy_drop: float
    threads: int
    measure: Any = None  # evaluate.Measure; None = Measure.for_runs(latency_runs, threads)
    cuda_cc: str | None = None
    latency_runs: int = 300


@dataclass(frozen=True)
class Outcome:
    report: dict[str, Any]
    out: Path

    @property
    def gate_passed(self) -> bool:
        return bool(self.report["gate"]["passed"])


Say = Callable[[str], Any]


@contextlib.contextmanager
def _stage(say: Say, text: str) -> Iterator[None]:
    start = time.perf_counter()
    say(f"... {text}")
    yield
    say(f"ok  {text} ({time.perf_counter() - start:.1f} s)")


def run(options: Options, say: Say = lambda _: None) -> Outcome:
    """Do the whole optimization; raises TfsmithError for bad input with --out untouched."""
    from builder.optimize import export as exporting
    from builder.optimize.model_io import sniff_model

    exporting.check_out_dir(options.out)
    facts = target_facts(options.target, options.cuda_cc)
    recipe, reasons = choose_recipe(options.recipe_spec, facts)
    sniff_model(options.model)  # bad paths fail before TensorFlow is imported

    from builder.optimize import data as data_mod
    from builder.optimize import evaluate, prune, quantize, report as reporting, tfenv
    from builder.optimize.model_io import load_model

    tfenv.configure_threads(options.threads)
    tf = tfenv.tensorflow()
    measure = options.measure or evaluate.Measure.for_runs(options.latency_runs, options.threads)
    with _stage(say, f"loading {options.model}"):
        loaded = load_model(options.model)
    raw_data = data_mod.load_data(options.data, len(loaded.input.shape))
    has_train = raw_data.x_train is not None and raw_data.y_train is not None and len(raw_data.x_train) > 0
    recipe, notes = adapt_recipe(recipe, loaded.trainable_why_not, has_train)
    if loaded.trainable_why_not and not notes:
        notes.append(f"the model is {loaded.trainable_why_not}")
    need_calib = "int8" in recipe.quantization.modes or recipe.quantization.qat
    need_train = recipe.pruning is not None or recipe.quantization.qat
    data = data_mod.validate_data(raw_data, loaded.input.shape, loaded.output.shape, need_train=need_train,
                                  need_calib=need_calib, calib_samples=recipe.quantization.calibration_samples)
    labels = data.y_val
    leaked = data_mod.shared_rows(data.x_calib, data.x_val)
    if leaked:
        notes.append(f"{leaked} calibration rows also appear in x_val: int8 accuracy on those rows is not held-out")
    with _stage(say, "float reference outputs on the held-out rows"):
        reference = loaded.predict(data.x_val)

    staging = exporting.staging_dir(options.out)
    scratch = Path(tempfile.mkdtemp(prefix="tfsmith-optimize-"))
    try:
        # Baseline: the unoptimized float model served as a SavedModel, measured like the artifacts.
        if loaded.keras_model is not None:
            baseline_dir = scratch / "baseline"
            exporting.export_saved_model(loaded.keras_model, baseline_dir, loaded.input.name)
        else:
            baseline_dir = loaded.saved_model_dir

        model = loaded.keras_model
        sparsity = None
        if recipe.pruning and model is not None:
            with _stage(say, f"pruning to {recipe.pruning.target_sparsity:.0%} with {recipe.pruning.epochs} "
                             "fine-tuning epochs"):
                model, sparsity = prune.prune_model(model, recipe.pruning, data.x_train, data.y_train,
                                                    prune.loss_for(loaded.keras_model, data.x_train))
        saved_model = staging / FILE_NAMES["saved_model"]
        with _stage(say, "exporting the serving SavedModel"):
            if model is not None:
                exporting.export_saved_model(model, saved_model, loaded.input.name, xla=recipe.export.xla)
            else:
                shutil.copytree(loaded.saved_model_dir, saved_model)
                if recipe.export.xla:
                    notes.append("xla: serving_xla not added: the model is not a Keras 2 model")
        produced: list[tuple[str, Path]] = [("saved_model", saved_model)]
        for kind in recipe.kinds:
            if kind in ("saved_model", "tflite_qat_int8"):
                continue
            mode = kind.removeprefix("tflite_")
            with _stage(say, f"converting to TFLite {mode}"):
                path = staging / FILE_NAMES[kind]
                path.write_bytes(quantize.convert_saved_model(saved_model, mode, data.x_calib))
            produced.append((kind, path))
        if recipe.quantization.qat and model is not None:
            with _stage(say, f"quantization-aware training{' (pruning-preserving)' if sparsity else ''}"):
                qat_model = quantize.quantization_aware_train(
                    model, data.x_train, data.y_train, prune.loss_for(loaded.keras_model, data.x_train),
                    recipe.quantization.qat_epochs, recipe.pruning.batch_size if recipe.pruning else 32,
                    pruned=sparsity is not None)
                path = staging / FILE_NAMES["tflite_qat_int8"]
                path.write_bytes(quantize.convert_qat(qat_model, data.x_calib))
            produced.append(("tflite_qat_int8", path))

        metrics = []
        for kind, path in produced:
            with _stage(say, f"evaluating {path.name}"):
                if kind == "saved_model":
                    m = evaluate.evaluate_saved_model(path, kind, path.name, data.x_val, labels, reference, measure)
                else:
                    m = evaluate.evaluate_tflite(path, kind, path.name, data.x_val, labels, reference, measure)
            metrics.append(m)

        # Measured last, like the artifacts, on a warmed-up runtime: the first SavedModel timed in a process
        # runs slower, which would flatter every ratio against the baseline.
        with _stage(say, "measuring the float baseline (SavedModel signature)"):
            baseline = evaluate.evaluate_saved_model(baseline_dir, "saved_model", "baseline", data.x_val, labels,
                                                     reference, measure)
        base_score = baseline.accuracy if labels is not None else 1.0
        for m in metrics:
            score = m.accuracy if labels is not None else m.agreement
            drop = round(base_score - score, 6)
            m.accepted = drop <= options.max_accuracy_drop + 1e-9
            metric = "accuracy" if labels is not None else "agreement with the float model"
            m.reason = (f"{metric} drop {drop:+.4f} {'<=' if m.accepted else '>'} {options.max_accuracy_drop:.4f}")
            m.extra["accuracy_drop"] = drop
        chosen = next(m for m in metrics if m.kind == recipe.choose)
        chosen_drop = chosen.extra["accuracy_drop"]

        samples = {"x": data.x_val[:SAMPLE_ROWS], "expected": reference[:SAMPLE_ROWS].astype(np.float32)}
        if labels is not None:
            samples["y"] = labels[:SAMPLE_ROWS]
        np.savez(staging / SAMPLES_NAME, **samples)

        report = {
            "schema": 1,
            "tfsmith": _version(),
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "model": {"source": str(options.model), "format": loaded.facts.format,
                      "keras_version": loaded.facts.keras_version, "params": loaded.params,
                      "input": loaded.input.to_dict(), "output": loaded.output.to_dict()},
            "data": {"source": options.data, "train_rows": 0 if data.x_train is None else len(data.x_train),
                     "calibration_rows": 0 if data.x_calib is None else len(data.x_calib),
                     "calibration_from": "x_calib" if raw_data.x_calib is not None else "x_train",
                     "labels": labels is not None},
            "held_out_rows": len(data.x_val),
            "recipe": recipe.to_dict(),
            "reasons": list(reasons),
            "notes": notes,
            "target": {"name": facts.name, "arch": facts.arch, "gpu_capabilities": list(facts.gpu_capabilities),
                       "features": sorted(facts.features & set(INTERESTING_FLAGS))},
            "host": {"cpu_features": sorted(host_facts().features), "threads": options.threads,
                     "tensorflow": tf.__version__, "litert": _litert_version()},
            "baseline": baseline.to_dict(),
            "sparsity": sparsity.to_dict() if sparsity else None,
            "artifacts": [m.to_dict() for m in metrics],
            "chosen": chosen.path,
            "samples": SAMPLES_NAME,
            "gate": {"metric": "accuracy" if labels is not None else "agreement",
                     "max_accuracy_drop": options.max_accuracy_drop, "chosen_drop": chosen_drop,
                     "passed": chosen.accepted},
        }
        with _stage(say, "writing report.json, report.md, report.png"):
            reporting.write_report(report, staging)
        exporting.publish(staging, options.out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return Outcome(report=report, out=Path(options.out))


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("tfsmith")
    except Exception:
        return "unknown"


def _litert_version() -> str:
    try:
        from importlib.metadata import version

        return version("ai-edge-litert")
    except Exception:
        return "unknown"


# --- CLI glue -----------------------------------------------------------------------------------------


def run_optimize_command(*, model: Path, data: str, recipe: str, target: str | None, out: Path,
                         max_accuracy_drop: float, explain: bool, threads: int, cuda_cc: str | None = None,
                         latency_runs: int = 300) -> int:
    """What `tfsmith optimize` does; returns the exit status (0, or GATE_FAILED)."""
    import sys

    from rich.console import Console
    from rich.table import Table

    from builder.optimize import report as reporting
    from builder.optimize.model_io import sniff_model

    import os

    # A handle on the real stderr, kept while native code's banners on fd 2 are silenced during the run.
    err = Console(file=os.fdopen(os.dup(2), "w", buffering=1), highlight=False, stderr=True)
    if explain:
        facts = target_facts(target, cuda_cc)
        chosen, reasons = choose_recipe(recipe, facts)
        sniffed = sniff_model(model)
        note = None
        if sniffed.format == "keras3":
            note = (f"Keras {sniffed.keras_version} file: tfmot works only with Keras 2, so pruning and QAT "
                    "will be skipped (post-training quantization only)")
        elif sniffed.format == "saved_model":
            note = "SavedModel: pruning/QAT only if it holds a Keras 2 model (keras_metadata.pb)"
        for line in explain_lines(chosen, reasons, facts, note):
            print(line)
        return 0
    options = Options(model=model, data=data, recipe_spec=recipe, target=target, out=out,
                      max_accuracy_drop=max_accuracy_drop, threads=threads, cuda_cc=cuda_cc,
                      latency_runs=latency_runs)
    from builder.optimize import tfenv

    with err.status("tfsmith optimize") as status, tfenv.quiet_native_stderr():
        def say(text: str) -> None:
            if text.startswith("ok  "):
                err.print(f"[green]✓[/green] {text[4:]}")
            else:
                status.update(text[4:] if text.startswith("... ") else text)

        outcome = run(options, say=say)
    report = outcome.report
    table = Table(title=f"tfsmith optimize -> {outcome.out}")
    for header in reporting.HEADERS:
        table.add_column(header, justify="left" if header in ("artifact", "kind", "gate") else "right")
    for row in reporting.table_rows(report):
        table.add_row(*row)
    out_console = Console()
    if not out_console.is_terminal:
        out_console = Console(width=160)
    out_console.print(table)
    for note in report["notes"]:
        print(f"note: {note}")
    if report.get("sparsity"):
        print(f"sparsity: target {report['sparsity']['target']:.3f}, achieved {report['sparsity']['achieved']:.3f}")
    print(f"report: {outcome.out / reporting.REPORT_JSON} ({reporting.REPORT_MD}, {reporting.REPORT_PNG})")
    if not outcome.gate_passed:
        gate = report["gate"]
        sys.stderr.write(f"tfsmith: error: quality gate failed: {report['chosen']} loses {gate['chosen_drop']:.4f} "
                         f"accuracy (max {gate['max_accuracy_drop']:.4f}); artifacts kept in {outcome.out}, "
                         "marked rejected\n")
        return GATE_FAILED
    return 0
