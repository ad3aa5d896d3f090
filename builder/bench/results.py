"""Plain data for one bench run: what each runtime measured, and the run as a whole.

Frozen dataclasses with `to_dict`/`from_dict` so bench.json round-trips and the recommendation logic can be
tested on recorded tables without running anything.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from builder.measure.stats import Summary

#: Who a runtime speaks for in the comparison.
ROLE_TFSMITH = "tfsmith"  # a serving runtime of builder.model.registry, as an image serves it
ROLE_BASELINE = "baseline"  # the SavedModel serving signature: what a user has without tfsmith
ROLE_PEER = "peer"  # what a user would pick instead (OpenVINO on the SavedModel, ONNX Runtime, eager Keras)


@dataclass(frozen=True)
class RuntimeResult:
    """One runtime's measurements (or the reason it could not run)."""

    name: str
    role: str
    artifact: str
    ok: bool
    reason: str = ""
    size_bytes: int | None = None
    gzip_bytes: int | None = None
    load_s: float | None = None
    rss_delta_mb: float | None = None
    latency: Summary | None = None  # batch 1, seconds
    batch_latency: Summary | None = None  # the larger batch, seconds per batch
    batch_size: int | None = None
    accuracy: float | None = None
    agreement: float | None = None  # top-1 agreement with the float reference on the eval inputs
    relative_error: float | None = None  # values (or classes agreement cannot judge): RMS(y - float) / std(float)
    ratio_vs_baseline: float | None = None  # p50 / SavedModel p50 (< 1 is faster)
    ratio_vs_fastest_peer: float | None = None  # p50 / fastest non-tfsmith p50
    recommended: bool = False

    @property
    def p50(self) -> float | None:
        return self.latency.p50 if self.latency else None

    @property
    def throughput(self) -> float | None:
        """Samples per second at the larger batch (batch size / median batch latency)."""
        if not self.batch_latency or not self.batch_size or self.batch_latency.p50 <= 0:
            return None
        return self.batch_size / self.batch_latency.p50

    def with_(self, **changes: Any) -> "RuntimeResult":
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["throughput"] = self.throughput
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RuntimeResult":
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        for key in ("latency", "batch_latency"):
            if fields.get(key) is not None:
                fields[key] = Summary(**fields[key])
        return cls(**fields)


@dataclass(frozen=True)
class Recommendation:
    """The fastest runtime a tfsmith image serves that keeps this model's quality on this host, and how it compares."""

    runtime: str | None
    artifact: str | None
    reason: str
    fastest_peer: str | None = None
    ratio_vs_fastest_peer: float | None = None
    speedup_vs_baseline: float | None = None
    within_noise_of_peer: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Recommendation":
        """Read a recorded recommendation; keys this version does not know (older bench.json) are skipped."""
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class BenchRun:
    """One `tfsmith bench` run: settings, host, every runtime, the recommendation."""

    model: str
    trained: bool
    threads: int
    batch_sizes: tuple[int, ...]
    results: tuple[RuntimeResult, ...]
    recommendation: Recommendation
    host: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    elapsed_s: float = 0.0
    rounds: int = 0
    #: the runtime serving what `tfsmith optimize` chose, when MODEL was an optimize --out folder
    shipped: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "trained": self.trained,
            "threads": self.threads,
            "batch_sizes": list(self.batch_sizes),
            "host": self.host,
            "notes": list(self.notes),
            "elapsed_s": self.elapsed_s,
            "rounds": self.rounds,
            "shipped": self.shipped,
            "recommendation": self.recommendation.to_dict(),
            "results": [r.to_dict() for r in self.results],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "BenchRun":
        return cls(
            model=data["model"],
            trained=data["trained"],
            threads=data["threads"],
            batch_sizes=tuple(data["batch_sizes"]),
            results=tuple(RuntimeResult.from_dict(r) for r in data["results"]),
            recommendation=Recommendation.from_dict(data["recommendation"]),
            host=data.get("host", {}),
            notes=tuple(data.get("notes", ())),
            elapsed_s=data.get("elapsed_s", 0.0),
            rounds=data.get("rounds", 0),
            shipped=data.get("shipped"),
        )
