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
#: OpenVINO's own format (IR: `.xml` graph + `.bin` weights), converted from the SavedModel by OpenVINO's converter;
#: the int8 one quantized by NNCF at optimize time on the calibration rows.
IR_FLOAT_FORMATS = ("openvino_ir_fp32",)
IR_FORMATS = (*IR_FLOAT_FORMATS, "openvino_ir_int8")
#: The file an IR format is read from (its weights lie beside it, same stem, `.bin`).
IR_SUFFIX, IR_WEIGHTS_SUFFIX = ".xml", ".bin"

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
    #: Python modules that must import for it to run here (on any file it reads; `needs` adds a format's own)
    modules: tuple[str, ...]
    #: distributions a serving image installs for it (beside the server's own); TensorFlow comes with its base image
    distributions: tuple[str, ...]
    #: one line for help texts and reports
    summary: str

    def serves(self, format: str) -> bool:
        return format in self.reads

    @property
    def ir(self) -> bool:
        """Runs OpenVINO IR files."""
        return any(f in IR_FORMATS for f in self.reads)

    @property
    def tflite(self) -> bool:
        """Runs .tflite files (as opposed to SavedModel folders)."""
        return any(f in TFLITE_FORMATS for f in self.reads)


RUNTIMES: tuple[Runtime, ...] = (
    Runtime("litert", "litert", AS_STORED, TFLITE_FORMATS, 0, False, ("ai_edge_litert",), ("ai-edge-litert",),
            "LiteRT with XNNPACK, computing in the file's own precision"),
    Runtime("openvino", "openvino", "f32", (*TFLITE_FORMATS, *IR_FORMATS), 1, False, ("openvino",), ("openvino",),
            "OpenVINO reading the .tflite or its own IR, inference precision f32 (int8 where the file is int8)"),
    Runtime("openvino-bf16", "openvino", "bf16", (*TFLITE_FLOAT_FORMATS, *IR_FLOAT_FORMATS), 2, True, ("openvino",),
            ("openvino",),
            "OpenVINO reading the float .tflite or IR, inference precision bf16 (where the CPU computes in bf16)"),
    Runtime("tensorflow", "tensorflow", "f32", (SAVED_MODEL_FORMAT, SELECT_TF_FORMAT), 4, False, ("tensorflow",),
            ("ai-edge-litert",), "TensorFlow: SavedModel signatures, Select-TF-ops .tflite files"),
    Runtime("tensorflow-bf16", "tensorflow", "bf16", (SAVED_MODEL_FORMAT,), 5, True, ("tensorflow",),
            ("ai-edge-litert",),
            "TensorFlow with oneDNN's bf16 auto-mixed precision on the SavedModel (where the CPU computes in bf16)"),
)

#: Runtimes earlier tfsmith versions had, and what serves their models now (refused in one line that says so).
RETIRED: dict[str, str] = {
    "openvino-nncf": ("it quantized the float .tflite to int8 when the server started, so the int8 model it served "
                      "was never the one the quality gate judged; tfsmith optimize now writes that int8 model itself "
                      "(openvino_int8.xml, NNCF on the calibration rows, judged like every artifact), and --runtime "
                      "openvino serves it: run tfsmith optimize again"),
}
#: What reading a format takes beyond the engine: OpenVINO takes a .tflite's signature (input and output names,
#: their order) from LiteRT; its own IR carries them.
_TFLITE_READER = (("ai_edge_litert",), ("ai-edge-litert",))

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
        if name in RETIRED:
            raise InputError(f"{what} {name!r} is gone: {RETIRED[name]} (choose one of: {', '.join(choices)})")
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


def is_ir(format: str | None) -> bool:
    """An OpenVINO IR format (openvino_ir_fp32, openvino_ir_int8)."""
    return format in IR_FORMATS


def needs(name: str, format: str | None = None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(modules that must import here, distributions an image installs) for runtime `name` reading `format`
    (None: a .tflite, what every non-TensorFlow runtime read before OpenVINO's IR). LiteRT comes along only where
    the file is a .tflite: an OpenVINO image serving its own IR carries no LiteRT."""
    entry = runtime(name)
    modules, dists = entry.modules, entry.distributions
    if entry.engine == "openvino" and not is_ir(format) and format != SAVED_MODEL_FORMAT:
        modules = (*modules, *(m for m in _TFLITE_READER[0] if m not in modules))
        dists = (*(d for d in _TFLITE_READER[1] if d not in dists), *dists)
    return modules, dists


def distributions(name: str, format: str | None = None) -> tuple[str, ...]:
    return needs(name, format)[1]


def format_of_file(path_name: str) -> str | None:
    """The format family a file name says (no report at hand): the float IR for `.xml`, the float .tflite
    for `.tflite` (what a bare file is taken for), None otherwise (a SavedModel is a folder)."""
    if path_name.endswith(IR_SUFFIX):
        return IR_FLOAT_FORMATS[0]
    if path_name.endswith(".tflite"):
        return TFLITE_FLOAT_FORMATS[0]
    return None


def engine_runtimes(engine: str) -> tuple[str, ...]:
    """The runtimes one engine provides (a TensorFlow image: tensorflow, tensorflow-bf16)."""
    return tuple(r.name for r in RUNTIMES if r.engine == engine)


def on_tensorflow(name: str) -> bool:
    """Runs on TensorFlow itself (a TensorFlow serving image; TensorFlow prepared before the server listens).
    False for a name that is no runtime of tfsmith's server (TF Serving's own image, say)."""
    found = _BY_NAME.get(name)
    return found is not None and found.engine == "tensorflow"


#: What serves a .tflite when nothing was measured or asked (it runs the file exactly as optimize evaluated it),
#: what serves OpenVINO's IR (f32, or int8 where the file is), and what serves a SavedModel.
TFLITE_DEFAULT: str = TFLITE_RUNTIMES[0]
IR_RUNTIMES: tuple[str, ...] = tuple(r.name for r in RUNTIMES if r.ir)
IR_DEFAULT: str = IR_RUNTIMES[0]
TENSORFLOW_DEFAULT: str = engine_runtimes("tensorflow")[0]
