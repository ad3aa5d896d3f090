"""The typed `tfsmith optimize` report (report.json, schema 2): one definition every reader imports.

Standard library only: the in-image server copies this module to read report.json, and the host-side
packaging, deploy and bench code read it through `Report.load` instead of indexing dicts by string keys.
The schema is documented in `builder.optimize`'s docstring; `Report.to_json()` writes it and `Report.load()`
reads it back (unknown keys are ignored so a newer writer does not break an older reader; a missing required
key is a `ReportError` naming it). Each artifact's file format (tflite_int8, saved_model, ...) is written as
`format`; reports written before tfsmith called it that name it `kind`, which is read when `format` is absent.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

SCHEMA = 2
REPORT_JSON = "report.json"
SAMPLES_NPZ = "samples.npz"
#: How an output's quality is judged: class scores or logits (classification), one yes/no column (binary), values
#: (regression), or answers that are not floats (exact: strings, booleans, integer ids, equal or not, never cast)
TASKS = ("classification", "binary", "regression", "exact")


class ReportError(ValueError):
    """report.json is missing, unreadable or not schema 2 (the message names the file and the key)."""


def _need(data: Mapping[str, Any], key: str, where: str) -> Any:
    if not isinstance(data, Mapping) or key not in data:
        raise ReportError(f"{where}: missing key {key!r}")
    return data[key]


def _shape(value: Any) -> tuple[int | None, ...]:
    return tuple(None if d is None or (isinstance(d, int) and d < 0) else int(d) for d in value)


# --- the model's serving contract ---------------------------------------------------------------------


@dataclass(frozen=True)
class TensorSpec:
    """One named input or output of the serving signature; `None` in `shape` is a dynamic dimension."""

    name: str
    dtype: str  # numpy spelling: float32, int32, int64, bool, ...
    shape: tuple[int | None, ...]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "tensor") -> "TensorSpec":
        return cls(str(_need(data, "name", where)), str(_need(data, "dtype", where)),
                   _shape(_need(data, "shape", where)))


@dataclass(frozen=True)
class OutputSpec(TensorSpec):
    """An output plus how its quality is judged: `task` is one of TASKS (classification, binary, regression, or
    exact for outputs that are not floats), `task_why` says why."""

    task: str = "regression"
    task_why: str = ""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "output") -> "OutputSpec":
        base = TensorSpec.from_dict(data, where)
        return cls(base.name, base.dtype, base.shape, str(data.get("task", "regression")),
                   str(data.get("task_why", "")))

    def tensor(self) -> TensorSpec:
        return TensorSpec(self.name, self.dtype, self.shape)


@dataclass(frozen=True)
class InputRange:
    """The values of an integer input that the ORIGINAL model accepts, measured at optimize time: `low` <= value
    < `high` (None: no bound on that side). Why: an id outside an embedding or lookup table is refused by the
    original (TensorFlow's InvalidArgumentError), while a converted file may clamp it or read past its table,
    so the server refuses such values itself, before any runtime sees them."""

    name: str
    low: int | None
    high: int | None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "range") -> "InputRange":
        def bound(key: str) -> int | None:
            value = data.get(key)
            return None if value is None else int(value)

        return cls(str(_need(data, "name", where)), bound("low"), bound("high"))


@dataclass(frozen=True)
class ModelContract:
    """What a client sends and gets back: the ORIGINAL model's serving signature, names as it names them, and
    the values of its integer inputs that it accepts (`input_ranges`: only where it refuses some)."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[OutputSpec, ...]
    signature: str = "serving_default"
    input_ranges: tuple[InputRange, ...] = ()

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.inputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.outputs)

    def output(self, name: str) -> OutputSpec:
        return next(o for o in self.outputs if o.name == name)

    def api(self) -> tuple[frozenset[TensorSpec], frozenset[TensorSpec]]:
        """The client-visible part (names, dtypes, shapes; order-free: signatures list names sorted)."""
        return frozenset(self.inputs), frozenset(o.tensor() for o in self.outputs)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "contract") -> "ModelContract":
        return cls(tuple(TensorSpec.from_dict(t, f"{where}.inputs") for t in _need(data, "inputs", where)),
                   tuple(OutputSpec.from_dict(t, f"{where}.outputs") for t in _need(data, "outputs", where)),
                   str(data.get("signature", "serving_default")),
                   tuple(InputRange.from_dict(r, f"{where}.input_ranges") for r in data.get("input_ranges") or ()))


