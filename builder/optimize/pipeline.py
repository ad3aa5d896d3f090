"""The optimize pipeline, one function per step:

plan (recipe, model, contract, DATA: every refusal happens here, before any work) -> reference outputs of the
ORIGINAL model -> prune (kept only if it still agrees with the original, for auto) -> export -> convert -> QAT
-> evaluate (per output, vs the original) -> measure candidates (artifact x runtime, builder.measure's timing loop) ->
select -> samples.npz -> report -> publish.

Everything is built in a staging folder next to `--out` and moved into place in one rename at the end, so a
bad input or a crash leaves `--out` as it was. The quality gate runs after publication: rejected artifacts are
kept (and marked) so the user can inspect them, and the command exits with EXIT_GATE_FAILED (3).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from builder.errors import EXIT_GATE_FAILED
from builder.optimize import recipe as recipes
from builder.optimize.recipe import Recipe
from builder.report import (SAMPLES_NPZ, ArtifactResult, Candidate, DataInfo, Gate, Latency, ModelContract, ModelInfo,
                            OutputSpec, Report, Selection, TensorSpec)
from builder.say import Say

SAMPLES_NAME = SAMPLES_NPZ
SAMPLE_ROWS = 32
FILE_NAMES = {
    "saved_model": "saved_model",
    "tflite_fp32": "model_fp32.tflite",
    "tflite_dynamic": "model_dynamic.tflite",
    "tflite_float16": "model_float16.tflite",
    "tflite_int8": "model_int8.tflite",
    "tflite_qat_int8": "model_qat_int8.tflite",
    "tflite_original": "model.tflite",
    "tflite_select_tf": "model_select_tf.tflite",
}
#: kinds that TensorFlow itself serves (a SavedModel; a .tflite with Select TF ops on TensorFlow's interpreter)
TF_KINDS = ("saved_model", "tflite_select_tf")
TF = "tensorflow"
XLA_SIGNATURE = "serving_xla"
#: rule order when nothing was measured (int8 first: 4x smaller; the recipe's own choice goes first anyway)
RULE_ORDER = ("tflite_qat_int8", "tflite_int8", "tflite_dynamic", "tflite_fp32", "tflite_float16", "tflite_original")
INTERESTING_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni",
                     "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16", "asimd", "asimddp",
                     "asimdhp", "i8mm", "bf16", "sve", "sve2")
DEFAULT_MAX_RELATIVE_ERROR = 0.05


# --- target facts -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TargetFacts:
    name: str
    arch: str
    features: frozenset[str]
    gpu_capabilities: tuple[str, ...]
    is_host: bool = True


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
    return TargetFacts(target.name, target.arch, frozenset(target.features), ccs, is_host=False)


def measures_here(recipe: Recipe, facts: TargetFacts) -> bool:
    """auto on this host measures every candidate; GPU hosts (tensor cores) choose the SavedModel by rule."""
    return recipe.name == "auto" and facts.is_host and not any(
        recipes._cc_value(cc) >= 7.0 for cc in facts.gpu_capabilities)


def choose_recipe(spec: str, facts: TargetFacts) -> tuple[Recipe, tuple[str, ...]]:
    if spec == "auto":
        recipe, reasons = recipes.auto_recipe(facts.features, facts.gpu_capabilities, facts.arch, facts.name)
        if measures_here(recipe, facts) and not recipe.export.xla:
            recipe = replace(recipe, export=replace(recipe.export, xla=True))
            reasons = tuple(r for r in reasons if not r.startswith("xla:")) + (
                "xla: a jit_compile'd serving_xla signature is added and timed against the contract's signature on "
                "this host; requests get it by default only when it is faster beyond noise (XLA measured slower "
                "for CNNs on CPU: MobileNetV2 16 ms -> 96 ms on this stack)",)
        return recipe, reasons
    recipe = recipes.load_recipe(Path(spec))
    return recipe, (f"recipe: from {spec}",)


def adapt_recipe(recipe: Recipe, why_not_trainable: str | None, has_train: bool,
                 original_tflite: bool = False) -> tuple[Recipe, list[str]]:
    """Drop what the model or DATA cannot support (with a note), keeping the chosen artifact meaningful."""
    notes: list[str] = []
    pruning, quant = recipe.pruning, recipe.quantization
    if original_tflite:
        notes.append("the model is a .tflite: it is the original and the only artifact; it is evaluated and "
                     "measured as it is")
        return replace(recipe, pruning=None, quantization=recipes.Quantization(modes=()),
                       export=recipes.Export(tflite_fp32=False, xla=False), choose="tflite_original"), notes
    if why_not_trainable and (pruning or quant.qat):
        notes.append(f"pruning and QAT skipped: the model is {why_not_trainable}")
        pruning, quant = None, replace(quant, qat=False)
    elif recipe.name == "auto" and pruning and not has_train:
        notes.append("pruning skipped: DATA has no x_train with labels for every output to fine-tune on")
        pruning = None
    adapted = replace(recipe, pruning=pruning, quantization=quant)
    if adapted.choose not in adapted.kinds:
        fallback = next(k for k in ("tflite_int8", "tflite_dynamic", "tflite_fp32", "saved_model") if k in adapted.kinds)
        notes.append(f"chosen artifact {adapted.choose} is not produced any more; choosing {fallback}")
        adapted = replace(adapted, choose=fallback)
    return adapted, notes


def kinds_of(recipe: Recipe) -> tuple[str, ...]:
    return ("tflite_original",) if recipe.choose == "tflite_original" else recipe.kinds


def explain_lines(recipe: Recipe, reasons: tuple[str, ...], facts: TargetFacts, model_note: str | None,
                  contract: ModelContract | None = None) -> list[str]:
    lines = [f"target: {facts.name} ({facts.arch}); int8/half features: "
             f"{', '.join(sorted(facts.features & set(INTERESTING_FLAGS))) or 'none'}; "
             f"GPUs: {', '.join(facts.gpu_capabilities) or 'none'}",
             f"recipe: {recipe.name}; artifacts: {', '.join(FILE_NAMES[k] for k in kinds_of(recipe))}; "
             f"chosen: {FILE_NAMES[recipe.choose]}"
             + (" (by rule; on this host every accepted artifact x runtime x precision is measured and the fastest "
                "picked)" if facts.is_host and not recipe.choose_named and recipe.choose != "saved_model" else "")]
    if contract is not None:
        lines.append("contract: inputs " + ", ".join(f"{t.name} {t.dtype}{_shape_text(t.shape)}" for t in contract.inputs)
                     + "; outputs " + ", ".join(f"{t.name} {t.dtype}{_shape_text(t.shape)}" for t in contract.outputs))
    if recipe.pruning:
        p = recipe.pruning
        lines.append(f"pruning: {p.structured and f'{p.structured[0]}:{p.structured[1]} structured' or f'{p.sparsity:.0%} {p.schedule}'}"
                     f", {p.epochs} fine-tuning epochs"
                     + ("; kept only if the pruned model agrees with the original within the gate"
                        if recipe.name == "auto" else ""))
    lines.append(f"quantization: {', '.join(recipe.quantization.modes) or 'none'}"
                 f"{'; QAT ' + str(recipe.quantization.qat_epochs) + ' epoch(s)' if recipe.quantization.qat else ''}")
    lines += [f"why: {r}" for r in reasons]
    if model_note:
        lines.append(f"model: {model_note}")
    return lines


def _shape_text(shape: tuple[int | None, ...]) -> str:
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


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
class Outcome:
    report: Report
    out: Path

    @property
    def gate_passed(self) -> bool:
        return self.report.gate.passed




@contextlib.contextmanager
def _stage(say: Say, text: str) -> Iterator[None]:
    start = time.perf_counter()
    say(f"... {text}")
    yield
    say(f"ok  {text} ({time.perf_counter() - start:.1f} s)")


# --- step 1: plan (every refusal before any work) -------------------------------------------------------


@dataclass
class Plan:
    facts: TargetFacts
    recipe: Recipe
    reasons: tuple[str, ...]
    notes: list[str]
    loaded: Any  # model_io.LoadedModel
    data: Any  # data.Data
    #: why no plain .tflite can be made (the converter's own first error line), None when it can
    no_tflite: str | None = None
    #: full texts of the libraries' errors, written to OUT/logs/<name>.log with the output
    logs: dict[str, str] = field(default_factory=dict)
    out: Path = Path(".")

    def log(self, name: str, text: str) -> Path:
        """Keep a full error text for OUT/logs/<name>.log; returns the path it will have."""
        self.logs[name] = text
        return Path(self.out) / "logs" / f"{name}.log"

    @functools.cached_property
    def gate_x(self) -> dict[str, np.ndarray]:
        """The rows the gate judges every artifact on: the held-out rows, then one all-zero input (`gate_rows`)."""
        return gate_rows(self.data.x_val)


def gate_rows(x_val: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The held-out rows and one all-zero row after them, for numeric inputs (text has no all-zero input).

    Why: a blank input is where an int8 file most often answers equal top scores (every activation near its
    zero point) while the float original still has a clear answer; real traffic sends such inputs. Labels
    cover the held-out rows only; the zero row is judged against the original's own answer.
    """
    if not x_val or any(np.asarray(v).dtype.kind not in "biuf" for v in x_val.values()):
        return dict(x_val)
    return {k: np.concatenate([v, np.zeros_like(v[:1])]) for k, v in x_val.items()}

