"""What to serve: a .tflite file, a SavedModel folder, or a `tfsmith optimize --out` folder (its chosen model,
report, samples).

`tfsmith optimize --out`'s layout is the contract: `report.json` names the `chosen` artifact and the
`samples` file, whose arrays are `x/<input name>` (held-out inputs in the model's own dtypes),
`expected/<output name>` (the ORIGINAL model's answers to them) and, where the data had labels,
`y/<output name>`. A bare .tflite works too; then there is no report, and smoke tests fall back to generated
inputs checked against the local interpreter. A SavedModel (a folder with saved_model.pb) runs only on
TensorFlow, and so does a .tflite that optimize measured on TensorFlow (one that needs Select TF ops): the
`Artifact` says so (`runtime`), and which signature the report chose (`signature`). OpenVINO's IR
(`openvino_fp32.xml`, `openvino_int8.xml`, each with its `.bin` weights beside it) runs on OpenVINO only, without
TensorFlow or LiteRT; an artifact that is an IR is its two files (digest and size cover both).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from builder.digest import sha256_file
from builder.errors import InputError
from builder.model import registry
from builder.model.registry import TFLITE_RUNTIMES, engine_runtimes
from builder.report import REPORT_JSON, SAMPLES_NPZ, ArtifactResult, Report, ReportError


SAVED_MODEL_PB = "saved_model.pb"
TENSORFLOW = "tensorflow"
TENSORFLOW_RUNTIMES = engine_runtimes(TENSORFLOW)


def is_saved_model(path: Path) -> bool:
    """A folder TensorFlow loads as a SavedModel: it holds saved_model.pb."""
    return path.is_dir() and (path / SAVED_MODEL_PB).is_file()


def is_ir(path: Path) -> bool:
    """OpenVINO's IR: the `.xml` graph, whose `.bin` weights lie beside it."""
    return path.suffix == registry.IR_SUFFIX


def folder_models(folder: Path) -> list[Path]:
    """The model files a folder holds when no report says which to serve: its .tflite files, else its IR graphs
    whose weights lie beside them (an `.xml` alone is no model)."""
    return sorted(folder.glob("*.tflite")) or sorted(
        p for p in folder.glob(f"*{registry.IR_SUFFIX}")
        if p.is_file() and p.with_suffix(registry.IR_WEIGHTS_SUFFIX).is_file())


def artifact_files(path: Path) -> list[Path]:
    """The files one artifact is: a folder's files (a SavedModel), an IR's `.xml` and `.bin`, or the file."""
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file())
    weights = path.with_suffix(registry.IR_WEIGHTS_SUFFIX)
    return [path, weights] if is_ir(path) and weights.is_file() else [path]


@dataclass(frozen=True)
class Artifact:
    """A model ready to serve, with whatever the optimizer recorded about it."""

    model_path: Path
    name: str
    report: Report | None = None
    samples_path: Path | None = None

    @property
    def saved_model(self) -> bool:
        """A SavedModel folder (packaging copies a folder, not a file, and needs a TensorFlow image)."""
        return is_saved_model(self.model_path)

    @property
    def ir(self) -> bool:
        """OpenVINO's IR (packaging copies its `.bin` too, into an OpenVINO image)."""
        return is_ir(self.model_path)

    @property
    def format(self) -> str | None:
        """The artifact format (tflite_int8, openvino_ir_fp32, saved_model, ...): the report's, else what the
        file says (a bare .tflite is taken for a float one, a bare .xml for a float IR)."""
        entry = self._entry()
        if entry is not None:
            return entry.format
        if self.saved_model:
            return registry.SAVED_MODEL_FORMAT
        return registry.format_of_file(self.model_path.name)

    @property
    def runtime(self) -> str | None:
        """The runtime this model needs: tensorflow for a SavedModel or for a .tflite optimize measured on
        TensorFlow (it needs Select TF ops); an OpenVINO runtime for an IR (the one optimize measured fastest,
        else f32); None when any .tflite runtime can serve it."""
        chosen = self.chosen_runtime
        if chosen in TENSORFLOW_RUNTIMES:  # what optimize measured this file on (tensorflow-bf16, say)
            return chosen
        if self.ir:
            return chosen if chosen in registry.IR_RUNTIMES else registry.IR_DEFAULT
        if self.saved_model:
            return TENSORFLOW
        entry = self._entry()
        return TENSORFLOW if entry is not None and entry.runtime not in TFLITE_RUNTIMES else None

    @property
    def signature(self) -> str | None:
        """The signature the report chose for this model (`chosen_signature`), None when it did not choose it."""
        if self.report is None or self.report.chosen != self.model_path.name:
            return None
        return self.report.chosen_signature or None

    def _entry(self) -> ArtifactResult | None:
        if self.report is None:
            return None
        return next((a for a in self.report.artifacts if a.path == self.model_path.name), None)

    @property
    def sha256(self) -> str:
        """The model file's digest; for a SavedModel, of its saved_model.pb (the graph and signatures); for an
        IR, over its graph and weights (each file's digest, in order)."""
        if self.ir:
            import hashlib

            return hashlib.sha256("".join(sha256_file(p) for p in artifact_files(self.model_path)).encode()).hexdigest()
        return sha256_file(self.model_path / SAVED_MODEL_PB if self.saved_model else self.model_path)

    @property
    def chosen_runtime(self) -> str | None:
        """The runtime optimize measured fastest for this file (None when it did not choose this file)."""
        if self.report is None or self.report.chosen != self.model_path.name:
            return None
        return self.report.chosen_runtime

    def summary(self) -> str:
        """One line for image labels: artifact format, size, quality and latency as the report measured them."""
        size = _size(self.model_path)
        if self.report is None:
            return f"{self.model_path.name} {size} bytes (no report)"
        entry = self._entry()
        if entry is None:
            return f"{self.model_path.name} {size} bytes"
        parts = [self.model_path.name, entry.format, f"{entry.size_bytes} B"]
        parts += [f"{m.output} {m.metric} {m.value:.4g}" for m in entry.metrics]
        parts.append(f"p50 {entry.latency_us.p50:.0f}us")
        return " ".join(parts)


