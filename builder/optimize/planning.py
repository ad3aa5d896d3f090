"""Step 1, the plan: recipe, model, contract and DATA, all checked before any work (every refusal happens here),
and what `--explain` says of it."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from builder.optimize import recipe as recipes
from builder.optimize.budget import Budget
from builder.optimize.layout import FILE_NAMES, XLA_SIGNATURE
from builder.optimize.ledger import SKIPPED, Ledger
from builder.optimize.options import Options, stage
from builder.optimize.recipe import Recipe
from builder.optimize.target import INTERESTING_FLAGS, TargetFacts, measures_here, target_facts
from builder.report import Attempt, ModelContract
from builder.say import Say

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
                 original_tflite: bool = False, why_not_qat: str | None = None,
                 one_shot: bool = False) -> tuple[Recipe, list[Attempt]]:
    """Drop what the model or DATA cannot support, each step with its SKIPPED entry (one line says why for the
    steps it names together), keeping the chosen artifact meaningful.

    `why_not_trainable`: why neither pruning nor QAT can fine-tune the model; `why_not_qat`: why QAT cannot
    where pruning can (a Keras 3 model: tfsmith prunes it, tfmot's QAT takes only tf_keras); `one_shot`: the
    model can be pruned without fine-tuning (`prune_oneshot`), so auto keeps pruning without training rows."""
    skips: list[Attempt] = []
    pruning, quant = recipe.pruning, recipe.quantization
    if original_tflite:
        steps = planned_steps(recipe)
        skips.append(skip("model.tflite", "it is the original", said="the model is a .tflite: it is the original "
                          "and the only artifact; it is evaluated and measured as it is"
                          + (f" (not made: {', '.join(steps)})" if steps else "")))
        skips += [skip(step, "the model is a .tflite", said="") for step in steps]  # each named in the line above
        return replace(recipe, pruning=None, quantization=recipes.Quantization(modes=()),
                       export=recipes.Export(tflite_fp32=False, xla=False, openvino=False),
                       choose="tflite_original"), skips
    if why_not_trainable and (pruning or quant.qat):
        why = f"the model is {why_not_trainable}"
        skips.append(skip(PRUNING, why, said=f"pruning and QAT skipped: {why}"))
        if quant.qat:  # asked for: a line of its own, as every step that drops out has
            skips.append(skip(QAT, why))
        pruning, quant = None, replace(quant, qat=False)
    if why_not_qat and quant.qat:
        why = f"the model is {why_not_qat}"
        skips.append(skip(QAT, why, said=f"QAT skipped: {why}"))
        quant = replace(quant, qat=False)
    if recipe.name == "auto" and pruning and not has_train and not one_shot:
        skips.append(skip(PRUNING, "DATA has no x_train with labels to fine-tune on"))
        pruning = None
    adapted = replace(recipe, pruning=pruning, quantization=quant)
    if adapted.choose not in adapted.formats:
        fallback = next(f for f in ("tflite_int8", "tflite_dynamic", "tflite_fp32", "saved_model")
                        if f in adapted.formats)
        skips.append(Attempt("choice", SKIPPED, f"chosen artifact {adapted.choose} is not produced any more; "
                             f"choosing {fallback}", "not produced"))
        adapted = replace(adapted, choose=fallback)
    return adapted, skips


ONE_SHOT_NOTE = ("pruning: one-shot by magnitude (DATA has no x_train with labels to fine-tune on): the highest "
                 "sparsity of 20% to 90% at which the model still passes the gate against the original on the "
                 "held-out rows")


def one_shot_note(why: str) -> str:
    """The plan's line for one-shot pruning, saying why there is no fine-tuning."""
    return ONE_SHOT_NOTE.replace("DATA has no x_train with labels to fine-tune on", why)

#: The ledger's names of the steps beyond the SavedModel that are not one file each.
PRUNING, QAT = "pruning", "quantization-aware training"


def skip(step: str, why: str, said: str | None = None) -> Attempt:
    """A step not tried: its line is "<step> skipped: <why>" unless `said` says it otherwise ("" when another
    entry's line already says it)."""
    return Attempt(step, SKIPPED, f"{step} skipped: {why}" if said is None else said, why)


def planned_steps(recipe: Recipe) -> tuple[str, ...]:
    """The ledger's names for every optional step this recipe asks for: pruning, QAT, each file beyond the
    SavedModel, serving_xla. After a run, each one has an entry: done, dropped or skipped."""
    steps = [PRUNING] if recipe.pruning else []
    steps += [FILE_NAMES[f] for f in formats_of(recipe) if f not in ("saved_model", "tflite_original", "tflite_qat_int8")]
    if recipe.quantization.qat:
        steps.append(QAT)
    if recipe.export.xla:
        steps.append(XLA_SIGNATURE)
    return tuple(steps)


def formats_of(recipe: Recipe) -> tuple[str, ...]:
    return ("tflite_original",) if recipe.choose == "tflite_original" else recipe.formats


def explain_lines(recipe: Recipe, reasons: tuple[str, ...], facts: TargetFacts, model_note: str | None,
                  contract: ModelContract | None = None, one_shot: bool = False) -> list[str]:
    lines = [f"target: {facts.name} ({facts.arch}); int8/half features: "
             f"{', '.join(sorted(facts.features & set(INTERESTING_FLAGS))) or 'none'}; "
             f"GPUs: {', '.join(facts.gpu_capabilities) or 'none'}",
             f"recipe: {recipe.name}; artifacts: {', '.join(FILE_NAMES[f] for f in formats_of(recipe))}; "
             f"chosen: {FILE_NAMES[recipe.choose]}"
             + (" (by rule; on this host every accepted artifact x runtime x precision is measured and the fastest "
                "picked)" if facts.is_host and not recipe.choose_named and recipe.choose != "saved_model" else "")]
    if contract is not None:
        lines.append("contract: inputs " + ", ".join(f"{t.name} {t.dtype}{_shape_text(t.shape)}" for t in contract.inputs)
                     + "; outputs " + ", ".join(f"{t.name} {t.dtype}{_shape_text(t.shape)}" for t in contract.outputs))
    if recipe.pruning:
        p = recipe.pruning
        how = (f"{p.structured and f'{p.structured[0]}:{p.structured[1]} structured' or f'{p.sparsity:.0%} {p.schedule}'}"
               f", {p.epochs} fine-tuning epochs")
        if one_shot:
            how = "one-shot by magnitude (no fine-tuning): the highest of 20-90% the gate keeps"
        lines.append(f"pruning: {how}" + ("; kept only if the pruned model passes the gate against the original"
                                          if recipe.name == "auto" else ""))
    lines.append(f"quantization: {', '.join(recipe.quantization.modes) or 'none'}"
                 f"{'; QAT ' + str(recipe.quantization.qat_epochs) + ' epoch(s)' if recipe.quantization.qat else ''}")
    lines += [f"why: {r}" for r in reasons]
    if model_note:
        lines.append(f"model: {model_note}")
    return lines


def _shape_text(shape: tuple[int | None, ...]) -> str:
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


# --- step 1: plan (every refusal before any work) -------------------------------------------------------


@dataclass
class Plan:
    """What the run was asked and found before any work: the target, the recipe adapted to the model and DATA,
    the loaded model and DATA, and the ledger every later step records into. The recipe and DATA are settled
    once more by the contract (labels that fit no task are set aside), then read only."""

    facts: TargetFacts
    recipe: Recipe
    reasons: tuple[str, ...]
    ledger: Ledger
    loaded: Any  # model_io.LoadedModel
    data: Any  # data.Data
    #: why no plain .tflite can be made (the converter's own first error line), None when it can
    no_tflite: str | None = None
    #: the float .tflite the plan's probe converted from the original's weights (`_probe_conversion`): the
    #: model_fp32.tflite itself when nothing changes those weights before conversion (`convert_step`)
    probe_fp32: bytes | Path | None = None
    #: what the converter said of that file (a note the run gives where the file is used)
    probe_notes: tuple[str, ...] = ()
    #: the original's other signatures, each with the rows it is judged on (`builder.optimize.signatures`)
    checks: tuple[Any, ...] = ()
    #: the recipe as asked, before the model and DATA took steps out of it: what the ledger must account for
    asked: Recipe | None = None
    #: pruning without fine-tuning (`prune_oneshot`): auto's pruning of a Keras model without labelled training rows
    one_shot: bool = False
    #: the original's answers on x_train for the outputs without training labels, computed once before any
    #: fine-tuning (`contract.teacher_answers`): what pruning and QAT fine-tune those outputs to
    train_answers: dict[str, np.ndarray] | None = None
    #: the unpruned model's float .tflite, measured once pruning is kept (`pruning_gains.unpruned_float`), or why
    #: there is none to set the pruned one against
    unpruned_fp32: dict[str, int] | None = None
    unpruned_why: str | None = None
    #: the pruned model's float .tflite when its zeros are stored sparse (the converter's EXPERIMENTAL_SPARSITY)
    stored_sparse: str | None = None

    @property
    def notes(self) -> Any:
        """Append-only notes into the ledger (`Ledger.notes`)."""
        return self.ledger.notes

    @property
    def logs(self) -> dict[str, str]:
        return self.ledger.logs

    def log(self, name: str, text: str) -> Path:
        """Keep a full error text for OUT/logs/<name>.log; returns the path it will have."""
        return self.ledger.log(name, text)

    @functools.cached_property
    def gate_x(self) -> dict[str, np.ndarray]:
        """The rows the gate judges every artifact on: the held-out rows, then one all-zero input (`gate_rows`)."""
        from builder.model.rows import fixed_batch

        return gate_rows(self.data.x_val, fixed_batch(self.loaded.inputs))


def gate_rows(x_val: Mapping[str, np.ndarray], fixed: int | None = None) -> dict[str, np.ndarray]:
    """The held-out rows and one all-zero row after them, for numeric inputs (text has no all-zero input); for a
    model built for batches of exactly `fixed` rows, a whole batch of zero rows, so every call stays whole.

    Why: a blank input is where an int8 file most often answers equal top scores (every activation near its
    zero point) while the float original still has a clear answer; real traffic sends such inputs. Labels
    cover the held-out rows only; the zero rows are judged against the original's own answer.
    """
    if not x_val or any(np.asarray(v).dtype.kind not in "biuf" or np.ndim(v) == 0 for v in x_val.values()):
        return dict(x_val)
    zeros = fixed or 1
    return {k: np.concatenate([v, np.zeros((zeros, *np.shape(v)[1:]), dtype=np.asarray(v).dtype)])
            for k, v in x_val.items()}

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
    budget = memory_budget(options)
    refuse_unless_fits(budget, "load", model_bytes(options.model), options.model, "to load it")
    with stage(say, f"loading {options.model}"):
        loaded = load_model(options.model, options.signature, options.imports,
                            apart=budget.in_a_process("load", model_bytes(options.model)), limit=budget.limit)
    budget.weights = weights_bytes(loaded, options.model)
    if loaded.saved_model_dir is not None:  # the floor: the model's own SavedModel on TensorFlow
        refuse_unless_fits(budget, "runner:tensorflow", None, options.model,
                           "to run its SavedModel on TensorFlow (the least optimize serves)")
    raw = data_mod.load_data(options.data, loaded.inputs, loaded.outputs)
    has_train = data_mod.has_training_data(raw, loaded.outputs)
    ledger = Ledger(options.out, budget)
    asked = recipe
    why_not_trainable, why_not_qat = why_not_fine_tuned(loaded)
    keras = loaded.keras_model is not None or loaded.has_keras3
    # an output no loss applies to (an int or bool answer) stops fine-tuning, not pruning by magnitude alone
    by_outputs = keras and why_not_trainable is not None and why_not_trainable == untrainable_outputs(loaded.outputs)
    one_shot = recipe.name == "auto" and keras and ((not has_train and why_not_trainable is None) or by_outputs)
    lossless = lossless_outputs(loaded.outputs)
    one_shot_why = f"the model is {lossless}" if by_outputs else "DATA has no x_train with labels to fine-tune on"
    if one_shot and recipe.pruning is not None and budget.in_a_process("prune"):  # the search is in memory
        from builder.measure.memory import text as memory_text

        one_shot = False
        ledger.note(f"pruning: one-shot not tried for a model of {memory_text(budget.weights)} of weights: its search "
                    "keeps a pruned copy and its traced functions resident for the rest of the run (3.6 GiB beside "
                    "2.0 GiB for a BERT-base-sized classifier) for a smaller gzip only, since sparsity does not speed "
                    "up dense kernels")
    if one_shot and by_outputs:  # pruned without fine-tuning; QAT, which trains, still goes with its line
        recipe, skips = adapt_recipe(recipe, None, has_train, loaded.tflite_path is not None,
                                     why_not_qat or lossless, one_shot=True)
    else:
        recipe, skips = adapt_recipe(recipe, why_not_trainable, has_train, loaded.tflite_path is not None,
                                     why_not_qat, one_shot=one_shot)
    ledger.add(skips)
    one_shot = one_shot and recipe.pruning is not None
    if one_shot:
        ledger.note(one_shot_note(one_shot_why))
    if why_not_trainable and loaded.trainable_why_not and not skips:
        ledger.note(f"the model is {loaded.trainable_why_not}")
    for note in loaded.notes:
        ledger.note(note)
    unknown = sorted({name for name, _ in recipe.tasks} - {t.name for t in loaded.outputs})
    if unknown:
        from builder.errors import InputError

        raise InputError(f"recipe {options.recipe_spec}: [tasks] names {unknown[0]!r}, which is not an output "
                         f"(outputs: {', '.join(t.name for t in loaded.outputs)})")
    plan = Plan(facts, recipe, reasons, ledger, loaded, None, asked=asked, one_shot=one_shot)
    strings = [side for side, specs in (("inputs", loaded.inputs), ("outputs", loaded.outputs))
               if any(t.dtype == "string" for t in specs)]
    if strings and recipe.export.xla:
        recipe = replace(recipe, export=replace(recipe.export, xla=False))
        ledger.add([skip(XLA_SIGNATURE, f"string {' and '.join(strings)} have no XLA kernels",
                         said=f"xla: serving_xla not added: string {' and '.join(strings)} have no XLA kernels")])
    if loaded.saved_model_dir is not None:
        failure, plan.probe_fp32, plan.probe_notes = _probe_conversion(loaded, budget)
        if failure is not None:
            before = recipe
            recipe, note = without_tflite(recipe, failure.cause, plan.log("convert-fp32", failure.full_text))
            plan.no_tflite = failure.cause
            gone = [s for s in planned_steps(before) if s not in planned_steps(recipe)]
            ledger.add([skip(gone[0] if gone else FILE_NAMES["tflite_fp32"], failure.cause, said=note)]
                       + [skip(step, "no plain .tflite (the converter's failure is the note above)")
                          for step in gone[1:]])
    if recipe.name == "auto" and "int8" in recipe.quantization.modes and not (raw.x["calib"] or raw.x["train"]):
        before = recipe
        modes = tuple(m for m in recipe.quantization.modes if m != "int8")
        recipe = replace(recipe, quantization=replace(recipe.quantization, modes=modes),
                         choose="tflite_dynamic" if recipe.choose == "tflite_int8" else recipe.choose)
        why = "DATA has no x_calib or x_train rows to calibrate on (x_val is never used for that)"
        gone = [s for s in planned_steps(before) if s not in planned_steps(recipe)]
        ledger.add([skip(gone[0] if gone else "int8", why, said=f"int8 skipped: {why}; dynamic-range needs none")]
                   + [skip(step, "DATA has no x_calib or x_train rows to calibrate on") for step in gone[1:]])
    need_calib = "int8" in recipe.quantization.modes or recipe.quantization.qat
    need_train = (recipe.pruning is not None and not plan.one_shot) or recipe.quantization.qat
    data = data_mod.validate_data(raw, loaded.inputs, loaded.outputs, need_train=need_train, need_calib=need_calib,
                                  calib_samples=recipe.quantization.calibration_samples)
    leaked = data_mod.shared_rows(data.x_calib, data.x_val)
    if leaked:
        ledger.note(f"{leaked} calibration rows also appear in x_val: int8 quality on those rows is not held-out")
    plan.recipe, plan.data = recipe, data
    return plan


def memory_budget(options: Options) -> Budget:
    """The run's memory budget: --memory where given (never more than the host or its cgroup allows), else
    what they allow."""
    from builder.measure.memory import cgroup_memory_limit, mem_total, usable_memory

    usable = usable_memory(mem_total(), cgroup_memory_limit())
    limit = min(v for v in (options.memory, usable) if v is not None) if (options.memory or usable) else None
    return Budget(limit)


def refuse_unless_fits(budget: Budget, kind: str, size: int | None, model: Path, what: str) -> None:
    """Stop at once, in one line with both figures, when the floor does not fit: better than the OOM killer
    ending the run midway with nothing said."""
    why = budget.refusal(kind, size)
    if why is not None:
        from builder.errors import InputError

        raise InputError(f"model {model}: not enough memory {what}: {why} (--memory, or a machine or container "
                         "with more memory)")


def model_bytes(path: Path) -> int:
    """The model's size on disk: the file, or every file of a SavedModel folder."""
    path = Path(path)
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return path.stat().st_size


def weights_bytes(loaded: Any, path: Path) -> int:
    """The model's weights in bytes (float32 parameters), or its size on disk where the count is unknown."""
    return int(loaded.params) * 4 if loaded.params else model_bytes(path)


def why_not_fine_tuned(loaded: Any) -> tuple[str | None, str | None]:
    """(why neither pruning nor QAT applies, why only QAT does not) for a loaded model: a Keras 3 model is
    pruned by tfsmith's own step, while QAT (tfmot's) takes only tf_keras; an output no loss applies to stops
    both."""
    outputs_why = untrainable_outputs(loaded.outputs)
    if getattr(loaded, "has_keras3", False):  # its own note says only why QAT does not apply
        return (outputs_why, None) if outputs_why else (None, loaded.trainable_why_not)
    return loaded.trainable_why_not or outputs_why, None


#: Output dtypes fine-tuning can take a loss on.
FLOAT_DTYPES = frozenset({"float16", "float32", "float64", "bfloat16"})


def untrainable_outputs(outputs: tuple[Any, ...]) -> str | None:
    """Why pruning and QAT cannot fine-tune this model, when an output is not a float (a string label, an
    argmax id, a flag): no loss applies to it; None otherwise."""
    found = lossless_outputs(outputs)
    return f"{found}, so only post-training quantization applies" if found else None


def lossless_outputs(outputs: tuple[Any, ...]) -> str | None:
    """"a model with output 'flag' (bool) that fine-tuning has no loss for", None when every output is a float."""
    found = [f"{t.name!r} ({t.dtype})" for t in outputs if t.dtype not in FLOAT_DTYPES]
    if not found:
        return None
    return f"a model with output{'s' if len(found) > 1 else ''} {', '.join(found)} that fine-tuning has no loss for"


def _probe_conversion(loaded: Any, budget: Budget) -> tuple[Any, bytes | Path | None, tuple[str, ...]]:
    """A float conversion before any training: (ConversionFailed, None, ()) when the TFLite builtins cannot
    express the model (a Keras 3 GRU's tensor lists, TextVectorization's string ops), (None, the .tflite, what
    the converter noted) when they can: its bytes, or for a model the budget converts in a process of its own,
    the file that process wrote. (None, None, ()) when that process could not finish (the memory budget): the
    float conversion is then an attempt of its own later, which says why."""
    import tempfile

    from builder.optimize import isolated, loads, quantize

    source = loaded.convert_from or loaded.saved_model_dir
    try:
        if budget.in_a_process("convert"):
            folder = tempfile.TemporaryDirectory(prefix="tfsmith-probe-")
            loaded._keep.append(folder)  # removed with the loaded model
            path = Path(folder.name) / "probe_fp32.tflite"
            try:
                notes = isolated.call(quantize.convert_to_file, source, "fp32", path, None, loaded.signature,
                                      limit=budget.limit)
            except (isolated.OverBudget, isolated.ChildFailed):
                return None, None, ()
            return None, path, tuple(notes)
        # the converter's key check and its debug info from the load the model was read with
        known = {loaded.saved_model_dir: loaded.loaded_saved_model} if loaded.loaded_saved_model is not None else {}
        said: list[str] = []
        with loads.shared(known):
            blob = quantize.convert_saved_model(source, "fp32", None, said, signature=loaded.signature)
        return None, blob, tuple(said)
    except quantize.ConversionFailed as error:
        return error, None, ()


def without_tflite(recipe: Recipe, cause: str, log: Path) -> tuple[Recipe, str]:
    """The recipe when no plain .tflite can be made: the SavedModel (TensorFlow serves it), a Select-TF-ops
    .tflite and OpenVINO's IR (float, and int8 where the recipe quantizes to int8: OpenVINO converts the
    SavedModel, not the .tflite) are what is left. QAT goes (its product is a .tflite); pruning stays, since the
    pruned SavedModel is what TensorFlow serves and OpenVINO converts. (recipe, one-line note)."""
    adapted = replace(recipe, quantization=replace(recipe.quantization, qat=False),
                      export=replace(recipe.export, tflite_fp32=False, tflite=False), choose="saved_model")
    return adapted, (f"no plain .tflite: the TFLite converter says: {cause} (full text: {log}); serving the "
                     "SavedModel on TensorFlow, and a .tflite with Select TF ops is tried for TensorFlow's interpreter")