# --- measurements -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OutputMetric:
    """The quality of one output of one artifact, judged against the ORIGINAL float model (before pruning).

    `metric` names the gated number (`accuracy_drop`, `disagreement`, `relative_error`), `value` is it,
    `limit` the most it may be; the other fields are reported whenever they mean something.
    """

    output: str
    task: str
    metric: str
    value: float
    limit: float
    passed: bool
    why: str
    accuracy: float | None = None  # labels given, classification
    original_accuracy: float | None = None
    agreement: float | None = None  # top-1 agreement with the original (classification)
    mae: float | None = None  # labels given, regression
    rmse: float | None = None
    original_mae: float | None = None
    relative_error: float | None = None  # RMS(y - y_orig) / std(y_orig) over the rows: error vs the spread
    max_abs_error: float | None = None  # max |y - y_orig|

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "OutputMetric":
        names = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class Latency:
    p50: float  # microseconds, batch 1
    p99: float
    runs: int
    #: the 95% confidence interval of the median (microseconds); 0/0 when not measured (older reports)
    ci_low: float = 0.0
    ci_high: float = 0.0

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Latency":
        return cls(float(data["p50"]), float(data["p99"]), int(data["runs"]), float(data.get("ci_low", 0.0)),
                   float(data.get("ci_high", 0.0)))


def _format(data: Mapping[str, Any], where: str) -> Any:
    """An artifact's format: `format`, else `kind` (its name in reports written by earlier tfsmith versions)."""
    if isinstance(data, Mapping) and "format" not in data and "kind" in data:
        return data["kind"]
    return _need(data, "format", where)


@dataclass(frozen=True)
class ArtifactResult:
    """One file tfsmith wrote (or the original/baseline), measured with the runtime that serves it."""

    path: str  # relative to --out ("baseline" for the unoptimized float model)
    #: the artifact format: saved_model | tflite_fp32 | tflite_original | tflite_dynamic | tflite_float16 |
    #: tflite_int8 | tflite_qat_int8 | tflite_select_tf (key "format"; "kind" in earlier tfsmith's reports, still read)
    format: str
    runtime: str
    size_bytes: int
    gzip_bytes: int
    threads: int
    latency_us: Latency
    throughput: dict[str, float]
    inputs: tuple[TensorSpec, ...]  # the file's own signature (must equal the contract's)
    outputs: tuple[TensorSpec, ...]
    metrics: tuple[OutputMetric, ...]
    contract_kept: bool
    accepted: bool
    reason: str
    variables_bytes: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def metric(self, output: str) -> OutputMetric:
        return next(m for m in self.metrics if m.output == output)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ArtifactResult":
        where = f"artifact {data.get('path', '?')}"
        return cls(
            path=str(_need(data, "path", where)), format=str(_format(data, where)),
            runtime=str(data.get("runtime", "")), size_bytes=int(_need(data, "size_bytes", where)),
            gzip_bytes=int(data.get("gzip_bytes", 0)), threads=int(data.get("threads", 1)),
            latency_us=Latency.from_dict(_need(data, "latency_us", where)),
            throughput=dict(data.get("throughput") or {}),
            inputs=tuple(TensorSpec.from_dict(t) for t in data.get("inputs", ())),
            outputs=tuple(TensorSpec.from_dict(t) for t in data.get("outputs", ())),
            metrics=tuple(OutputMetric.from_dict(m) for m in data.get("metrics", ())),
            contract_kept=bool(data.get("contract_kept", True)), accepted=bool(_need(data, "accepted", where)),
            reason=str(data.get("reason", "")), variables_bytes=int(data.get("variables_bytes", 0)),
            extra=dict(data.get("extra") or {}))


@dataclass(frozen=True)
class Candidate:
    """An artifact x the runtime (x signature) that would serve it, timed with bench's interleaved loop;
    `p50_us` is None when it was not timed, and a non-empty `error` (why) means it cannot be chosen."""

    artifact: str
    runtime: str  # a name in builder.model.registry
    p50_us: float | None
    samples: int
    size_bytes: int
    error: str = ""
    #: the signature called: a .tflite's own (the contract's), or for a SavedModel the contract's or serving_xla
    signature: str = "serving_default"
    #: the 95% confidence interval of `p50_us` (None when not timed or read from an older report)
    ci_low_us: float | None = None
    ci_high_us: float | None = None
    #: what it computes in (f32, bf16, int8, or what the file stores for a runtime that keeps it)
    precision: str = ""
    #: the extra cost of the first call at an input shape it had not seen, in microseconds (None: not measured,
    #: or every input dimension is fixed)
    new_shape_us: float | None = None
    #: seconds of the timing loop spent calling it, and why its timing stopped (`builder.measure.race`: "slower
    #: than X beyond noise after N calls", "settled", "budget"); None / "" when not timed or from older reports
    timed_s: float | None = None
    stopped: str = ""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Candidate":
        names = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class Selection:
    """How `chosen` was decided: measured on this host (`measured`), or by rule for another target."""

    measured: bool
    how: str
    candidates: tuple[Candidate, ...] = ()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Selection":
        return cls(bool(data.get("measured", False)), str(data.get("how", "")),
                   tuple(Candidate.from_dict(c) for c in data.get("candidates", ())))


