"""Recipes: what `tfsmith optimize` does to a model, as frozen data, from a file or from the target's facts.

Pure: no TensorFlow here, so `--explain` and the unit tests are instant. A recipe file is TOML or YAML::

    choose = "tflite_int8"          # the artifact the quality gate judges and serving uses

    [pruning]                       # omit the table for no pruning
    sparsity = 0.8                  # final fraction of zero weights, 0 < s < 1
    schedule = "polynomial"         # or "constant"
    epochs = 4                      # fine-tuning epochs while pruning
    structured = "2:4"              # optional: M:N structured, M zeros in every N consecutive weights
                                    # (tfmot sparsity_m_by_n); sparsity is then M/N and `sparsity` unused

    [quantization]
    modes = ["dynamic", "int8"]     # post-training TFLite: dynamic, float16, int8 (float I/O, int8 inside)
    qat = false                     # quantization-aware training (pruning-preserving when pruning is on)
    qat_epochs = 1
    calibration_samples = 200

    [export]
    tflite_fp32 = true
    openvino = true                 # OpenVINO's IR beside the .tflite files: float, and NNCF int8 where int8 is built
    xla = false                     # add a jit_compile'd `serving_xla` signature to the SavedModel

    [tasks]                         # optional, per output name: how its quality is judged
    predictions = "classification"  # or "binary", "regression", "exact" (default: inferred, and the report says why)

Unknown keys and impossible values are refused with one line naming the key (cibuildwheel's rule: never
swallow a setting silently).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from builder.errors import InputError
from builder.report import TASKS

QUANT_MODES = ("dynamic", "float16", "int8")
FORMATS = ("saved_model", "tflite_fp32", "tflite_dynamic", "tflite_float16", "tflite_int8", "tflite_qat_int8",
           "openvino_ir_fp32", "openvino_ir_int8")
SCHEDULES = ("polynomial", "constant")

# CPU flags (Linux /proc/cpuinfo spelling) that make int8 dot products fast, per architecture.
INT8_X86 = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})
INT8_ARM = frozenset({"asimddp", "i8mm"})
HALF_CPU = frozenset({"avx512_bf16", "amx_bf16", "avx512_fp16", "asimdhp"})


@dataclass(frozen=True)
class Pruning:
    sparsity: float
    schedule: str = "polynomial"
    epochs: int = 4
    initial_sparsity: float = 0.0
    structured: tuple[int, int] | None = None  # (m, n): m zeros in every n consecutive weights (tfmot m_by_n)
    batch_size: int = 32

    @property
    def target_sparsity(self) -> float:
        """The fraction of zeros the pruned layers must reach (M:N structured: M/N)."""
        if self.structured:
            m, n = self.structured
            return m / n
        return self.sparsity


@dataclass(frozen=True)
class Quantization:
    modes: tuple[str, ...] = ("dynamic", "int8")
    qat: bool = False
    qat_epochs: int = 1
    calibration_samples: int = 200


@dataclass(frozen=True)
class Export:
    tflite_fp32: bool = True
    xla: bool = False
    #: OpenVINO's IR converted from the SavedModel (float; int8 by NNCF where the recipe quantizes to int8): on
    #: by default, since which of LiteRT and OpenVINO is faster depends on the model and the CPU
    openvino: bool = True
    #: plain .tflite files at all (float and quantized): off only where the model's plain .tflite cannot be made
    #: (`planning.without_tflite`), which leaves the quantization modes for OpenVINO's int8 IR
    tflite: bool = True


@dataclass(frozen=True)
class Recipe:
    name: str
    choose: str
    pruning: Pruning | None = None
    quantization: Quantization = field(default_factory=Quantization)
    export: Export = field(default_factory=Export)
    tasks: tuple[tuple[str, str], ...] = ()  # (output name, "classification" | "binary" | "regression" | "exact")
    #: the recipe named `choose` itself: the artifact is fixed, and only its runtime and precision are measured
    choose_named: bool = False

    @property
    def formats(self) -> tuple[str, ...]:
        """Every artifact format this recipe produces, in output order."""
        formats = ["saved_model"]
        if self.export.tflite_fp32 and self.export.tflite:
            formats.append("tflite_fp32")
        if self.export.tflite:
            formats += [f"tflite_{mode}" for mode in QUANT_MODES if mode in self.quantization.modes]
        if self.quantization.qat:
            formats.append("tflite_qat_int8")
        if self.export.openvino:
            formats.append("openvino_ir_fp32")
            if "int8" in self.quantization.modes:
                formats.append("openvino_ir_int8")
        return tuple(formats)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --- parsing -------------------------------------------------------------------------------------------

_TOP = {"name", "choose", "pruning", "quantization", "export", "tasks"}
_PRUNING = {"sparsity", "schedule", "epochs", "initial_sparsity", "structured", "batch_size"}
_QUANT = {"modes", "qat", "qat_epochs", "calibration_samples"}
_EXPORT = {"tflite_fp32", "xla", "openvino"}


def _check_keys(where: str, table: Mapping[str, Any], known: set[str]) -> None:
    unknown = sorted(set(table) - known)
    if unknown:
        raise InputError(f"{where}: unknown key '{unknown[0]}' (known: {', '.join(sorted(known))})")


def _table(where: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InputError(f"{where}: expected a table, got {type(value).__name__}")
    return value


def _number(where: str, value: Any, low: float, high: float, *, open_low: bool = False, open_high: bool = False,
            integer: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        raise InputError(f"{where}: expected {'an integer' if integer else 'a number'}, got {value!r}")
    if math.isnan(value) or value < low or value > high or (open_low and value == low) or (open_high and value == high):
        lo, hi = ("(" if open_low else "["), (")" if open_high else "]")
        raise InputError(f"{where}: {value!r} is outside {lo}{low}, {high}{hi}")
    return value


def _bool(where: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{where}: expected true or false, got {value!r}")
    return value


def _structured(where: str, value: Any) -> tuple[int, int]:
    text = str(value)
    parts = text.split(":")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise InputError(f"{where}: expected 'M:N' like '2:4', got {value!r}")
    m, n = (int(p) for p in parts)
    if not 0 < m < n:
        raise InputError(f"{where}: M:N (M zeros in every N) needs 0 < M < N, got {text!r}")
    return m, n


def recipe_from_mapping(data: Mapping[str, Any], source: str = "recipe") -> Recipe:
    """Validate a parsed recipe table into a Recipe; every problem is one InputError line naming the key."""
    _check_keys(source, _table(source, data), _TOP)
    pruning = None
    if "pruning" in data:
        table = _table(f"{source}: pruning", data["pruning"])
        _check_keys(f"{source}: pruning", table, _PRUNING)
        structured = _structured(f"{source}: pruning.structured", table["structured"]) if "structured" in table else None
        if "sparsity" not in table and structured is None:
            raise InputError(f"{source}: pruning.sparsity is required (a fraction like 0.8)")
        sparsity = float(_number(f"{source}: pruning.sparsity", table.get("sparsity", 0.5), 0.0, 1.0,
                                 open_low=True, open_high=True))
        initial = float(_number(f"{source}: pruning.initial_sparsity", table.get("initial_sparsity", 0.0),
                                0.0, 1.0, open_high=True))
        if initial >= sparsity and structured is None:
            raise InputError(f"{source}: pruning.initial_sparsity {initial} must be below sparsity {sparsity}")
        schedule = table.get("schedule", "polynomial")
        if schedule not in SCHEDULES:
            raise InputError(f"{source}: pruning.schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
        pruning = Pruning(
            sparsity=sparsity,
            schedule=schedule,
            epochs=int(_number(f"{source}: pruning.epochs", table.get("epochs", 4), 1, 1000, integer=True)),
            initial_sparsity=initial,
            structured=structured,
            batch_size=int(_number(f"{source}: pruning.batch_size", table.get("batch_size", 32), 1, 65536,
                                   integer=True)),
        )
    qtable = _table(f"{source}: quantization", data.get("quantization", {}))
    _check_keys(f"{source}: quantization", qtable, _QUANT)
    modes = qtable.get("modes", ["dynamic", "int8"])
    if isinstance(modes, str) or not isinstance(modes, (list, tuple)):
        raise InputError(f"{source}: quantization.modes must be a list like [\"int8\"], got {modes!r}")
    for mode in modes:
        if mode not in QUANT_MODES:
            raise InputError(f"{source}: quantization.modes: unknown mode {mode!r} (known: {', '.join(QUANT_MODES)})")
    quantization = Quantization(
        modes=tuple(m for m in QUANT_MODES if m in modes),
        qat=_bool(f"{source}: quantization.qat", qtable.get("qat", False)),
        qat_epochs=int(_number(f"{source}: quantization.qat_epochs", qtable.get("qat_epochs", 1), 1, 1000,
                               integer=True)),
        calibration_samples=int(_number(f"{source}: quantization.calibration_samples",
                                        qtable.get("calibration_samples", 200), 1, 100000, integer=True)),
    )
    etable = _table(f"{source}: export", data.get("export", {}))
    _check_keys(f"{source}: export", etable, _EXPORT)
    export = Export(
        tflite_fp32=_bool(f"{source}: export.tflite_fp32", etable.get("tflite_fp32", True)),
        xla=_bool(f"{source}: export.xla", etable.get("xla", False)),
        openvino=_bool(f"{source}: export.openvino", etable.get("openvino", True)),
    )
    ttable = _table(f"{source}: tasks", data.get("tasks", {}))
    for output, task in ttable.items():
        if task not in TASKS:
            raise InputError(f"{source}: tasks.{output} must be one of {', '.join(TASKS)}, got {task!r}")
    tasks = tuple(sorted((str(k), str(v)) for k, v in ttable.items()))
    name = data.get("name", Path(source).stem)
    if not isinstance(name, str) or not name:
        raise InputError(f"{source}: name must be a non-empty string")
    recipe = Recipe(name=name, choose="saved_model", pruning=pruning, quantization=quantization, export=export,
                    tasks=tasks)
    default_choice = next((k for k in ("tflite_qat_int8", "tflite_int8", "tflite_dynamic", "tflite_float16",
                                       "tflite_fp32") if k in recipe.formats), "saved_model")
    choose = data.get("choose", default_choice)
    if choose not in recipe.formats:
        raise InputError(f"{source}: choose = {choose!r} is not produced by this recipe "
                         f"(it produces: {', '.join(recipe.formats)})")
    return Recipe(name=name, choose=choose, pruning=pruning, quantization=quantization, export=export, tasks=tasks,
                  choose_named="choose" in data)


def load_recipe(path: Path) -> Recipe:
    """Read a TOML (.toml) or YAML (.yaml/.yml) recipe file."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"recipe {path}: no such file (give a .toml/.yaml recipe or 'auto')")
    text = path.read_text(encoding="utf-8", errors="replace")
    suffix = path.suffix.lower()
    try:
        if suffix == ".toml":
            import tomllib

            data = tomllib.loads(text)
        elif suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text) or {}
        else:
            raise InputError(f"recipe {path}: unknown format {suffix or '(none)'} (use .toml, .yaml or .yml)")
    except InputError:
        raise
    except Exception as error:  # tomllib.TOMLDecodeError, yaml.YAMLError: the parser's own words, one line
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise InputError(f"recipe {path}: not valid {suffix[1:].upper()}: {first}") from error
    return recipe_from_mapping(data, source=str(path))


