"""Is what `make build` deploys within noise of the fastest runtime `tfsmith bench` finds? Measured, never asserted
in a test:

    python -m tests.benchmarks.deploy_choice [--models mobilenet_v2,resnet50] [--out build/deploy_choice]
                                             [--threads 2] [--budget-s 60] [--runtimes all]

For each model (`tf_keras.applications`, weights=None: random weights, which is fine for timing) it does what a
user does: saves the model, writes a small DATA .npz of random images (x_val, x_calib; no labels, so the gate
judges fidelity to the original model), runs `tfsmith optimize --recipe auto` on it, then `tfsmith bench` on the
optimize output. The table puts what optimize chose (report.json `chosen` x `chosen_runtime`) next to the
fastest runtime bench found: overall, among the runtimes that serve the .tflite (what `package` can deploy),
and among the candidates optimize accepted and timed (its gate may reject a file bench times anyway: with
random weights int8 rarely keeps the top-1 answer), as ratios with each median's confidence interval.

The verdict, and exit status 1, is on the last: optimize's choice slower beyond noise (the two medians'
confidence intervals do not overlap) than bench's fastest of the same candidates, i.e. the two measurements
disagree on which deployable choice is fastest. A file the gate rejected is not a choice (deploying it would
change the model's answers) and a peer runtime tfsmith does not serve is not one either; both stay in the
table, with their ratios, for what they show.
Writes deploy_choice.json and each step's folder under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODELS = ("mobilenet_v2", "resnet50")
IMAGE_SHAPE = (224, 224, 3)


def _tfsmith() -> list[str]:
    script = REPO / ".venv" / "bin" / "tfsmith"
    return [str(script)] if script.exists() else [sys.executable, "-m", "builder"]


def write_model_and_data(name: str, folder: Path, rows: int = 32, seed: int = 0) -> tuple[Path, Path]:
    """MODEL (.keras, Keras 2) with random weights and DATA with random images in [-1, 1]."""
    import numpy as np

    from builder.optimize import tfenv

    keras = tfenv.keras()
    keras.utils.set_random_seed(seed)
    build = {"mobilenet_v2": keras.applications.MobileNetV2, "resnet50": keras.applications.ResNet50}[name]
    folder.mkdir(parents=True, exist_ok=True)
    model_path, data_path = folder / f"{name}.keras", folder / f"{name}.npz"
    if not model_path.exists():
        build(weights=None, input_shape=IMAGE_SHAPE).save(model_path)
    rng = np.random.default_rng(seed)
    images = rng.uniform(-1.0, 1.0, size=(2 * rows, *IMAGE_SHAPE)).astype(np.float32)
    np.savez(data_path, x_val=images[:rows], x_calib=images[rows:])
    return model_path, data_path


def _run(command: list[str], log: Path, timeout_s: float) -> float:
    """Run one CLI step, its output into `log`; seconds taken. A failed step stops the benchmark with its tail."""
    start = time.perf_counter()
    with log.open("w") as sink:
        done = subprocess.run(command, stdout=sink, stderr=subprocess.STDOUT, cwd=REPO, timeout=timeout_s,
                              env={**os.environ, "COLUMNS": "200"})
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise SystemExit(f"{' '.join(command[:3])} ... failed (exit {done.returncode}); {log}:\n{tail}")
    return time.perf_counter() - start


@dataclass(frozen=True)
class Row:
    """One model: optimize's choice against the fastest runtimes bench measured, batch 1 p50 in ms."""

    model: str
    chosen: str
    chosen_runtime: str
    shipped: str  # bench's name for chosen x chosen_runtime
    shipped_p50_ms: float | None
    shipped_ci_pct: float | None
    fastest: str
    fastest_p50_ms: float
    fastest_ci_pct: float
    ratio: float | None
    within_noise: bool | None
    fastest_tflite: str | None
    ratio_vs_fastest_tflite: float | None
    within_noise_of_fastest_tflite: bool | None
    fastest_candidate: str | None  # fastest bench runtime among the candidates optimize accepted and timed
    ratio_vs_fastest_candidate: float | None
    within_noise_of_fastest_candidate: bool | None
    optimize_s: float
    bench_s: float


def _ci_pct(result) -> float:  # noqa: ANN001 - RuntimeResult
    lat = result.latency
    return max(lat.p50 - lat.ci_low, lat.ci_high - lat.p50) / lat.p50 * 100


def compare(model: str, report: dict, bench_json: dict, optimize_s: float = 0.0, bench_s: float = 0.0) -> Row:
    """Pure: optimize's report.json + bench's bench.json -> the comparison row."""
    from builder.bench.models import shipped_runtime
    from builder.bench.recommend import versus_fastest
    from builder.bench.results import ROLE_TFSMITH, BenchRun

    run = BenchRun.from_dict(bench_json)
    chosen, runtime = str(report.get("chosen")), str(report.get("chosen_runtime") or "litert")
    shipped = shipped_runtime(chosen, runtime, report.get("chosen_signature")) or f"{runtime}?"
    measured = [r for r in run.results if r.ok and r.latency is not None]
    if not measured:
        raise SystemExit(f"{model}: bench measured no runtime")
    fastest = min(measured, key=lambda r: r.p50)
    mine = next((r for r in measured if r.name == shipped), None)
    overall = versus_fastest(run.results, shipped)
    tflite = [r for r in measured if r.role == ROLE_TFSMITH]
    best_tflite = min(tflite, key=lambda r: r.p50) if tflite else None
    within_tflite = versus_fastest([r for r in run.results if r.role == ROLE_TFSMITH], shipped)
    candidates = accepted_candidates(report)
    among = [r for r in run.results if r.name in candidates or r.name == shipped]
    best_candidate = min((r for r in among if r.ok and r.latency is not None), key=lambda r: r.p50, default=None)
    within_candidates = versus_fastest(among, shipped)
    return Row(
        model=model, chosen=chosen, chosen_runtime=runtime, shipped=shipped,
        shipped_p50_ms=mine.p50 * 1e3 if mine else None, shipped_ci_pct=_ci_pct(mine) if mine else None,
        fastest=fastest.name, fastest_p50_ms=fastest.p50 * 1e3, fastest_ci_pct=_ci_pct(fastest),
        ratio=overall.ratio if overall else None, within_noise=overall.within_noise if overall else None,
        fastest_tflite=best_tflite.name if best_tflite else None,
        ratio_vs_fastest_tflite=within_tflite.ratio if within_tflite else None,
        within_noise_of_fastest_tflite=within_tflite.within_noise if within_tflite else None,
        fastest_candidate=best_candidate.name if best_candidate else None,
        ratio_vs_fastest_candidate=within_candidates.ratio if within_candidates else None,
        within_noise_of_fastest_candidate=within_candidates.within_noise if within_candidates else None,
        optimize_s=optimize_s, bench_s=bench_s)