def make_plan(options: Options, say: Say) -> Plan:
    """Recipe, model, contract and DATA, all checked; raises one-line errors with nothing written."""
    from builder.optimize import export as exporting
    from builder.optimize.model_io import sniff_model

    exporting.check_out_dir(options.out)
    facts = target_facts(options.target, options.cuda_cc)
    recipe, reasons = choose_recipe(options.recipe_spec, facts)
    sniff_model(options.model)  # bad paths fail before TensorFlow is imported

    from builder.optimize import data as data_mod
    from builder.optimize import tfenv
    from builder.optimize.model_io import load_model

    tfenv.configure_threads(options.threads)
    with _stage(say, f"loading {options.model}"):
        loaded = load_model(options.model, options.signature, options.imports)
    raw = data_mod.load_data(options.data, loaded.inputs, loaded.outputs)
    has_train = data_mod.has_training_data(raw, loaded.outputs)
    recipe, notes = adapt_recipe(recipe, loaded.trainable_why_not, has_train, loaded.tflite_path is not None)
    if loaded.trainable_why_not and not notes:
        notes.append(f"the model is {loaded.trainable_why_not}")
    unknown = sorted({name for name, _ in recipe.tasks} - {t.name for t in loaded.outputs})
    if unknown:
        from builder.errors import InputError

        raise InputError(f"recipe {options.recipe_spec}: [tasks] names {unknown[0]!r}, which is not an output "
                         f"(outputs: {', '.join(t.name for t in loaded.outputs)})")
    plan = Plan(facts, recipe, reasons, notes, loaded, None, out=Path(options.out))
    if any(t.dtype == "string" for t in loaded.inputs) and recipe.export.xla:
        recipe = replace(recipe, export=replace(recipe.export, xla=False))
        notes.append("xla: serving_xla not added: string inputs have no XLA kernels")
    if loaded.saved_model_dir is not None:
        failure = _probe_conversion(loaded)
        if failure is not None:
            recipe, note = without_tflite(recipe, failure.cause, plan.log("convert-fp32", failure.full_text))
            plan.no_tflite = failure.cause
            notes.append(note)
    if recipe.name == "auto" and "int8" in recipe.quantization.modes and not (raw.x["calib"] or raw.x["train"]):
        modes = tuple(m for m in recipe.quantization.modes if m != "int8")
        recipe = replace(recipe, quantization=replace(recipe.quantization, modes=modes),
                         choose="tflite_dynamic" if recipe.choose == "tflite_int8" else recipe.choose)
        notes.append("int8 skipped: DATA has no x_calib or x_train rows to calibrate on (x_val is never used for "
                     "that); dynamic-range needs none")
    need_calib = "int8" in recipe.quantization.modes or recipe.quantization.qat
    need_train = recipe.pruning is not None or recipe.quantization.qat
    data = data_mod.validate_data(raw, loaded.inputs, loaded.outputs, need_train=need_train, need_calib=need_calib,
                                  calib_samples=recipe.quantization.calibration_samples)
    leaked = data_mod.shared_rows(data.x_calib, data.x_val)
    if leaked:
        notes.append(f"{leaked} calibration rows also appear in x_val: int8 quality on those rows is not held-out")
    plan.recipe, plan.data = recipe, data
    return plan