# --- auto: from the target's facts --------------------------------------------------------------------


def _cc_value(capability: str) -> float:
    try:
        return float(capability)
    except ValueError:
        return 0.0


#: CUDA compute capability from which a GPU has tensor cores (Volta, 7.0)
TENSOR_CORES_FROM = 7.0


def tensor_core_gpus(gpu_capabilities: tuple[str, ...]) -> list[str]:
    """The capabilities with tensor cores: where the SavedModel on the GPU is chosen by rule (one rule)."""
    return [cc for cc in gpu_capabilities if _cc_value(cc) >= TENSOR_CORES_FROM]


def auto_recipe(features: frozenset[str], gpu_capabilities: tuple[str, ...] = (), arch: str = "x86_64",
                target_name: str = "host") -> tuple[Recipe, tuple[str, ...]]:
    """The hardware-aware recipe for a target, and one reason per choice.

    `features` are the target's CPU flags (/proc/cpuinfo spelling), `gpu_capabilities` its CUDA compute
    capabilities ("8.0", ...). Decisions follow measurements on LiteRT: int8 only pays where the CPU has int8
    dot-product instructions; float16 only where something computes in half precision; XLA is slower for
    CNNs on CPU; pruning shrinks the download, not the latency.
    """
    features = frozenset(f.lower() for f in features)
    reasons: list[str] = []
    int8_flags = sorted(features & (INT8_ARM if arch == "aarch64" else INT8_X86))
    tensor_cores = tensor_core_gpus(gpu_capabilities)
    half_cpu = sorted(features & HALF_CPU)

    modes = ["dynamic", "int8"]
    if int8_flags:
        choose = "tflite_int8"
        reasons.append(f"quantization: full int8 (float I/O) preferred: {target_name} has {', '.join(int8_flags)} "
                       "(int8 dot products), so int8 kernels run fast and the file is 4x smaller")
    else:
        choose = "tflite_dynamic"
        reasons.append(f"quantization: dynamic-range chosen: {target_name} lacks int8 dot-product instructions "
                       f"({', '.join(sorted(INT8_ARM if arch == 'aarch64' else INT8_X86))}); weights stay int8 "
                       "(4x smaller) without needing int8 activations; full int8 still emitted for comparison")
    if tensor_cores:
        modes.append("float16")
        choose = "saved_model"
        reasons.append(f"precision: GPU compute capability {', '.join(tensor_cores)} >= 7.0 has tensor cores: "
                       "float16 TFLite emitted for GPU delegates; the SavedModel (TensorFlow on the GPU) is chosen")
    elif half_cpu:
        modes.append("float16")
        reasons.append(f"precision: {', '.join(half_cpu)} present: float16 TFLite emitted (2x smaller) for "
                       "comparison; XNNPACK on x86 computes it in fp32, so it is not chosen")
    else:
        reasons.append("precision: no half-precision compute (no GPU cc >= 7.0, no avx512_bf16/amx_bf16/"
                       "avx512_fp16/asimdhp): float16 not emitted")
    if tensor_cores:
        xla = True
        reasons.append("xla: a jit_compile'd serving_xla signature is added for the GPU (fused kernels usually "
                       "pay there; not measured on this machine)")
    else:
        xla = False
        reasons.append("xla: off on CPU: XLA serving functions measured slower for CNNs on CPU "
                       "(MobileNetV2 16 ms -> 96 ms with XLA, measured on this stack)")
    pruning = Pruning(sparsity=0.5, schedule="polynomial", epochs=2)
    reasons.append("pruning: 50% polynomial over 2 fine-tuning epochs: the gzipped artifact shrinks at little "
                   "accuracy risk; sparsity does not speed up dense kernels; kept only when the pruned model passes "
                   "the quality gate against the original (tfmot for Keras 2 models, tfsmith's own masks for Keras 3); "
                   "without training labels, one-shot: the highest of 20-90% the gate keeps; skipped for Keras 2 "
                   "subclassed models and models with no Keras model inside (a plain SavedModel, a .tflite)")
    reasons.append("qat: off: post-training int8 stays within a point on typical CNNs; ask for it in a recipe "
                   "when the gate fails")
    reasons.append("export: serving-only SavedModel (signature serving_default) and a float32 .tflite as the "
                   "reference for the quantized ones")
    reasons.append("openvino: OpenVINO's IR converted from the SavedModel (float, and int8 by NNCF on the "
                   "calibration rows), judged and timed like every artifact: whether LiteRT or OpenVINO is "
                   "faster depends on the model and the CPU, so it is measured (where openvino is installed)")
    recipe = Recipe(
        name="auto",
        choose=choose,
        pruning=pruning,
        quantization=Quantization(modes=tuple(m for m in QUANT_MODES if m in modes)),
        export=Export(tflite_fp32=True, xla=xla),
    )
    return recipe, tuple(reasons)


