"""tfsmith's own speed goals, judged on `tfsmith bench` runs (a benchmark behind `make bench`, never a test):

1. the recommended row (what a tfsmith image serves: a .tflite on LiteRT or OpenVINO, OpenVINO's own IR, the
   SavedModel on TensorFlow) is no slower than the fastest peer a user would pick instead (OpenVINO reading the
   SavedModel, ONNX Runtime, eager Keras), or within noise of it;
2. on the trained example model, it is at least 20x faster than the SavedModel serving signature (random-weight
   models are latency-only: the ratio is shown without a verdict).

    python -m tests.benchmarks.bench_goals BENCH_OUT_OR_bench.json [...]

Reads bench.json files written by `tfsmith bench --out DIR`, prints one line per goal, exits 1 when one is
missed. `tfsmith bench` itself reports only what it measured about the user's model and host.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from builder.bench.results import BenchRun

#: the example model's target speed-up of the recommended .tflite runtime over the SavedModel signature
MIN_SPEEDUP_VS_SAVEDMODEL = 20.0


@dataclass(frozen=True)
class Verdict:
    goal: str
    met: bool | None  # None: not judged for this run (says why in `detail`)
    detail: str


def judge(run: BenchRun) -> list[Verdict]:
    """Pure: the two goals on one bench run."""
    rec = run.recommendation
    if rec.runtime is None:
        return [Verdict("recommendation", False, f"no recommendation: {rec.reason}")]
    if rec.ratio_vs_fastest_peer is None:
        peer = Verdict("no slower than the fastest peer", None, "no peer measured")
    else:
        met = rec.ratio_vs_fastest_peer <= 1.0 or rec.within_noise_of_peer
        peer = Verdict("no slower than the fastest peer", met,
                       f"{rec.runtime} {rec.ratio_vs_fastest_peer:.2f}x the time of {rec.fastest_peer}"
                       + (" (within noise)" if rec.within_noise_of_peer else ""))
    if rec.speedup_vs_baseline is None:
        speed = Verdict(f">= {MIN_SPEEDUP_VS_SAVEDMODEL:.0f}x faster than the SavedModel", None, "no SavedModel measured")
    elif not run.trained:
        speed = Verdict(f">= {MIN_SPEEDUP_VS_SAVEDMODEL:.0f}x faster than the SavedModel", None,
                        f"random weights, latency only ({rec.speedup_vs_baseline:.1f}x)")
    else:
        speed = Verdict(f">= {MIN_SPEEDUP_VS_SAVEDMODEL:.0f}x faster than the SavedModel",
                        rec.speedup_vs_baseline >= MIN_SPEEDUP_VS_SAVEDMODEL, f"{rec.speedup_vs_baseline:.1f}x")
    return [peer, speed]


def _load(path: Path) -> BenchRun:
    path = path / "bench.json" if path.is_dir() else path
    return BenchRun.from_dict(json.loads(path.read_text()))


def main(argv: Sequence[str] | None = None) -> int:
    paths = [Path(p) for p in (sys.argv[1:] if argv is None else argv)]
    if not paths:
        print("usage: python -m tests.benchmarks.bench_goals BENCH_OUT_OR_bench.json [...]", file=sys.stderr)
        return 2
    missed = False
    for path in paths:
        try:
            run = _load(path)
        except (OSError, ValueError, KeyError) as error:
            print(f"{path}: no readable bench.json ({type(error).__name__}: {error})", file=sys.stderr)
            missed = True
            continue
        for verdict in judge(run):
            state = "n/a" if verdict.met is None else ("MET" if verdict.met else "MISSED")
            missed |= verdict.met is False
            print(f"{run.model}: {verdict.goal}: {state} ({verdict.detail})")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