def _probe_conversion(loaded: Any) -> Any:
    """A float conversion before any training: ConversionFailed when the TFLite builtins cannot express the
    model (a Keras 3 GRU's tensor lists, TextVectorization's string ops), None when they can."""
    from builder.optimize import quantize

    try:
        quantize.convert_saved_model(loaded.saved_model_dir, "fp32", signature=loaded.signature)
    except quantize.ConversionFailed as error:
        return error
    return None


def without_tflite(recipe: Recipe, cause: str, log: Path) -> tuple[Recipe, str]:
    """The recipe when no plain .tflite can be made: the SavedModel (TensorFlow serves it) and a Select-TF-ops
    .tflite are what is left; pruning and QAT only feed .tflite files, so they go too. (recipe, one-line note)."""
    adapted = replace(recipe, pruning=None, quantization=recipes.Quantization(modes=()),
                      export=replace(recipe.export, tflite_fp32=False), choose="saved_model")
    return adapted, (f"no plain .tflite: the TFLite converter says: {cause} (full text: {log}); serving the "
                     "SavedModel on TensorFlow, and a .tflite with Select TF ops is tried for TensorFlow's interpreter")


# --- step 2: the contract --------------------------------------------------------------------------------


def make_contract(inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...], reference: Mapping[str, np.ndarray],
                  labels: Mapping[str, np.ndarray], overrides: Mapping[str, str],
                  signature: str = "serving_default") -> ModelContract:
    """The original's signature plus a task per output (inferred, or the recipe's override), with why."""
    from builder.optimize.quality import infer_task

    specs = []
    for t in outputs:
        task, why = infer_task(t.name, reference[t.name], labels.get(t.name), overrides.get(t.name))
        specs.append(OutputSpec(t.name, t.dtype, t.shape, task, why))
    return ModelContract(tuple(inputs), tuple(specs), signature)


def check_labels(contract: ModelContract, y_val: Mapping[str, np.ndarray], y_train: Mapping[str, np.ndarray] | None) -> None:
    """Labels that cannot be judged with their output's task are one line now, before any work."""
    from builder.errors import InputError
    from builder.optimize.quality import binary_labels, class_ids

    for split, labels in (("y_val", y_val), ("y_train", y_train or {})):
        for spec in contract.outputs:
            if spec.name not in labels:
                continue
            key = f"{split}/{spec.name}" if len(contract.outputs) > 1 else split
            y = np.asarray(labels[spec.name])
            if spec.task == "classification":
                class_ids(y, int(spec.shape[-1] or 1), f"data: {key} ({spec.name} is {spec.task_why})")
            elif spec.task == "binary":
                binary_labels(y, f"data: {key} ({spec.name} is {spec.task_why})")
            elif y.reshape(len(y), -1).shape[1] != int(np.prod([d or 1 for d in spec.shape[1:]])):
                raise InputError(f"data: {key} has shape {y.shape}; regression output {spec.name!r} is "
                                 f"{_shape_text(spec.shape)}")