# --- pruning schedule math ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Schedule:
    """When tfmot's PolynomialDecay updates masks: at begin, begin + f, ..., end (end - begin divisible by f)."""

    begin_step: int
    end_step: int
    frequency: int

    @property
    def updates(self) -> tuple[int, ...]:
        return tuple(range(self.begin_step, self.end_step + 1, self.frequency))


def pruning_schedule(steps_per_epoch: int, epochs: int, ramp_fraction: float = 0.7,
                     max_updates: int = 20) -> Schedule:
    """A schedule whose last mask update lands exactly on `end_step`, inside the training run.

    tfmot updates masks only on steps where `(step - begin) % frequency == 0` and `begin <= step <= end`, and
    training steps run 0 .. total-1. With the default frequency=100 and an end step that is no multiple, the
    last update happens before the end and sparsity stops short (0.786 for a 0.80 target with frequency=100). Here end
    is a multiple of the frequency away from begin, and the steps after it fine-tune at the final sparsity.
    """
    if steps_per_epoch < 1 or epochs < 1:
        raise InputError("pruning needs at least one training step (is x_train empty?)")
    total = steps_per_epoch * epochs
    last = total - 1  # the last step index UpdatePruningStep will set
    ramp = max(0, min(last, int(round(total * ramp_fraction))))
    if ramp == 0:
        return Schedule(begin_step=0, end_step=0, frequency=1)
    frequency = max(1, math.ceil(ramp / max_updates))
    end = (ramp // frequency) * frequency
    return Schedule(begin_step=0, end_step=end, frequency=frequency)
