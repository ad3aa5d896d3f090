"""Every runtime tfsmith can serve a model with, defined once: what it reads, the precision it computes in,
the wheels an image needs for it, where it ranks in a tie, and whether its answers are approximate.

A runtime here is an inference engine at one precision: `openvino` (f32) and `openvino-bf16` are two
candidates, because which is faster depends on the CPU (OpenVINO's bf16 ran ResNet50 4.0x faster than its f32
on a Xeon with AMX, and MobileNetV2 1.5x slower on an AMD EPYC with AVX512-BF16 and no AMX): optimize times
both on the host and the measurement decides, never a CPU flag. Every other list of runtime names (the CLI's
choices, the server's, packaging's image kinds, the tie order, the smoke test's "approximate" set) is derived
from `RUNTIMES`; the refusal of an unknown name is `runtime()`'s, written once.

Standard library only: the serving images, the timing rules (`builder.measure.decide`) and the CLI import it
without numpy or any runtime.
"""

from __future__ import annotations

from dataclasses import dataclass

from builder.errors import InputError

#: Artifact formats (optimize's names for the files it writes: the `format` of each report.json artifact),
#: grouped by what reads them. Not to be confused with the image *kind* of `tfsmith package --kind`.
TFLITE_FLOAT_FORMATS = ("tflite_fp32", "tflite_original")
TFLITE_FORMATS = (*TFLITE_FLOAT_FORMATS, "tflite_dynamic", "tflite_float16", "tflite_int8", "tflite_qat_int8")
SAVED_MODEL_FORMAT = "saved_model"
SELECT_TF_FORMAT = "tflite_select_tf"

#: `precision` of a runtime that computes in whatever the file holds (LiteRT runs int8 files in int8).
AS_STORED = "as stored"
FLOAT_PRECISIONS = (AS_STORED, "f32", "bf16")


@dataclass(frozen=True)
class Runtime:
    """One serving runtime: an engine computing at one precision."""

    name: str
    #: the library that runs the model: litert | openvino | tensorflow
    engine: str
    #: what it computes in: `as stored` (the file's own arithmetic), f32, bf16 or int8
    precision: str
    #: artifact formats it serves (tflite_int8, saved_model, ...)
    reads: tuple[str, ...]
    #: tie order among candidates within noise of each other: lower is smaller to ship and exact before approximate
    rank: int
    #: answers may differ from the file's own float arithmetic: judged by agreement with the original, not bit for bit
    approximate: bool
    #: Python modules that must import for it to run here
    modules: tuple[str, ...]
    #: distributions a serving image installs for it (beside the server's own); TensorFlow comes with its base image
    distributions: tuple[str, ...]
    #: one line for help texts and reports
    summary: str

    def serves(self, format: str) -> bool:
        return format in self.reads

    @property
    def tflite(self) -> bool:
        """Runs .tflite files (as opposed to SavedModel folders)."""
        return any(f in TFLITE_FORMATS for f in self.reads)


RUNTIMES: tuple[Runtime, ...] = (
    Runtime("litert", "litert", AS_STORED, TFLITE_FORMATS, 0, False, ("ai_edge_litert",), ("ai-edge-litert",),
            "LiteRT with XNNPACK, computing in the file's own precision"),
    Runtime("openvino", "openvino", "f32", TFLITE_FORMATS, 1, False, ("openvino", "ai_edge_litert"),
            ("ai-edge-litert", "openvino"), "OpenVINO reading the .tflite, inference precision f32"),
    Runtime("openvino-bf16", "openvino", "bf16", TFLITE_FLOAT_FORMATS, 2, True, ("openvino", "ai_edge_litert"),
            ("ai-edge-litert", "openvino"),
            "OpenVINO reading the float .tflite, inference precision bf16 (where the CPU computes in bf16)"),
    Runtime("openvino-nncf", "openvino", "int8", ("tflite_fp32",), 3, True, ("openvino", "nncf", "ai_edge_litert"),
            ("ai-edge-litert", "openvino", "nncf"),
            "OpenVINO quantizing the float .tflite to int8 with NNCF at start, calibrated on the samples"),
    Runtime("tensorflow", "tensorflow", "f32", (SAVED_MODEL_FORMAT, SELECT_TF_FORMAT), 4, False, ("tensorflow",),
            ("ai-edge-litert",), "TensorFlow: SavedModel signatures, Select-TF-ops .tflite files"),
    Runtime("tensorflow-bf16", "tensorflow", "bf16", (SAVED_MODEL_FORMAT,), 5, True, ("tensorflow",),
            ("ai-edge-litert",),
            "TensorFlow with oneDNN's bf16 auto-mixed precision on the SavedModel (where the CPU computes in bf16)"),
)

NAMES: tuple[str, ...] = tuple(r.name for r in RUNTIMES)
#: `--runtime auto`: measured on the host where it will serve
AUTO = "auto"
CHOICES: tuple[str, ...] = (AUTO, *NAMES)
TFLITE_RUNTIMES: tuple[str, ...] = tuple(r.name for r in RUNTIMES if r.tflite)
APPROXIMATE: tuple[str, ...] = tuple(r.name for r in RUNTIMES if r.approximate)
_BY_NAME = {r.name: r for r in RUNTIMES}


def runtime(name: str, *, allow_auto: bool = False, what: str = "runtime") -> Runtime:
    """The named runtime; the one refusal of a name that is none (InputError naming every choice)."""
    found = _BY_NAME.get(name)
    if found is None:
        choices = CHOICES if allow_auto else NAMES
        raise InputError(f"unknown {what} {name!r}; choose one of: {', '.join(choices)}")
    return found


def check(name: str, *, allow_auto: bool = False, what: str = "runtime") -> str:
    """`name` when it is a runtime (or `auto`, where allowed); InputError otherwise."""
    if allow_auto and name == AUTO:
        return name
    return runtime(name, allow_auto=allow_auto, what=what).name


def rank(name: str) -> int:
    """Tie order (unknown names last)."""
    found = _BY_NAME.get(name)
    return found.rank if found is not None else len(RUNTIMES)


def serving(format: str) -> tuple[Runtime, ...]:
    """The runtimes that can serve an artifact format, in tie order."""
    return tuple(r for r in RUNTIMES if r.serves(format))


def distributions(name: str) -> tuple[str, ...]:
    return runtime(name).distributions


def engine_runtimes(engine: str) -> tuple[str, ...]:
    """The runtimes one engine provides (a TensorFlow image: tensorflow, tensorflow-bf16)."""
    return tuple(r.name for r in RUNTIMES if r.engine == engine)


def on_tensorflow(name: str) -> bool:
    """Runs on TensorFlow itself (a TensorFlow serving image; TensorFlow prepared before the server listens).
    False for a name that is no runtime of tfsmith's server (TF Serving's own image, say)."""
    found = _BY_NAME.get(name)
    return found is not None and found.engine == "tensorflow"


def calibrates(name: str) -> bool:
    """Quantizes at load from the folder's calibration samples (serves one model file, needs samples)."""
    found = _BY_NAME.get(name)
    return found is not None and found.engine == "openvino" and found.precision == "int8"


#: What serves a .tflite when nothing was measured or asked (it runs the file exactly as optimize evaluated it),
#: and what serves a SavedModel.
TFLITE_DEFAULT: str = TFLITE_RUNTIMES[0]
TENSORFLOW_DEFAULT: str = engine_runtimes("tensorflow")[0]