def training_labels(contract: ModelContract, y: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Labels as the fine-tuning losses want them: class ids for classification, float values otherwise."""
    from builder.optimize.quality import class_ids

    out = {}
    for spec in contract.outputs:
        if spec.task == "classification":
            out[spec.name] = class_ids(y[spec.name], int(spec.shape[-1] or 1), f"y_train/{spec.name}")
        else:
            out[spec.name] = np.asarray(y[spec.name], dtype=np.float32)
    return out


def fit_arguments(model: Any, contract: ModelContract, x: Mapping[str, np.ndarray], y: Mapping[str, np.ndarray],
                  reference: Mapping[str, np.ndarray]) -> tuple[Any, Any, Any]:
    """(x, y, losses) for `model.fit`, as lists in the model's own input/output order.

    Lists, not dicts: tfmot's wrappers rename output layers (`prune_low_magnitude_<name>`), so names would not
    match any more; the order does.
    """
    from builder.optimize import prune, quality
    from builder.optimize.model_io import keras_specs

    in_specs, out_specs = keras_specs(model)
    labels = training_labels(contract, y)
    tasks = {s.name: s.task for s in contract.outputs}
    probabilities = {s.name: (bool(np.all((reference[s.name] >= 0) & (reference[s.name] <= 1)))
                              if s.task == "binary" else quality._is_probabilities(reference[s.name]))
                     for s in contract.outputs}
    losses = prune.losses_for(tasks, probabilities)
    xs = [x[s.name] for s in in_specs]
    if isinstance(getattr(model, "_nested_outputs", None), Mapping):  # a model that returns a dict: its keys
        return (xs[0] if len(xs) == 1 else xs), {n: labels[n] for n in labels}, {n: losses[n] for n in losses}
    ys = [labels[s.name] for s in out_specs]
    ls = [losses[s.name] for s in out_specs]
    return (xs[0] if len(xs) == 1 else xs), (ys[0] if len(ys) == 1 else ys), (ls[0] if len(ls) == 1 else ls)


# --- step 3: prune (and keep it only if it still agrees) -----------------------------------------------


def prune_step(plan: Plan, contract: ModelContract, reference: Mapping[str, np.ndarray], options: Options,
               say: Say) -> tuple[Any, Any, list[str]]:
    """(model, sparsity, notes): the pruned model when it agrees with the original within the gate or the
    recipe asked for it explicitly; for auto, the original model back (and a note) when it does not.

    "Agrees" is fidelity to the original on the held-out rows: top-1 disagreement within --max-accuracy-drop
    for classification outputs, relative error within --max-relative-error for regression outputs.
    """
    from builder.optimize import prune, quality

    recipe, data, loaded = plan.recipe, plan.data, plan.loaded
    if not recipe.pruning or loaded.keras_model is None:
        return loaded.keras_model, None, []
    x_train, y_train, losses = fit_arguments(loaded.keras_model, contract, data.x_train, data.y_train, reference)
    from builder.errors import TfsmithError

    with _stage(say, f"pruning to {recipe.pruning.target_sparsity:.0%} with {recipe.pruning.epochs} fine-tuning epochs"):
        try:
            model, sparsity = prune.prune_model(loaded.keras_model, recipe.pruning, x_train, y_train, losses)
        except TfsmithError as error:
            if recipe.name != "auto":
                raise
            return loaded.keras_model, None, [f"pruning dropped: {error}"]
    from builder.optimize.model_io import keras_serving_fn

    from builder.optimize import tfenv

    tf = tfenv.tensorflow()
    serve = keras_serving_fn(model, contract.inputs, tuple(o.tensor() for o in contract.outputs))
    pruned_out = _batched_keras(serve, plan.gate_x, tf)
    # Judged on fidelity to the original (top-1 agreement / relative error), never on labels: accuracy can
    # rise while the answers change, and that is still a different model.
    metrics, passed, why = quality.judge(pruned_out, reference, {}, contract.outputs,
                                         max_accuracy_drop=options.max_accuracy_drop,
                                         max_relative_error=options.max_relative_error)
    agreement = quality.agreement_summary(metrics)
    if passed:
        return model, sparsity, [f"pruning kept: the pruned float model agrees with the original ({why})"]
    if recipe.name == "auto":
        return loaded.keras_model, None, [f"pruning dropped: the pruned float model changed the answers ({why}; "
                                          f"agreement {agreement:.3f}); auto never ships a retrained model that "
                                          "disagrees with the original"]
    return model, sparsity, [f"pruning applied as the recipe asks, although the pruned float model differs from the "
                             f"original ({why}; agreement {agreement:.3f})"]


def _batched_keras(serve: Callable, x: Mapping[str, np.ndarray], tf: Any, batch: int = 256) -> dict[str, np.ndarray]:
    rows = len(next(iter(x.values())))
    parts = [serve({k: tf.constant(v[i : i + batch]) for k, v in x.items()}) for i in range(0, rows, batch)]
    return {k: np.concatenate([np.asarray(p[k]) for p in parts]) for k in parts[0]}


# --- steps 4-6: export, convert, QAT -------------------------------------------------------------------


def export_step(plan: Plan, model: Any, contract: ModelContract, staging: Path, say: Say) -> Path | None:
    """The serving SavedModel (the optimized float model, the contract's signature) into staging."""
    from builder.optimize.model_io import export_keras

    loaded, recipe = plan.loaded, plan.recipe
    if loaded.tflite_path is not None:
        return None
    target = staging / FILE_NAMES["saved_model"]
    with _stage(say, "exporting the serving SavedModel"):
        if model is not None and (model is not loaded.keras_model or recipe.export.xla):
            export_keras(model, target, contract.inputs, tuple(o.tensor() for o in contract.outputs),
                         xla=recipe.export.xla)
        else:
            shutil.copytree(loaded.saved_model_dir, target)
            if recipe.export.xla:
                _add_xla(plan, target)
    return target


def _add_xla(plan: Plan, target: Path) -> None:
    """serving_xla beside the contract's signature, re-saved from the SavedModel itself (a Keras 3 export, a
    tf.Module); when TensorFlow cannot re-save it, a note says why and the SavedModel stays as it was."""
    from builder.optimize.causes import cause, log_text
    from builder.optimize.model_io import add_xla_signature

    try:
        add_xla_signature(target, plan.loaded.signature)
    except Exception as error:  # noqa: BLE001 - the SavedModel without serving_xla still serves
        shutil.rmtree(target.with_name(target.name + ".xla"), ignore_errors=True)
        log = plan.log("export-xla", log_text(error, "adding serving_xla"))
        plan.notes.append(f"xla: serving_xla not added: {cause(error)} (full text: {log})")


def convert_step(plan: Plan, saved_model: Path | None, staging: Path, say: Say) -> list[tuple[str, Path]]:
    from builder.optimize import quantize
    from builder.optimize.model_io import copy_original

    if plan.loaded.tflite_path is not None:
        path = staging / FILE_NAMES["tflite_original"]
        copy_original(plan.loaded, path)
        return [("tflite_original", path)]
    assert saved_model is not None
    produced: list[tuple[str, Path]] = [("saved_model", saved_model)]
    signature = plan.loaded.signature
    kinds = [k for k in plan.recipe.kinds if k not in ("saved_model", "tflite_qat_int8")]
    if plan.no_tflite is not None:
        kinds.append("tflite_select_tf")
    for kind in kinds:
        mode = kind.removeprefix("tflite_")
        with _stage(say, f"converting to TFLite {mode}"):
            path = staging / FILE_NAMES[kind]
            try:
                path.write_bytes(quantize.convert_saved_model(saved_model, mode, plan.data.x_calib, plan.notes,
                                                              signature=signature))
            except quantize.ConversionFailed as error:
                log = plan.log(f"convert-{mode}", error.full_text)
                plan.notes.append(f"{FILE_NAMES[kind]} not written: TFLite {mode} conversion failed: {error.cause} "
                                  f"(full text: {log})")
                continue
        if kind == "tflite_select_tf":
            plan.notes.append(f"{FILE_NAMES[kind]}: converted with Select TF ops (TFLite builtins plus TensorFlow "
                              "kernels); it runs on TensorFlow's own interpreter where TensorFlow carries the Flex "
                              "delegate, never on LiteRT")
        produced.append((kind, path))
    return produced


def qat_step(plan: Plan, model: Any, pruned: bool, contract: ModelContract, reference: Mapping[str, np.ndarray],
             staging: Path, scratch: Path, say: Say) -> list[tuple[str, Path]]:
    from builder.optimize import prune, quality, quantize

    recipe = plan.recipe
    if not recipe.quantization.qat or model is None:
        return []
    x_train, y_train, losses = fit_arguments(model, contract, plan.data.x_train, plan.data.y_train, reference)
    with _stage(say, f"quantization-aware training{' (pruning-preserving)' if pruned else ''}"):
        qat_model = quantize.quantization_aware_train(
            model, x_train, y_train, losses,
            recipe.quantization.qat_epochs, recipe.pruning.batch_size if recipe.pruning else 32, pruned=pruned)
        path = staging / FILE_NAMES["tflite_qat_int8"]
        path.write_bytes(quantize.convert_qat(qat_model, contract.inputs, tuple(o.tensor() for o in contract.outputs),
                                              plan.data.x_calib, scratch, like=model))
    return [("tflite_qat_int8", path)]


# --- step 7: evaluate --------------------------------------------------------------------------------


def openvino_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("openvino") is not None


def contract_kept(contract: ModelContract, inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...]) -> tuple[bool, str]:
    """Does a file's signature equal the contract (names, dtypes, shapes)? (kept, what differs)."""
    want_in, want_out = contract.api()
    got_in, got_out = frozenset(inputs), frozenset(outputs)
    if want_in == got_in and want_out == got_out:
        return True, ""
    differ = sorted((want_in ^ got_in) | (want_out ^ got_out), key=lambda t: t.name)
    return False, "signature differs from the original's: " + ", ".join(
        f"{t.name} {t.dtype}{_shape_text(t.shape)}" for t in differ[:4])


def evaluate_artifact(kind: str, path: Path, rel: str, runtime: str, plan: Plan, contract: ModelContract,
                      reference: Mapping[str, np.ndarray], options: Options) -> tuple[ArtifactResult, Any]:
    """Outputs on the held-out rows with the serving runtime, judged per output against the original."""
    from builder.optimize import evaluate, quality

    runner = evaluate.Runner(runtime, path, options.threads, contract.signature if path.is_dir() else None)
    kept, differs = contract_kept(contract, runner.inputs, runner.outputs)
    outputs = runner.predict_all(plan.gate_x)
    metrics, passed, why = quality.judge(outputs, reference, plan.data.y_val, contract.outputs,
                                         max_accuracy_drop=options.max_accuracy_drop,
                                         max_relative_error=options.max_relative_error)
    raw, packed = evaluate.file_sizes(path)
    variables = evaluate.file_sizes(path / "variables")[0] if (path / "variables").is_dir() else 0
    extra: dict[str, Any] = {"signatures": list(runner.signatures)}
    result = ArtifactResult(
        path=rel, kind=kind, runtime=runtime, size_bytes=raw, gzip_bytes=packed, threads=options.threads,
        latency_us=Latency(0.0, 0.0, 0), throughput={},
        inputs=runner.inputs, outputs=runner.outputs, metrics=metrics, contract_kept=kept,
        accepted=passed and kept, reason=why if kept else differs, variables_bytes=variables, extra=extra)
    return result, runner


def evaluate_step(produced: list[tuple[str, Path]], staging: Path, plan: Plan, contract: ModelContract,
                  reference: Mapping[str, np.ndarray], options: Options, say: Say) -> list[ArtifactResult]:
    results = []
    for kind, path in produced:
        with _stage(say, f"evaluating {path.name}"):
            runtime = TF if kind in TF_KINDS else "litert"
            try:
                result, _ = evaluate_artifact(kind, path, path.name, runtime, plan, contract, reference, options)
            except Exception as error:  # noqa: BLE001 - a file this host cannot run is rejected, with why
                if kind == "saved_model":
                    raise
                result = unrunnable(kind, path, runtime, plan, error, options)
        results.append(result)
    return results


def unrunnable(kind: str, path: Path, runtime: str, plan: Plan, error: BaseException,
               options: Options) -> ArtifactResult:
    """A file kept in OUT that this host's runtime cannot run (a Select-TF-ops .tflite on a TensorFlow without
    the Flex delegate, as the stock wheel is; a .tflite LiteRT cannot prepare at the held-out rows' shapes):
    rejected here, with the runtime's own first line, the log in OUT/logs and what serves it instead."""
    from builder.optimize import evaluate
    from builder.optimize.causes import cause, log_text

    log = plan.log(f"run-{path.stem}", log_text(error, f"running {path.name} on {runtime}"))
    raw, packed = evaluate.file_sizes(path)
    return ArtifactResult(
        path=path.name, kind=kind, runtime=runtime, size_bytes=raw, gzip_bytes=packed, threads=options.threads,
        latency_us=Latency(0.0, 0.0, 0), throughput={}, inputs=(), outputs=(), metrics=(), contract_kept=False,
        accepted=False, reason=f"not run on this host: {runtime} cannot run {path.name}: {cause(error)} (full text: "
                               f"{log}); " + ("a TensorFlow build with the Flex delegate can" if kind == "tflite_select_tf"
                                              else "the SavedModel in the same folder serves the model on TensorFlow"),
        extra={"runnable_here": False})


def baseline_step(plan: Plan, contract: ModelContract, reference: Mapping[str, np.ndarray],
                  options: Options) -> tuple[ArtifactResult | None, Any]:
    """The unoptimized float model served as a SavedModel (the original's signature): the reference row."""
    if plan.loaded.saved_model_dir is None:
        return None, None
    return evaluate_artifact("saved_model", plan.loaded.saved_model_dir, "baseline", "tensorflow", plan, contract,
                             reference, options)


# --- step 8: measure candidates -------------------------------------------------------------------------


def measure_step(results: list[ArtifactResult], staging: Path, plan: Plan, contract: ModelContract,
                 reference: Mapping[str, np.ndarray], baseline_dir: Path | None, options: Options,
                 say: Say) -> tuple[list[ArtifactResult], list[Candidate], dict[str, Latency]]:
    """Time every artifact x runtime (x precision, x signature) in ONE interleaved loop, judge what runs
    differently from the evaluated path by the gate, and record each candidate's cost at a new input shape
    (`builder.optimize.candidates`); then rows/s of each artifact's own row."""
    from builder.optimize import candidates as cands
    from builder.optimize import evaluate, quality
    from builder.optimize.causes import cause

    def judge(outputs: Mapping[str, np.ndarray]) -> tuple[bool, str]:
        _, passed, why = quality.judge(outputs, reference, plan.data.y_val, contract.outputs,
                                       max_accuracy_drop=options.max_accuracy_drop,
                                       max_relative_error=options.max_relative_error)
        return passed, why

    def make(runtime: str, path: Path, signature: str) -> Any:
        return evaluate.Runner(runtime, path, options.threads, signature or None)

    pairs = sum(len(cands.candidate_pairs(r, contract, allowed_precisions(plan.recipe))) for r in results)
    budget = min(60.0, max(0.5, (pairs + (baseline_dir is not None)) * min(3.0, max(0.1, options.latency_runs / 100))))
    baseline_key = "baseline@tensorflow"

    def timer(calls: Mapping[str, Callable[[], Any]], share: float) -> dict[str, Latency]:
        if baseline_dir is not None:
            calls = {**calls, baseline_key: baseline_runner.row_caller(plan.data.x_val)}
        with _stage(say, f"timing {len(calls)} artifact x runtime pairs ({share:.0f} s, interleaved)"):
            return evaluate.time_runners(calls, share)

    baseline_runner = (evaluate.Runner(TF, baseline_dir, options.threads, contract.signature)
                       if baseline_dir is not None else None)
    candidates, latencies, made = cands.measure(
        results, staging, contract, plan.data.x_val, plan.gate_x, allowed_precisions(plan.recipe), make, judge,
        timer, budget, cause, lambda text: _stage(say, text))
    if baseline_runner is not None:
        made[baseline_key] = baseline_runner
    updated = cands.primary_rows(results, latencies, contract)
    primaries = {r.path: cands.key(r.path, r.runtime, contract.signature if r.kind == "saved_model" else "")
                 for r in results}
    rows_per_s = _time_batches({k: latencies[k] for k in [*primaries.values(), baseline_key]
                                if k in made and k in latencies}, made, plan, budget, say)
    updated = [replace(r, throughput=rows_per_s.get(primaries[r.path], r.throughput)) for r in updated]
    extra = ({"baseline": latencies[baseline_key], "baseline_throughput": rows_per_s.get(baseline_key, {})}
             if baseline_key in latencies else {})
    line = cands.shape_line(contract, candidates)
    if line:
        plan.notes.append(line)
    return updated, candidates, extra


def allowed_precisions(recipe: Recipe) -> tuple[str, ...]:
    """What the recipe lets a runtime compute in: float always; int8 where the recipe quantizes to int8."""
    from builder.optimize.candidates import allowed_precisions as allowed

    return allowed("int8" in recipe.quantization.modes or recipe.quantization.qat)


def _time_batches(rows: Mapping[str, Latency], made: Mapping[str, Any], plan: Plan, budget: float, say: Say
                  ) -> dict[str, dict[str, float]]:
    """rows/s of each table row (`rows`: its batch-1 latency): batch-B calls timed in one interleaved loop like
    batch 1, so rows/s and p50 come from the same kind of measurement (B: `evaluate.batch_for`; at B = 1 the
    batch-1 timing itself)."""
    from builder.optimize import evaluate

    batches = {k: evaluate.batch_for(made[k], plan.data.x_val, row.p50) for k, row in rows.items()}
    out = {k: evaluate.throughput_from(1, rows[k]) for k, b in batches.items() if b == 1}
    calls = {k: evaluate.batch_caller(made[k], plan.data.x_val, b) for k, b in batches.items() if b > 1}
    if calls:
        share = max(0.5, budget / 3)
        with _stage(say, f"timing {len(calls)} artifacts at batch {max(batches.values())} for rows/s "
                         f"({share:.0f} s, interleaved)"):
            per_call = evaluate.time_runners(calls, share, warmup=1)
        out |= {k: evaluate.throughput_from(batches[k], per_call[k]) for k in calls if k in per_call}
    return out


# --- step 9: select -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Choice:
    """What to serve: the artifact (relative to OUT), the runtime, and the signature a request without
    signature_name gets."""

    artifact: str
    runtime: str
    signature: str
    selection: Selection


def select_step(recipe: Recipe, facts: TargetFacts, results: list[ArtifactResult], candidates: list[Candidate],
                contract_signature: str = "serving_default") -> tuple[Choice, list[str]]:
    """(choice, notes).

    On this host, whatever the recipe: the fastest accepted candidate (any artifact the recipe built x runtime x
    precision x signature; only the named artifact's when the recipe names `choose`) by measured p50; those within noise of the fastest (overlapping median confidence intervals) break the tie by
    the smaller file, then the smaller runtime (LiteRT first, TensorFlow last), then the contract's own
    signature over serving_xla, then the name (`pick_fastest`). Elsewhere, or for GPU targets: by rule (the recipe's choice, else the first accepted in RULE_ORDER, else the SavedModel), the
    contract's signature.
    """
    accepted = {r.path: r for r in results if r.accepted}
    notes: list[str] = []
    by_kind = {r.kind: r for r in results}
    if facts.is_host and not any(recipes._cc_value(cc) >= 7.0 for cc in facts.gpu_capabilities):
        named = FILE_NAMES.get(recipe.choose, recipe.choose) if recipe.choose_named else None
        usable = [c for c in candidates if c.p50_us is not None and not c.error and c.artifact in accepted
                  and (named is None or c.artifact == named)]
        if usable:
            chosen = pick_fastest(usable, contract_signature)
            how = f"measured on this host: {describe_pick(chosen, usable, contract_signature)}"
            if named is not None:
                how += f" (the recipe names {named}; its runtime and precision were measured)"
            elif recipe.name != "auto":
                how += f" (among what recipe {recipe.name} builds)"
            return Choice(chosen.artifact, chosen.runtime, chosen.signature or contract_signature,
                          Selection(True, how, tuple(candidates))), notes
        notes.append("no accepted artifact could be measured on this host; choosing by rule")
    preferred = by_kind.get(recipe.choose)
    if preferred is not None and preferred.accepted:
        chosen_path = preferred.path
    else:
        order = RULE_ORDER + ("saved_model",)
        fallback = next((by_kind[k] for k in order if k in by_kind and by_kind[k].accepted), None)
        if fallback is not None and recipe.name == "auto":
            notes.append(f"{FILE_NAMES.get(recipe.choose, recipe.choose)} was rejected by the gate or not produced; "
                         f"auto chose the accepted {fallback.path} instead")
            chosen_path = fallback.path
        else:
            chosen_path = FILE_NAMES.get(recipe.choose, recipe.choose)
    kind = next((r.kind for r in results if r.path == chosen_path), "")
    runtime = TF if kind in TF_KINDS or chosen_path == FILE_NAMES["saved_model"] else "litert"
    how = ("by rule for this host: the recipe names the artifact" if facts.is_host else
           f"by rule: {facts.name} is not this host, so it could not be measured here")
    return Choice(chosen_path, runtime, contract_signature, Selection(False, how, tuple(candidates))), notes


def _timed(c: Candidate, contract_signature: str) -> Any:
    """A candidate as the shared decision sees it: median, its CI, and the tie order (file size, runtime, the
    contract's own signature before serving_xla, name)."""
    from builder.measure.decide import Timed

    p50 = float(c.p50_us)  # type: ignore[arg-type]
    return Timed(_name(c), p50, c.ci_low_us if c.ci_low_us is not None else p50,
                 c.ci_high_us if c.ci_high_us is not None else p50, c.size_bytes, c.runtime,
                 int((c.signature or contract_signature) != contract_signature))


def pick_fastest(candidates: list[Candidate], contract_signature: str = "serving_default") -> Candidate:
    """`builder.measure.decide.pick`: among the candidates within noise of the fastest (overlapping median
    confidence intervals), the smaller file, then the smaller runtime (LiteRT first), then the contract's own
    signature, then the name; so serving_xla is served by default only when it is faster beyond noise."""
    from builder.measure.decide import pick

    timed = {_name(c): c for c in candidates if c.p50_us is not None}
    return timed[pick([_timed(c, contract_signature) for c in timed.values()]).name]


def _name(c: Candidate) -> str:
    return f"{c.artifact}{'#' + c.signature if c.signature == XLA_SIGNATURE else ''} on {c.runtime}"


def describe_pick(chosen: Candidate, candidates: list[Candidate], contract_signature: str = "serving_default") -> str:
    from builder.measure.decide import fastest

    best = fastest([_timed(c, contract_signature) for c in candidates if c.p50_us is not None])
    text = f"{_name(chosen)}, p50 {chosen.p50_us:.1f} us"
    if best.name != _name(chosen):
        text += (f" (fastest: {best.name} {best.p50:.1f} us [95% CI {best.ci_low:.1f}-{best.ci_high:.1f}], within "
                 "noise of it; the smaller file / smaller runtime / the contract's signature wins the tie)")
    return text + f"; {len(candidates)} accepted candidates timed in one interleaved loop"


# --- step 10: samples -----------------------------------------------------------------------------------


def samples_step(staging: Path, plan: Plan, contract: ModelContract, reference: Mapping[str, np.ndarray]) -> None:
    """samples.npz: `x/<input>` (original dtypes), `expected/<output>` (the ORIGINAL model's outputs),
    `y/<output>` (labels where DATA has them); the first SAMPLE_ROWS held-out rows, named keys always.
    Strings are fixed-width UTF-8 bytes (`S<n>`): np.load(allow_pickle=False) reads them back."""
    from builder.optimize.data import as_bytes, numpy_dtype

    def typed(values: np.ndarray, dtype: str) -> np.ndarray:
        return as_bytes(values) if dtype == "string" else np.asarray(values, dtype=numpy_dtype(dtype))

    arrays: dict[str, np.ndarray] = {}
    for spec in contract.inputs:
        arrays[f"x/{spec.name}"] = typed(plan.data.x_val[spec.name][:SAMPLE_ROWS], spec.dtype)
    rows = min(SAMPLE_ROWS, len(next(iter(plan.data.x_val.values()))))  # the gate's zero row is not a sample
    for spec in contract.outputs:
        arrays[f"expected/{spec.name}"] = typed(reference[spec.name][:rows], spec.dtype)
        if spec.name in plan.data.y_val:
            arrays[f"y/{spec.name}"] = np.asarray(plan.data.y_val[spec.name][:SAMPLE_ROWS])
    np.savez(staging / SAMPLES_NAME, **arrays)


# --- the run ----------------------------------------------------------------------------------------------


def run(options: Options, say: Say = lambda _: None) -> Outcome:
    """Do the whole optimization; raises TfsmithError for bad input with --out untouched."""
    from builder.optimize import export as exporting
    from builder.optimize import report as reporting
    from builder.optimize import tfenv

    from builder.optimize.causes import keep_log

    plan = make_plan(options, say)
    tf = tfenv.tensorflow()
    data, loaded = plan.data, plan.loaded
    with _stage(say, "the original model's outputs on the held-out rows"):
        reference = loaded.predict(plan.gate_x)
    contract = make_contract(loaded.inputs, loaded.outputs, reference, data.y_val, dict(plan.recipe.tasks),
                             loaded.signature)
    check_labels(contract, data.y_val, data.y_train)
    staging = exporting.staging_dir(options.out)
    scratch = Path(tempfile.mkdtemp(prefix="tfsmith-optimize-"))
    try:
        model, sparsity, prune_notes = prune_step(plan, contract, reference, options, say)
        plan.notes.extend(prune_notes)
        saved_model = export_step(plan, model, contract, staging, say)
        produced = convert_step(plan, saved_model, staging, say)
        produced += qat_step(plan, model, sparsity is not None, contract, reference, staging, scratch, say)
        results = evaluate_step(produced, staging, plan, contract, reference, options, say)
        with _stage(say, "the float baseline (SavedModel signature)"):
            baseline, _ = baseline_step(plan, contract, reference, options)
        samples_step(staging, plan, contract, reference)  # before timing: openvino-nncf calibrates on them
        unpruned_export = sparsity is None and any(r.kind == "saved_model" for r in results)
        results, candidates, extra = measure_step(results, staging, plan, contract, reference,
                                                  None if unpruned_export else loaded.saved_model_dir, options, say)
        same = next((r for r in results if r.kind == "saved_model"), None) if sparsity is None else None
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
            selection=selection, chosen_signature=choice.signature)
        with _stage(say, "writing report.json, report.md, report.png"):
            reporting.write_report(report, staging)
            for name, text in plan.logs.items():
                keep_log(name, text, staging)
        exporting.publish(staging, options.out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        loaded.close()
    return Outcome(report=report, out=Path(options.out))


def _version(package: str = "tfsmith") -> str:
    try:
        from importlib.metadata import version

        return version(package)
    except Exception:
        return "unknown"


# --- CLI glue -----------------------------------------------------------------------------------------


def explain_plan(*, model: Path, data: str, recipe: str, target: str | None, cuda_cc: str | None,
                 max_accuracy_drop: float, max_relative_error: float, threads: int, signature: str | None = None,
                 imports: tuple[str, ...] = ()) -> list[str]:
    """The plan for THIS model: loads it, reads its contract and DATA, and says what will (not) be done."""
    from builder.optimize import tfenv

    from builder.optimize.causes import keep_log

    # --explain writes no output; the full texts its notes name go to a fresh temp folder instead of --out
    logs = Path(tempfile.mkdtemp(prefix="tfsmith-explain-"))
    options = Options(model=model, data=data, recipe_spec=recipe, target=target, out=logs,
                      max_accuracy_drop=max_accuracy_drop, threads=threads, cuda_cc=cuda_cc,
                      max_relative_error=max_relative_error, signature=signature, imports=imports)
    with tfenv.quiet_native_stderr():
        plan = make_plan(options, lambda _: None)
        for name, text in plan.logs.items():
            keep_log(name, text, logs)
        reference = plan.loaded.predict({k: v[:64] for k, v in plan.data.x_val.items()})
        contract = make_contract(plan.loaded.inputs, plan.loaded.outputs, reference,
                                 {k: v[:64] for k, v in plan.data.y_val.items()}, dict(plan.recipe.tasks),
                                 plan.loaded.signature)
        check_labels(contract, plan.data.y_val, plan.data.y_train)
    lines = explain_lines(plan.recipe, plan.reasons, plan.facts, None, contract)
    for spec in contract.outputs:
        lines.append(f"quality of {spec.name}: {spec.task} ({spec.task_why})")
    lines += [f"note: {n}" for n in plan.notes]
    plan.loaded.close()
    return lines


def run_optimize_command(*, model: Path, data: str, recipe: str, target: str | None, out: Path,
                         max_accuracy_drop: float, explain: bool, threads: int, cuda_cc: str | None = None,
                         latency_runs: int = 300, max_relative_error: float = DEFAULT_MAX_RELATIVE_ERROR,
                         signature: str | None = None, imports: tuple[str, ...] = ()) -> int:
    """What `tfsmith optimize` does; returns the exit status (0, or EXIT_GATE_FAILED)."""
    import os
    import sys

    from rich.console import Console
    from rich.table import Table

    from builder.optimize import report as reporting

    if explain:
        for line in explain_plan(model=model, data=data, recipe=recipe, target=target, cuda_cc=cuda_cc,
                                 max_accuracy_drop=max_accuracy_drop, max_relative_error=max_relative_error,
                                 threads=threads, signature=signature, imports=imports):
            print(line)
        return 0
    # A handle on the real stderr, kept while native code's banners on fd 2 are silenced during the run.
    err = Console(file=os.fdopen(os.dup(2), "w", buffering=1), highlight=False, stderr=True)
    options = Options(model=model, data=data, recipe_spec=recipe, target=target, out=out,
                      max_accuracy_drop=max_accuracy_drop, threads=threads, cuda_cc=cuda_cc,
                      latency_runs=latency_runs, max_relative_error=max_relative_error, signature=signature,
                      imports=imports)
    from builder.optimize import tfenv

    from builder.optimize.progress import step_say

    with err.status("tfsmith optimize") as status, tfenv.quiet_native_stderr():
        outcome = run(options, say=step_say(err, status))
    report = outcome.report
    table = Table(title=f"tfsmith optimize -> {outcome.out}", caption=reporting.TIMINGS)
    for header in reporting.HEADERS:
        table.add_column(header, justify="left" if header in ("artifact", "kind", "gate", "quality") else "right")
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
    signature = "" if report.chosen_signature == "serving_default" else f", signature {report.chosen_signature}"
    pick = reporting.chosen_candidate(report)
    print(f"chosen: {report.chosen} on {reporting.runtime_text(report.chosen_runtime, pick.precision if pick else '')}"
          f"{signature} ({report.selection.how})")
    print(f"report: {outcome.out / reporting.REPORT_JSON} ({reporting.REPORT_MD}, {reporting.REPORT_PNG})")
    if not outcome.gate_passed:
        sys.stderr.write(f"tfsmith: error: quality gate failed: {report.chosen}: {report.gate.chosen_reason}; "
                         f"artifacts kept in {outcome.out}, marked rejected\n")
        return EXIT_GATE_FAILED
    return 0
