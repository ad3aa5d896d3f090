"""What to serve: a .tflite file, or an `tfsmith optimize --out` folder (its chosen model, report, samples).

`tfsmith optimize --out`'s layout is the contract: `report.json` names the `chosen` artifact and the
`samples` file, whose arrays are `x/<input name>` (held-out inputs in the model's own dtypes),
`expected/<output name>` (the ORIGINAL model's answers to them) and, where the data had labels,
`y/<output name>`. A bare .tflite works too; then there is no report, and smoke tests fall back to generated
inputs checked against the local interpreter.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from builder.digest import sha256_file
from builder.errors import InputError


@dataclass(frozen=True)
class Artifact:
    """A model ready to serve, with whatever the optimizer recorded about it."""

    model_path: Path
    name: str
    report: dict[str, Any] | None = None
    samples_path: Path | None = None

    @property
    def sha256(self) -> str:
        return sha256_file(self.model_path)

    def summary(self) -> str:
        """One line for image labels: kind, size, accuracy and latency as the report measured them."""
        if not self.report:
            return f"{self.model_path.name} {self.model_path.stat().st_size} bytes (no report)"
        entry = next(
            (a for a in self.report.get("artifacts", []) if a.get("path") == self.model_path.name),
            {},
        )
        parts = [self.model_path.name, str(entry.get("kind", "tflite"))]
        if entry.get("size_bytes") is not None:
            parts.append(f"{entry['size_bytes']} B")
        if entry.get("accuracy") is not None:
            parts.append(f"acc {float(entry['accuracy']):.4f}")
        p50 = (entry.get("latency_us") or {}).get("p50")
        if p50 is not None:
            parts.append(f"p50 {float(p50):.0f}us")
        return " ".join(parts)


def model_name_for(path: Path) -> str:
    """A TF Serving-friendly model name from a path: letters, digits, `-` and `_`."""
    stem = path.name if path.is_dir() else path.stem
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", stem).strip("-_")
    return name or "model"


def check_model_name(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise InputError(f"model name {name!r}: use letters, digits, '.', '-' and '_' (it becomes a URL segment)")
    return name


def resolve_artifact(path: Path, name: str | None = None) -> Artifact:
    """The model to serve from a .tflite file or an optimize output folder; one clear error otherwise."""
    if not path.exists():
        raise InputError(f"{path}: no such file or folder")
    if path.is_file():
        if path.suffix != ".tflite":
            raise InputError(f"{path}: expected a .tflite model or a `tfsmith optimize --out` folder")
        report_path = path.parent / "report.json"
        report = _read_report(report_path) if report_path.exists() else None
        samples = _samples(path.parent, report)
        return Artifact(path, check_model_name(name or model_name_for(path)), report, samples)
    report_path = path / "report.json"
    report = _read_report(report_path) if report_path.exists() else None
    chosen = report.get("chosen") if report else None
    if chosen and not str(chosen).endswith(".tflite"):
        # optimize chose a SavedModel (e.g. for a GPU target); a LiteRT server takes the best .tflite instead.
        chosen = best_tflite(report or {})
        if chosen is None:
            raise InputError(
                f"{report_path}: the chosen artifact is a SavedModel and no accepted .tflite exists; "
                "package it with --runtime tfserving"
            )
    if chosen:
        model = path / str(chosen)
        if not model.is_file():
            raise InputError(f"{report_path}: chosen model {chosen!r} is missing")
    else:
        candidates = sorted(path.glob("*.tflite"))
        if len(candidates) != 1:
            listed = ", ".join(c.name for c in candidates) or "none"
            raise InputError(f"{path}: cannot tell which .tflite to serve (found: {listed}); pass the file itself")
        model = candidates[0]
    return Artifact(model, check_model_name(name or _name_from_report(report) or model_name_for(path)), report,
                    _samples(path, report))


def best_tflite(report: dict[str, Any]) -> str | None:
    """The accepted .tflite with the lowest measured p50 latency, if the report has one."""
    tflites = [
        entry
        for entry in report.get("artifacts", [])
        if str(entry.get("path", "")).endswith(".tflite") and entry.get("accepted", True)
    ]
    if not tflites:
        return None
    fastest = min(tflites, key=lambda e: float((e.get("latency_us") or {}).get("p50", float("inf"))))
    return str(fastest["path"])


def _name_from_report(report: dict[str, Any] | None) -> str | None:
    """The trained model's name (`digits_cnn` for `.../digits_cnn.keras`) rather than the output folder's."""
    source = str(((report or {}).get("model") or {}).get("source") or "")
    if not source:
        return None
    return model_name_for(Path(source.rstrip("/")).with_suffix("") if "." in Path(source).name else Path(source))


def _read_report(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise InputError(f"{path}: unreadable report ({error})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: report is not a JSON object")
    return data


def _samples(folder: Path, report: dict[str, Any] | None) -> Path | None:
    name = (report or {}).get("samples") or "samples.npz"
    candidate = folder / str(name)
    return candidate if candidate.is_file() else None


def calibration_samples(model_path: Path) -> Path | None:
    """The samples file beside a model (its folder's report names it; default samples.npz), if there is one."""
    report_path = model_path.parent / "report.json"
    report = _read_report(report_path) if report_path.is_file() else None
    return _samples(model_path.parent, report)


@dataclass(frozen=True)
class Samples:
    """A model's example rows: inputs by input name, the original model's outputs and labels by output name."""

    inputs: dict[str, np.ndarray] = field(default_factory=dict)
    expected: dict[str, np.ndarray] = field(default_factory=dict)
    labels: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return min((len(v) for v in self.inputs.values()), default=0)

    def head(self, count: int) -> Samples:
        """The first `count` rows of every array."""
        def cut(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            return {k: v[:count] for k, v in arrays.items()}

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