def _size(path: Path) -> int:
    """Bytes of an artifact: a file, an IR's two files, or every file under a folder (a SavedModel)."""
    return sum(f.stat().st_size for f in artifact_files(path))


def model_name_for(path: Path) -> str:
    """A TF Serving-friendly model name from a path: letters, digits, `-` and `_` (for a version folder of
    TF Serving's layout, `<name>/<version>/`, the name above it)."""
    if path.is_dir() and path.name.isdigit() and path.parent.name:
        path = path.parent
    stem = path.name if path.is_dir() else path.stem
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", stem).strip("-_")
    return name or "model"


def check_model_name(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise InputError(f"model name {name!r}: use letters, digits, '.', '-' and '_' (it becomes a URL segment)")
    return name


def resolve_artifact(path: Path, name: str | None = None, runtime: str | None = None) -> Artifact:
    """The model to serve from a .tflite file, a SavedModel folder or an optimize output folder; one clear
    error otherwise. An optimize folder whose report chose its SavedModel serves that SavedModel, unless
    `runtime` names a .tflite runtime: then the report's fastest accepted .tflite, as before."""
    if not path.exists():
        raise InputError(f"{path}: no such file or folder")
    if path.is_file():
        if path.suffix not in (".tflite", registry.IR_SUFFIX):
            raise InputError(f"{path}: expected a .tflite model, an OpenVINO IR (.xml), a SavedModel folder or a "
                             "`tfsmith optimize --out` folder")
        report = _read_report(path.parent / REPORT_JSON)
        return Artifact(path, check_model_name(name or model_name_for(path)), report, _samples(path.parent, report))
    if is_saved_model(path):  # a SavedModel itself (inside an optimize folder: that folder's report and samples)
        report = _read_report(path.parent / REPORT_JSON)
        if report is not None and report.chosen != path.name and not any(a.path == path.name for a in report.artifacts):
            report = None
        return Artifact(path, check_model_name(name or (_name_from_report(report) if report else None)
                                               or model_name_for(path)), report,
                        _samples(path.parent, report) if report else None)
    report = _read_report(path / REPORT_JSON)
    chosen = report.chosen if report else None
    if chosen and is_ir(Path(chosen)):
        if runtime is None or runtime == registry.AUTO or registry.runtime(runtime).ir:
            model = path / chosen
            if not model.is_file():
                raise InputError(f"{path / REPORT_JSON}: chosen model {chosen!r} is missing")
            return Artifact(model, check_model_name(name or _name_from_report(report) or model_name_for(path)),
                            report, _samples(path, report))
        saved = next((a.path for a in report.artifacts if a.format == registry.SAVED_MODEL_FORMAT), None)
        if registry.on_tensorflow(runtime) and saved is not None and is_saved_model(path / saved):
            return Artifact(path / saved, check_model_name(name or _name_from_report(report) or model_name_for(path)),
                            report, _samples(path, report))
        chosen = best_tflite(report)  # a runtime that reads no IR: the fastest accepted .tflite
        if chosen is None:
            raise InputError(f"{path / REPORT_JSON}: the chosen artifact is an OpenVINO IR and no accepted .tflite "
                             f"exists for runtime {runtime}; serve it with --runtime "
                             f"{' or '.join(registry.IR_RUNTIMES)}")
    if chosen and not chosen.endswith(".tflite") and runtime not in TFLITE_RUNTIMES and is_saved_model(path / chosen):
        return Artifact(path / chosen, check_model_name(name or _name_from_report(report) or model_name_for(path)),
                        report, _samples(path, report))
    if chosen and not chosen.endswith(".tflite") and not is_ir(Path(chosen)):
        # optimize chose a SavedModel (e.g. for a GPU target); a LiteRT server takes the best .tflite instead.
        chosen = best_tflite(report) if report else None
        if chosen is None:
            raise InputError(
                f"{path / REPORT_JSON}: the chosen artifact is a SavedModel and no accepted .tflite exists; "
                "package it with --runtime tfserving"
            )
    if chosen:
        model = path / chosen
        if not model.is_file():
            raise InputError(f"{path / REPORT_JSON}: chosen model {chosen!r} is missing")
    else:  # no report: the folder's one .tflite, else its one IR (a version folder holding a bare model)
        candidates = folder_models(path)
        if len(candidates) != 1:
            listed = ", ".join(c.name for c in candidates) or "none"
            raise InputError(f"{path}: cannot tell which model to serve (found: {listed}); pass the file itself, "
                             "or a folder holding one .tflite, one OpenVINO IR (.xml and .bin) or a SavedModel "
                             "(saved_model.pb)")
        model = candidates[0]
    return Artifact(model, check_model_name(name or _name_from_report(report) or model_name_for(path)), report,
                    _samples(path, report))


def best_tflite(report: Report) -> str | None:
    """The accepted .tflite with the lowest measured p50 latency, if the report has one."""
    tflites = [a for a in report.artifacts if a.path.endswith(".tflite") and a.accepted]
    if not tflites:
        return None
    return min(tflites, key=lambda a: a.latency_us.p50).path


def _name_from_report(report: Report | None) -> str | None:
    """The trained model's name (`digits_cnn` for `.../digits_cnn.keras`) rather than the output folder's."""
    source = report.model.source if report else ""
    if not source:
        return None
    return model_name_for(Path(source.rstrip("/")).with_suffix("") if "." in Path(source).name else Path(source))


def _read_report(path: Path) -> Report | None:
    """The typed report beside a model, None when there is none; InputError when it cannot be read."""
    if not path.is_file():
        return None
    try:
        return Report.load(path)
    except ReportError as error:
        raise InputError(str(error)) from None


def _samples(folder: Path, report: Report | None) -> Path | None:
    candidate = folder / (report.samples if report else SAMPLES_NPZ)
    return candidate if candidate.is_file() else None


def calibration_samples(model_path: Path) -> Path | None:
    """The samples file beside a model (its folder's report names it; default samples.npz), if there is one."""
    return _samples(model_path.parent, _read_report(model_path.parent / REPORT_JSON))


@dataclass(frozen=True)
class Samples:
    """A model's example rows: inputs by input name, the original model's outputs and labels by output name."""

    inputs: dict[str, np.ndarray] = field(default_factory=dict)
    expected: dict[str, np.ndarray] = field(default_factory=dict)
    labels: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return min((len(v) for v in self.inputs.values() if np.ndim(v)), default=1 if self.inputs else 0)

    def head(self, count: int) -> Samples:
        """The first `count` rows of every array (a scalar input, one value for every row, as it is)."""
        def cut(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            return {k: v[:count] if np.ndim(v) else v for k, v in arrays.items()}

        return Samples(cut(self.inputs), cut(self.expected), cut(self.labels))


def load_samples(path: Path) -> Samples:
    """Read a samples file (`x/<input>`, `expected/<output>`, `y/<output>`); InputError when unreadable."""
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {key: np.asarray(data[key]) for key in data.files}
    except (OSError, ValueError, EOFError) as error:
        raise InputError(f"{path}: unreadable samples file ({type(error).__name__})") from None
    parts: dict[str, dict[str, np.ndarray]] = {"x": {}, "expected": {}, "y": {}}
    for key, value in arrays.items():
        kind, _, name = key.partition("/")
        if kind in parts and name:
            parts[kind][name] = value
    return Samples(parts["x"], parts["expected"], parts["y"])