def accepted_candidates(report: dict) -> set[str]:
    """Bench runtimes for the (artifact, runtime) pairs optimize accepted and timed (report.json `selection`; a
    pair with an error, e.g. a runtime whose own numbers fail the gate, is not a candidate);
    without that list, every accepted artifact on LiteRT."""
    from builder.bench.models import shipped_runtime

    accepted = {a.get("path") for a in report.get("artifacts", []) if a.get("accepted")}
    timed = (report.get("selection") or {}).get("candidates")
    if timed:
        pairs = [(c.get("artifact"), c.get("runtime")) for c in timed
                 if c.get("p50_us") is not None and not c.get("error") and c.get("artifact") in accepted]
    else:
        pairs = [(path, "litert") for path in accepted]
    names = {shipped_runtime(artifact, None if runtime == "tensorflow" else runtime) for artifact, runtime in pairs}
    return {n for n in names if n}


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _noise(within: bool | None) -> str:
    return "" if within is None else (" (within noise)" if within else " (beyond noise)")


def table(rows: Sequence[Row]) -> str:
    head = ("model", "optimize chose (artifact x runtime)", "p50 ms ±CI", "fastest in bench (any)", "p50 ms ±CI",
            "ratio", "fastest .tflite runtime", "ratio", "fastest of optimize's accepted candidates", "ratio",
            "verdict")
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for r in rows:
        verdict = ("not measured" if r.within_noise_of_fastest_candidate is None else
                   "within noise" if r.within_noise_of_fastest_candidate else "slower beyond noise")
        lines.append(" | ".join((
            r.model, f"{r.chosen} x {r.chosen_runtime} ({r.shipped})",
            f"{_fmt(r.shipped_p50_ms, '.2f')} ±{_fmt(r.shipped_ci_pct, '.1f')}%",
            r.fastest, f"{r.fastest_p50_ms:.2f} ±{r.fastest_ci_pct:.1f}%",
            f"{_fmt(r.ratio, '.2f')}x" + _noise(r.within_noise), r.fastest_tflite or "-",
            f"{_fmt(r.ratio_vs_fastest_tflite, '.2f')}x"
            + _noise(r.within_noise_of_fastest_tflite),
            r.fastest_candidate or "-",
            f"{_fmt(r.ratio_vs_fastest_candidate, '.2f')}x" + _noise(r.within_noise_of_fastest_candidate), verdict)))
    return "\n".join(lines)


def measure(name: str, out: Path, threads: int, budget_s: float, runtimes: str, rows: int) -> Row:
    folder = out / name
    model_path, data_path = write_model_and_data(name, folder, rows=rows)
    optimized, bench_out = folder / "optimized", folder / "bench"
    if optimized.exists():
        import shutil

        shutil.rmtree(optimized)
    print(f"[{name}] tfsmith optimize --recipe auto ...", flush=True)
    optimize_s = _run([*_tfsmith(), "optimize", str(model_path), "--data", str(data_path), "--recipe", "auto",
                       "--threads", str(threads), "--out", str(optimized)], folder / "optimize.log", 3600)
    print(f"[{name}] tfsmith bench on the optimize output ({optimize_s:.0f} s for optimize) ...", flush=True)
    bench_s = _run([*_tfsmith(), "bench", str(optimized), "--data", str(data_path), "--threads", str(threads),
                    "--batch", "1,8", "--budget-s", str(budget_s), "--runtimes", runtimes, "--out", str(bench_out)],
                   folder / "bench.log", 3600)
    report = json.loads((optimized / "report.json").read_text())
    bench_json = json.loads((bench_out / "bench.json").read_text())
    return compare(name, report, bench_json, optimize_s, bench_s)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.deploy_choice",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from {', '.join(MODELS)}")
    parser.add_argument("--out", type=Path, default=REPO / "build" / "deploy_choice")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--budget-s", type=float, default=60.0, help="bench's timing budget per model")
    parser.add_argument("--runtimes", default="all", help="bench --runtimes (default: every runtime)")
    parser.add_argument("--rows", type=int, default=32, help="random images for x_val and for x_calib")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODELS]
    if unknown or not names:
        parser.error(f"--models: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(MODELS)}")
    results = [measure(n, args.out, args.threads, args.budget_s, args.runtimes, args.rows) for n in names]
    print()
    print(table(results))
    (args.out / "deploy_choice.json").write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
    print(f"\nwrote {args.out / 'deploy_choice.json'}")
    return 0 if all(r.within_noise_of_fastest_candidate for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
