"""`tfsmith bench --images A,B`: the same SavedModel bench inside two local images on this host, and the ratio.

The honest answer to "was the source build worth it here?": run `builder.bench.inner` (needs only python3,
numpy and tensorflow in the image; this package is mounted read-only) in image A, then B, then A, then B
again — alternating so that a slow-down of the shared host is not charged to one image — and compare the
medians. Containers run with no network and are never pulled. An image that cannot run the bench is reported
with its reason.

Containers go through the `Engine` like every other caller; what each run asks for is built by a pure
function (`bench_container`), so it is tested without an engine.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from builder.engine.base import EngineError, Mount
from builder.errors import InputError

if TYPE_CHECKING:
    from builder.engine.base import Engine

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # builder/
ROUNDS = 2


def parse_images(text: str) -> tuple[str, str]:
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2 or not all(parts):
        raise InputError(f"--images takes exactly two image names, A,B (got {text!r})")
    if parts[0] == parts[1]:
        raise InputError(f"--images names the same image twice ({parts[0]})")
    return parts[0], parts[1]


def find_saved_model(path: Path) -> Path:
    """The SavedModel folder inside MODEL (a SavedModel, or an optimize / bench output folder)."""
    pbs = sorted(path.rglob("saved_model.pb"), key=lambda p: len(p.parts)) if path.is_dir() else []
    if not pbs:
        raise InputError(f"--images needs a SavedModel folder (or a folder holding one), got {path}; "
                         "`tfsmith bench MODEL` leaves one in OUT/artifacts/saved_model")
    return pbs[0].parent


@dataclass(frozen=True)
class BenchContainer:
    """What one bench run asks the engine for: no network, read-only mounts, the inner bench as the command."""

    image: str
    name: str
    entrypoint: tuple[str, ...]
    command: tuple[str, ...]
    env: Mapping[str, str]
    mounts: tuple[Mount, ...]


def bench_container(image: str, saved_model: Path, *, threads: int, batch: int, budget_s: float,
                    name: str, package_dir: Path = PACKAGE_DIR) -> BenchContainer:
    """The container that times the SavedModel inside `image` (this package and the model mounted read-only)."""
    return BenchContainer(
        image=image,
        name=name,
        entrypoint=("python3",),
        command=("-m", "builder.bench.inner", "--saved-model", "/model", "--threads", str(threads),
                 "--batch", str(batch), "--budget-s", f"{budget_s:g}"),
        env={"PYTHONPATH": "/opt/tfsmith", "TF_CPP_MIN_LOG_LEVEL": "2"},
        mounts=(Mount(package_dir, "/opt/tfsmith/builder"), Mount(saved_model.resolve(), "/model")),
    )


def parse_inner_output(stdout: str) -> dict[str, Any]:
    """The JSON line the inner bench printed (the last line that parses as a JSON object)."""
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    raise ValueError("the inner bench printed no JSON result")


def failure_reason(returncode: int, stderr: str) -> str:
    """The line of a failed container's stderr that says why (the last non-empty one)."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    return f"exit {returncode}: {lines[-1][:200] if lines else 'no output'}"


@dataclass
class ImageRuns:
    image: str
    runs: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""

    @property
    def p50(self) -> float | None:
        """Median over the runs' batch-1 medians."""
        values = sorted(run["latency"]["p50"] for run in self.runs)
        if not values:
            return None
        mid = len(values) // 2
        return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


    @property
    def spread(self) -> float:
        """Relative spread between this image's run medians ((max-min)/min): the noise floor of a ratio."""
        values = [run["latency"]["p50"] for run in self.runs]
        return (max(values) - min(values)) / min(values) if len(values) > 1 and min(values) > 0 else 0.0


@dataclass
class ImageComparison:
    first: ImageRuns
    second: ImageRuns
    threads: int
    batch: int

    @property
    def ratio(self) -> float | None:
        """p50 in B / p50 in A (< 1: B is faster)."""
        a, b = self.first.p50, self.second.p50
        return b / a if a and b else None

    def summary(self) -> str:
        lines = []
        for item in (self.first, self.second):
            if item.error:
                lines.append(f"{item.image}: could not run the bench ({item.error})")
            else:
                tf_version = item.runs[0].get("tensorflow", "?") if item.runs else "?"
                lines.append(f"{item.image}: SavedModel p50 {item.p50 * 1e3:.3f} ms at batch 1 "  # type: ignore[operator]
                             f"(TF {tf_version}, {len(item.runs)} alternating runs, {self.threads} threads)")
        if self.ratio is not None:
            faster = self.second.image if self.ratio < 1 else self.first.image
            gap = max(self.ratio, 1 / self.ratio) - 1
            noise = max(self.first.spread, self.second.spread)
            verdict = ("within the run-to-run spread of one image, so not a real difference"
                       if gap <= noise else "larger than the run-to-run spread of either image")
            lines.append(f"ratio B/A = {self.ratio:.3f}: {faster} is {gap + 1:.2f}x faster here; {verdict} "
                         f"({noise:.0%} between runs of the same image)")
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps({"first": asdict(self.first), "second": asdict(self.second), "threads": self.threads,
                           "batch": self.batch, "ratio_b_over_a": self.ratio}, indent=2) + "\n"


def compare_images(model: Path, first: str, second: str, *, threads: int, batch: int, budget_s: float,
                   rounds: int = ROUNDS, engine: Engine | None = None) -> ImageComparison:
    """Run the inner bench alternately in both images; an image that fails is recorded, not retried."""
    if engine is None:
        from builder.engine import default_engine

        engine = default_engine()
    saved_model = find_saved_model(model)
    per_run = max(budget_s / (2 * rounds), 1.0)
    results = {first: ImageRuns(first), second: ImageRuns(second)}
    for _ in range(rounds):
        for image in (first, second):
            item = results[image]
            if item.error:
                continue
            spec = bench_container(image, saved_model, threads=threads, batch=batch, budget_s=per_run,
                                   name=f"tfsmith-bench-{uuid.uuid4().hex[:10]}")
            try:
                with engine.start(spec.image, spec.command, entrypoint=spec.entrypoint, env=spec.env,
                                  mounts=spec.mounts, name=spec.name, network=False) as container:
                    code = container.wait(per_run + 300)
                    stdout, stderr = container.logs(stderr=False), container.logs(stdout=False)
            except EngineError as error:  # no such image, cannot start, ran past its time
                item.error = str(error)
                continue
            if code != 0:
                item.error = failure_reason(code, stderr or stdout)
                continue
            try:
                item.runs.append(parse_inner_output(stdout))
            except ValueError as error:
                item.error = str(error)
    return ImageComparison(results[first], results[second], threads, batch)