@dataclass(frozen=True)
class Gate:
    """The quality gate: every artifact vs the ORIGINAL model, per output; the chosen one must pass."""

    max_accuracy_drop: float
    max_relative_error: float
    judged_against: str
    passed: bool
    chosen_reason: str

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Gate":
        return cls(float(data["max_accuracy_drop"]), float(data["max_relative_error"]),
                   str(data.get("judged_against", "original")), bool(data["passed"]), str(data.get("chosen_reason", "")))


@dataclass(frozen=True)
class ModelInfo:
    source: str
    format: str  # keras2 | keras3 | saved_model | tflite
    keras_version: str | None
    params: int | None
    contract: ModelContract

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ModelInfo":
        return cls(str(_need(data, "source", "model")), str(_need(data, "format", "model")),
                   data.get("keras_version"), data.get("params"),
                   ModelContract.from_dict(_need(data, "contract", "model"), "model.contract"))


@dataclass(frozen=True)
class DataInfo:
    source: str
    train_rows: int
    calibration_rows: int
    calibration_from: str  # x_calib | x_train | none
    held_out_rows: int
    labels: tuple[str, ...]  # outputs that have held-out labels

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "DataInfo":
        return cls(str(data["source"]), int(data["train_rows"]), int(data["calibration_rows"]),
                   str(data["calibration_from"]), int(data["held_out_rows"]), tuple(data.get("labels", ())))


@dataclass(frozen=True)
class Capacity:
    """What the chosen artifact x runtime answers per core, measured, and the ceiling that puts on this host.

    One core: the batch-1 p50 at one thread, so about 1e6 / p50 answers a second of model time; the host's
    usable cores (affinity and CPU quota) at most `cores` times that. A measurement and a ceiling, not a
    promise: a server spends time of its own on every request, and `tfsmith serve` sizes itself to the cores
    to come as close to the ceiling as that allows."""

    artifact: str
    runtime: str
    signature: str
    threads: int  # 1: one core's worth
    p50_us: float
    ci_low_us: float
    ci_high_us: float
    cores: int  # the cores this host lets the process use
    per_core_per_s: float
    host_ceiling_per_s: float

    def line(self) -> str:
        """The report's one line, worded as what was measured and what it bounds."""
        return (f"serving: {self.artifact} on {self.runtime} took {_duration(self.p50_us)} a call at batch 1 on "
                f"one thread (p50, 95% CI {_duration(self.ci_low_us)}-{_duration(self.ci_high_us)}): one core "
                f"answers about {self.per_core_per_s:,.0f} requests a second of model time; this host's "
                f"{self.cores} usable core{'s' if self.cores != 1 else ''} at most about "
                f"{self.host_ceiling_per_s:,.0f} a second, a ceiling `tfsmith serve` (sized to the cores) can "
                "approach but not pass: the server's own work per request comes on top")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Capacity":
        names = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in names})


def _duration(us: float) -> str:
    return f"{us:.3g} us" if us < 1000 else f"{us / 1e3:.3g} ms"


def capacity(artifact: str, runtime: str, signature: str, p50_us: float, ci_low_us: float, ci_high_us: float,
             cores: int) -> Capacity:
    """Pure: the capacity figures from one-thread batch-1 timing and the usable core count."""
    per_core = 1e6 / p50_us if p50_us > 0 else 0.0
    return Capacity(artifact, runtime, signature, 1, round(p50_us, 2), round(ci_low_us, 2), round(ci_high_us, 2),
                    cores, round(per_core, 1), round(per_core * cores, 1))


@dataclass(frozen=True)
class Attempt:
    """One step optimize tried (or chose not to try) beyond the model's own SavedModel, as its ledger recorded it
    (`builder.optimize.ledger`): pruning, a conversion, a quantizer, the IR, serving_xla. Every such step that
    drops out has one of these with its cause, so the report, the notes and `--explain` say the same thing.

    `outcome`: DONE, DROPPED (tried and failed: `cause` is the library's own first line, `log` the file in
    OUT/logs with its full text) or SKIPPED (not tried: `cause` says why). Memory is the process's resident
    set in MiB before and after the step and its peak during it (None where the host cannot say)."""

    step: str
    outcome: str
    line: str = ""
    cause: str = ""
    log: str | None = None
    seconds: float = 0.0
    rss_before_mib: float | None = None
    rss_after_mib: float | None = None
    peak_rss_mib: float | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Attempt":
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class MemoryUse:
    """What the run could use and used: `budget_bytes` (--memory, or what the host or its cgroup allows),
    `peak_bytes` (the process's highest resident set during the run) and `chosen_runner_bytes` (what opening
    the chosen artifact on its runtime added to the resident set: the model's own share of a serving process;
    None where it was not measured)."""

    budget_bytes: int | None
    peak_bytes: int | None
    chosen_runner_bytes: int | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "MemoryUse":
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class Report:
    """Everything `tfsmith optimize` decided and measured; `chosen` + `chosen_runtime` are what to serve."""

    tfsmith: str
    created: str
    model: ModelInfo
    data: DataInfo
    recipe: dict[str, Any]
    reasons: tuple[str, ...]
    notes: tuple[str, ...]
    target: dict[str, Any]
    host: dict[str, Any]
    baseline: ArtifactResult | None
    sparsity: dict[str, Any] | None
    artifacts: tuple[ArtifactResult, ...]
    chosen: str
    chosen_runtime: str
    samples: str
    gate: Gate
    selection: Selection
    schema: int = SCHEMA
    #: the signature the chosen artifact x runtime serves when a request names none (a SavedModel may be
    #: chosen for its XLA-compiled `serving_xla`, or have only a signature of another name, e.g. `predict`)
    chosen_signature: str = "serving_default"
    #: what one core and this host serve with the chosen artifact x runtime (None: not measured here)
    capacity: Capacity | None = None
    #: every optional step in the order it ran: what was tried, done, dropped (with its cause and log) or skipped
    attempts: tuple[Attempt, ...] = ()
    #: the memory budget, the run's peak and the chosen runner's own share (None in reports before they existed)
    memory: MemoryUse | None = None

    @property
    def contract(self) -> ModelContract:
        return self.model.contract

    def artifact(self, path: str) -> ArtifactResult:
        return next(a for a in self.artifacts if a.path == path)

    @property
    def chosen_artifact(self) -> ArtifactResult:
        return self.artifact(self.chosen)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def write(self, directory: Path) -> Path:
        path = Path(directory) / REPORT_JSON
        path.write_text(self.to_json(), encoding="utf-8")
        return path

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Report":
        schema = data.get("schema") if isinstance(data, Mapping) else None
        if schema != SCHEMA:
            raise ReportError(f"report schema {schema!r}: this tfsmith reads schema {SCHEMA}; run tfsmith optimize again")
        baseline = data.get("baseline")
        return cls(
            tfsmith=str(data.get("tfsmith", "")), created=str(data.get("created", "")),
            model=ModelInfo.from_dict(_need(data, "model", "report")),
            data=DataInfo.from_dict(_need(data, "data", "report")),
            recipe=dict(data.get("recipe") or {}), reasons=tuple(data.get("reasons", ())),
            notes=tuple(data.get("notes", ())), target=dict(data.get("target") or {}),
            host=dict(data.get("host") or {}),
            baseline=ArtifactResult.from_dict(baseline) if baseline else None,
            sparsity=data.get("sparsity"),
            artifacts=tuple(ArtifactResult.from_dict(a) for a in _need(data, "artifacts", "report")),
            chosen=str(_need(data, "chosen", "report")), chosen_runtime=str(data.get("chosen_runtime", "litert")),
            samples=str(data.get("samples", SAMPLES_NPZ)), gate=Gate.from_dict(_need(data, "gate", "report")),
            selection=Selection.from_dict(data.get("selection") or {}), schema=SCHEMA,
            chosen_signature=str(data.get("chosen_signature") or "serving_default"),
            capacity=Capacity.from_dict(data["capacity"]) if data.get("capacity") else None,
            attempts=tuple(Attempt.from_dict(a) for a in data.get("attempts") or ()),
            memory=MemoryUse.from_dict(data["memory"]) if data.get("memory") else None)

    @classmethod
    def load(cls, path: Path) -> "Report":
        """Read report.json (a file, or the --out folder holding it); ReportError with one line otherwise."""
        path = Path(path)
        if path.is_dir():
            path = path / REPORT_JSON
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as error:
            raise ReportError(f"{path}: unreadable report ({error})") from None
        try:
            return cls.from_dict(data)
        except ReportError as error:
            raise ReportError(f"{path}: {error}") from None
        except (KeyError, TypeError, ValueError) as error:
            raise ReportError(f"{path}: not a tfsmith optimize report ({type(error).__name__}: {error})") from None
