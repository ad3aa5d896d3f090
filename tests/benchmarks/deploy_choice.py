"""Does what `tfsmith optimize` deploys come within noise of the fastest thing `tfsmith bench` can run, without
changing the model's answers? Measured, never asserted in a test:

    python -m tests.benchmarks.deploy_choice [--models mobilenet_v2,resnet50] [--out build/deploy_choice]
                                             [--threads 2] [--budget-s 60] [--runtimes all]

For each model (`tf_keras.applications`, weights=None: random weights, which is fine for timing) it does what a
user does: saves the model, writes a small DATA .npz of random images (x_val, x_calib; no labels, so every gate
judges fidelity to the original model), runs `tfsmith optimize` twice, with `--recipe auto` and with a
float-only recipe (a file holding `[quantization] modes = []`: the user asks for float answers), then
`tfsmith bench` once on the auto output. Bench times that folder's files and converts the variants it lacks
with optimize's own converter (the float .tflite is the same bytes whichever recipe made it), so both choices
are bench rows of the same interleaved run.

Per model and recipe, the table puts optimize's choice (report.json `chosen` x `chosen_runtime` x
`chosen_signature`, and its candidate's `precision`) next to:
- the fastest row bench measured that keeps the model's answers (bench's quality rule, the one its
  recommendation applies) among the files the recipe allows (the float-only recipe: no quantized file, any
  precision of compute), peers included: what the user could get with anything bench can run;
- the fastest such row a tfsmith image serves (what optimize could have deployed: LiteRT and OpenVINO on each
  .tflite, OpenVINO on its own IR, float and NNCF int8, TensorFlow on the SavedModel);
- the fastest of the candidates optimize itself accepted and timed: optimize's choice slower than that beyond
  noise (the medians' confidence intervals apart) means the two measurements disagree, a failure;
- OpenVINO's bf16 on the SavedModel (the `openvino-bf16` peer: what a user of OpenVINO gets with its default
  on a CPU that computes in bf16). On such a host, a ResNet50 whose bf16 answers agree with its float answers
  (that row keeps quality) must deploy within 1.25x of it, with either recipe; otherwise the line says why
  the rule does not apply.
Exit status 1 when a verdict fails. Writes deploy_choice.json and each step's folder under --out.
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
#: The recipes optimize runs with: its own, and one that asks for float answers (no quantized file is built).
AUTO, FLOAT_ONLY = "auto", "float-only"
FLOAT_ONLY_RECIPE = "# float answers only: no quantized .tflite; precision is left to measurement\n" \
                    "[quantization]\nmodes = []\n"
#: The peer the bf16 rule measures against: OpenVINO reading the SavedModel at bf16.
BF16_PEER = "openvino-bf16"
#: On a host that computes in bf16, these models must deploy within this factor of BF16_PEER.
BF16_RULE_MODELS = ("resnet50",)
MAX_RATIO_VS_BF16_PEER = 1.25
#: /proc/cpuinfo flags of bf16 compute (x86: AMX and AVX512-BF16; Arm: the BF16 extension).
BF16_FLAGS = frozenset({"amx_bf16", "avx512_bf16", "bf16"})
#: Peer rows that run a quantized model (tfsmith's rows say so by the file they serve).
QUANTIZED_PEERS = frozenset({"openvino-int8", "onnxruntime-int8"})


def quantized_row(name: str) -> bool:
    """A bench row whose model is quantized (int8, dynamic-range or float16 weights): what a float-only recipe
    does not allow, whatever precision the rest computes in."""
    from builder.bench.runtimes import served_row

    row = served_row(name)
    return name in QUANTIZED_PEERS if row is None else row.variant in ("int8", "dynamic", "fp16")


def _tfsmith() -> list[str]:
    script = REPO / ".venv" / "bin" / "tfsmith"
    return [str(script)] if script.exists() else [sys.executable, "-m", "builder"]


#: Classes the fitted head tells the images apart into, and the logit margin it answers them with.
HEAD_CLASSES, HEAD_MARGIN = 10, 8.0


def write_model_and_data(name: str, folder: Path, rows: int = 32, seed: int = 0) -> tuple[Path, Path]:
    """MODEL (.keras, Keras 2) and DATA with random images in [-1, 1].

    The network's weights are random (nothing downloads here), but its classifier head is fitted to the images
    (least squares on the network's own pooled features: each image gets one of HEAD_CLASSES classes, answered
    with a logit margin of HEAD_MARGIN). A fully random network answers near-uniform scores that barely vary
    between images, on which no agreement can judge a bf16 or int8 file; a fitted head answers each image
    differently with clear margins, as a trained classifier does, so "bf16 answers agree" means something.
    """
    import numpy as np

    from builder.optimize import tfenv

    keras = tfenv.keras()
    keras.utils.set_random_seed(seed)
    build = {"mobilenet_v2": keras.applications.MobileNetV2, "resnet50": keras.applications.ResNet50}[name]
    folder.mkdir(parents=True, exist_ok=True)
    model_path, data_path = folder / f"{name}.keras", folder / f"{name}.npz"
    rng = np.random.default_rng(seed)
    images = rng.uniform(-1.0, 1.0, size=(2 * rows, *IMAGE_SHAPE)).astype(np.float32)
    if not model_path.exists():
        model = build(weights=None, input_shape=IMAGE_SHAPE)
        fit_head(model, images, keras)
        model.save(model_path)
    np.savez(data_path, x_val=images[:rows], x_calib=images[rows:])
    return model_path, data_path


def fit_head(model, images, keras) -> None:  # noqa: ANN001 - a tf_keras classifier, numpy images, tf_keras
    """Set the final Dense layer so each image's logits are HEAD_MARGIN for its class (image i: class i mod
    HEAD_CLASSES) and 0 elsewhere: the minimum-norm least-squares fit on the pooled features."""
    import numpy as np

    head = model.layers[-1]
    features = keras.Model(model.input, head.input).predict(images, batch_size=8, verbose=0)
    targets = np.zeros((len(images), head.units), np.float32)
    targets[np.arange(len(images)), np.arange(len(images)) % HEAD_CLASSES] = HEAD_MARGIN
    design = np.hstack([features, np.ones((len(images), 1), np.float32)])
    solution = np.linalg.lstsq(design, targets, rcond=None)[0]
    head.set_weights([solution[:-1].astype(np.float32), solution[-1].astype(np.float32)])


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


def cpu_model() -> str:
    """This CPU's model name, as /proc/cpuinfo (and lscpu) give it: the numbers are this host's."""
    try:
        return next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name")), "unknown CPU")
    except OSError:
        return "unknown CPU"


def host_computes_in_bf16() -> bool:
    """Whether this CPU has bf16 compute (its flags, as `tfsmith detect` reads them)."""
    from builder.hardware.cpu import detect_cpu

    try:
        return bool(BF16_FLAGS & set(detect_cpu().features))
    except Exception:  # noqa: BLE001 - an unreadable cpuinfo: the bf16 rule is then not applied, and says so
        return False


@dataclass(frozen=True)
class Row:
    """One model under one recipe: optimize's choice against what bench measured, batch-1 p50 in ms."""

    model: str
    recipe: str
    chosen: str
    chosen_runtime: str
    chosen_signature: str
    chosen_precision: str  # the chosen candidate's `precision` in report.json ("" where the report has none)
    shipped: str  # bench's row for chosen x chosen_runtime x chosen_signature
    shipped_p50_ms: float | None
    shipped_ci_pct: float | None
    shipped_keeps_quality: bool | None
    fastest_passing: str | None  # fastest row of any role that keeps the model's answers
    fastest_passing_p50_ms: float | None
    ratio_vs_fastest_passing: float | None
    within_noise_of_fastest_passing: bool | None
    fastest_deployable: str | None  # fastest row a tfsmith image serves that keeps the answers
    ratio_vs_fastest_deployable: float | None
    within_noise_of_fastest_deployable: bool | None
    fastest_candidate: str | None  # fastest bench row among the candidates optimize accepted and timed
    ratio_vs_fastest_candidate: float | None
    within_noise_of_fastest_candidate: bool | None
    bf16_peer_p50_ms: float | None
    bf16_peer_keeps_quality: bool | None
    ratio_vs_bf16_peer: float | None
    bf16_verdict: str  # "pass", "FAIL", or "n/a: why the rule does not apply"
    optimize_s: float
    bench_s: float

    @property
    def failed(self) -> bool:
        return self.within_noise_of_fastest_candidate is False or self.bf16_verdict == "FAIL"


def _ci_pct(result) -> float:  # noqa: ANN001 - RuntimeResult
    lat = result.latency
    return max(lat.p50 - lat.ci_low, lat.ci_high - lat.p50) / lat.p50 * 100


@dataclass(frozen=True)
class Versus:
    """Optimize's choice against the fastest row of a set: p50 ratio (below 1 when the choice is faster) and
    whether the two medians' confidence intervals overlap."""

    ratio: float
    within_noise: bool


def _fastest_of(results, shipped: str, names: set[str]):  # noqa: ANN001, ANN202 - RuntimeResults -> (row, Versus)
    """(fastest measured row among `names`, optimize's choice against it); None where either was not measured.
    The choice is not itself one of the set unless it is in `names`: a choice that changes the answers is
    compared with the fastest row that keeps them, never with itself."""
    from builder.measure.decide import Timed, within_noise

    measured = {r.name: r for r in results if r.ok and r.latency is not None}
    among = [measured[n] for n in names if n in measured]
    if not among:
        return None, None
    fastest = min(among, key=lambda r: r.p50)
    mine = measured.get(shipped)
    if mine is None:
        return fastest, None
    close = mine.name == fastest.name or within_noise(Timed.of(mine.name, mine.latency),
                                                      Timed.of(fastest.name, fastest.latency))
    return fastest, Versus(mine.p50 / fastest.p50, close)


def chosen_precision(report: dict) -> str:
    """The `precision` of the candidate optimize chose (its artifact x runtime x signature), "" when unrecorded."""
    timed = (report.get("selection") or {}).get("candidates") or []
    chosen = (report.get("chosen"), report.get("chosen_runtime"), report.get("chosen_signature") or "serving_default")
    for candidate in timed:
        if (candidate.get("artifact"), candidate.get("runtime"), candidate.get("signature", "serving_default")) == chosen:
            return str(candidate.get("precision") or "")
    return ""


def bf16_verdict(model: str, host_bf16: bool, peer, ratio: float | None,  # noqa: ANN001 - RuntimeResult
                 peer_keeps: bool | None) -> str:
    """The bf16 rule for one model and recipe (pure)."""
    if model not in BF16_RULE_MODELS:
        return f"n/a: the rule is for {', '.join(BF16_RULE_MODELS)}"
    if not host_bf16:
        return "n/a: this CPU has no bf16 compute"
    if peer is None or ratio is None:
        return f"n/a: {BF16_PEER} or optimize's choice was not measured"
    if not peer_keeps:
        return "n/a: the bf16 answers do not agree with the float answers"
    return "pass" if ratio <= MAX_RATIO_VS_BF16_PEER else "FAIL"


def compare(model: str, recipe: str, report: dict, bench_json: dict, host_bf16: bool, optimize_s: float = 0.0,
            bench_s: float = 0.0) -> Row:
    """Pure: optimize's report.json + bench's bench.json -> the comparison row."""
    from builder.bench.models import shipped_runtime
    from builder.bench.recommend import quality_verdicts
    from builder.bench.results import ROLE_PEER, BenchRun

    run = BenchRun.from_dict(bench_json)
    chosen, runtime = str(report.get("chosen")), str(report.get("chosen_runtime") or "")
    signature = str(report.get("chosen_signature") or "serving_default")
    shipped = shipped_runtime(chosen, runtime or None, signature) or f"{runtime}?"
    measured = {r.name: r for r in run.results if r.ok and r.latency is not None}
    if not measured:
        raise SystemExit(f"{model}: bench measured no runtime")
    verdicts = quality_verdicts(run.results, trained=run.trained)
    passing = {name for name, (ok, _) in verdicts.items() if ok and (recipe != FLOAT_ONLY or not quantized_row(name))}
    mine = measured.get(shipped)
    best, versus = _fastest_of(run.results, shipped, passing)
    deployable = {n for n in passing if measured[n].role != ROLE_PEER}
    best_deployable, versus_deployable = _fastest_of(run.results, shipped, deployable)
    best_candidate, versus_candidate = _fastest_of(run.results, shipped, accepted_candidates(report))
    peer = measured.get(BF16_PEER)
    peer_keeps = verdicts[BF16_PEER][0] if peer is not None else None
    ratio_peer = mine.p50 / peer.p50 if mine is not None and peer is not None else None
    return Row(
        model=model, recipe=recipe, chosen=chosen, chosen_runtime=runtime, chosen_signature=signature,
        chosen_precision=chosen_precision(report), shipped=shipped,
        shipped_p50_ms=mine.p50 * 1e3 if mine else None, shipped_ci_pct=_ci_pct(mine) if mine else None,
        shipped_keeps_quality=verdicts[shipped][0] if shipped in verdicts else None,
        fastest_passing=best.name if best else None, fastest_passing_p50_ms=best.p50 * 1e3 if best else None,
        ratio_vs_fastest_passing=versus.ratio if versus else None,
        within_noise_of_fastest_passing=versus.within_noise if versus else None,
        fastest_deployable=best_deployable.name if best_deployable else None,
        ratio_vs_fastest_deployable=versus_deployable.ratio if versus_deployable else None,
        within_noise_of_fastest_deployable=versus_deployable.within_noise if versus_deployable else None,
        fastest_candidate=best_candidate.name if best_candidate else None,
        ratio_vs_fastest_candidate=versus_candidate.ratio if versus_candidate else None,
        within_noise_of_fastest_candidate=versus_candidate.within_noise if versus_candidate else None,
        bf16_peer_p50_ms=peer.p50 * 1e3 if peer else None, bf16_peer_keeps_quality=peer_keeps,
        ratio_vs_bf16_peer=ratio_peer, bf16_verdict=bf16_verdict(model, host_bf16, peer, ratio_peer, peer_keeps),
        optimize_s=optimize_s, bench_s=bench_s)


def accepted_candidates(report: dict) -> set[str]:
    """Bench rows for the (artifact, runtime, signature) candidates optimize accepted and timed (report.json
    `selection`; one with an error, e.g. a runtime whose own numbers fail the gate, is not a candidate);
    without that list, every accepted artifact on LiteRT."""
    from builder.bench.models import shipped_runtime

    accepted = {a.get("path") for a in report.get("artifacts", []) if a.get("accepted")}
    timed = (report.get("selection") or {}).get("candidates")
    if timed:
        triples = [(c.get("artifact"), c.get("runtime"), c.get("signature")) for c in timed
                   if c.get("p50_us") is not None and not c.get("error") and c.get("artifact") in accepted]
    else:
        triples = [(path, "litert", None) for path in accepted]
    names = {shipped_runtime(artifact, runtime, signature) for artifact, runtime, signature in triples}
    return {n for n in names if n}


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _noise(within: bool | None) -> str:
    return "" if within is None else (" (within noise)" if within else " (beyond noise)")


def table(rows: Sequence[Row]) -> str:
    head = ("model", "recipe", "optimize chose (artifact x runtime, precision) = bench row", "p50 ms ±CI",
            "fastest keeping answers (any the recipe allows)", "ratio", "fastest a tfsmith image serves", "ratio",
            "fastest of optimize's candidates", "ratio", f"{BF16_PEER} p50 ms", "ratio",
            f"bf16 rule (<= {MAX_RATIO_VS_BF16_PEER}x)")
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for r in rows:
        precision = f", {r.chosen_precision}" if r.chosen_precision else ""
        keeps = "" if r.shipped_keeps_quality is not False else " (changes answers)"
        lines.append(" | ".join((
            r.model, r.recipe, f"{r.chosen} x {r.chosen_runtime or '-'}{precision} = {r.shipped}{keeps}",
            f"{_fmt(r.shipped_p50_ms, '.2f')} ±{_fmt(r.shipped_ci_pct, '.1f')}%",
            f"{r.fastest_passing or '-'} ({_fmt(r.fastest_passing_p50_ms, '.2f')} ms)",
            f"{_fmt(r.ratio_vs_fastest_passing, '.2f')}x" + _noise(r.within_noise_of_fastest_passing),
            r.fastest_deployable or "-",
            f"{_fmt(r.ratio_vs_fastest_deployable, '.2f')}x" + _noise(r.within_noise_of_fastest_deployable),
            r.fastest_candidate or "-",
            f"{_fmt(r.ratio_vs_fastest_candidate, '.2f')}x" + _noise(r.within_noise_of_fastest_candidate),
            _fmt(r.bf16_peer_p50_ms, ".2f")
            + ("" if r.bf16_peer_keeps_quality is not False else " (answers differ)"),
            f"{_fmt(r.ratio_vs_bf16_peer, '.2f')}x", r.bf16_verdict)))
    return "\n".join(lines)


def verdict_lines(rows: Sequence[Row]) -> list[str]:
    """One line per model and recipe: what failed, or that nothing did."""
    lines = []
    for r in rows:
        agreement = ("not measured" if r.within_noise_of_fastest_candidate is None else
                     "within noise of" if r.within_noise_of_fastest_candidate else "slower beyond noise than")
        anything = ("-" if r.ratio_vs_fastest_passing is None else
                    f"{r.ratio_vs_fastest_passing:.2f}x{_noise(r.within_noise_of_fastest_passing)}")
        lines.append(f"{r.model} / {r.recipe}: {'FAIL' if r.failed else 'ok'} -- optimize's choice {r.shipped} is "
                     f"{agreement} the fastest of its own candidates ({r.fastest_candidate or '-'}); against the "
                     f"fastest row anything bench runs that keeps the answers ({r.fastest_passing or '-'}): {anything}; "
                     f"bf16 rule: {r.bf16_verdict}"
                     + (f" ({r.ratio_vs_bf16_peer:.2f}x {BF16_PEER})" if r.ratio_vs_bf16_peer is not None else ""))
    return lines


def _optimize(name: str, recipe: str, model_path: Path, data_path: Path, folder: Path, threads: int) -> tuple[Path, float]:
    """`tfsmith optimize` with one recipe into a fresh folder; (its folder, seconds)."""
    import shutil

    optimized = folder / f"optimized-{recipe}"
    if optimized.exists():
        shutil.rmtree(optimized)
    recipe_arg = recipe
    if recipe == FLOAT_ONLY:
        recipe_file = folder / "float-only.toml"
        recipe_file.write_text(FLOAT_ONLY_RECIPE)
        recipe_arg = str(recipe_file)
    print(f"[{name}] tfsmith optimize --recipe {recipe_arg} ...", flush=True)
    seconds = _run([*_tfsmith(), "optimize", str(model_path), "--data", str(data_path), "--recipe", recipe_arg,
                    "--threads", str(threads), "--out", str(optimized)], folder / f"optimize-{recipe}.log", 3600)
    return optimized, seconds


def measure(name: str, out: Path, threads: int, budget_s: float, runtimes: str, rows: int,
            host_bf16: bool) -> list[Row]:
    folder = out / name
    model_path, data_path = write_model_and_data(name, folder, rows=rows)
    optimized = {recipe: _optimize(name, recipe, model_path, data_path, folder, threads)
                 for recipe in (AUTO, FLOAT_ONLY)}
    bench_out = folder / "bench"
    print(f"[{name}] tfsmith bench on the auto output ...", flush=True)
    bench_s = _run([*_tfsmith(), "bench", str(optimized[AUTO][0]), "--data", str(data_path), "--threads",
                    str(threads), "--batch", "1,8", "--budget-s", str(budget_s), "--runtimes", runtimes,
                    "--out", str(bench_out)], folder / "bench.log", 3600)
    bench_json = json.loads((bench_out / "bench.json").read_text())
    return [compare(name, recipe, json.loads((path / "report.json").read_text()), bench_json, host_bf16,
                    seconds, bench_s) for recipe, (path, seconds) in optimized.items()]


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
    host_bf16 = host_computes_in_bf16()
    print(f"host: {cpu_model()}, {os.cpu_count()} cores, {'computes in bf16' if host_bf16 else 'no bf16 compute'}",
          flush=True)
    results = [row for n in names
               for row in measure(n, args.out, args.threads, args.budget_s, args.runtimes, args.rows, host_bf16)]
    print()
    print(table(results))
    print()
    print("\n".join(verdict_lines(results)))
    (args.out / "deploy_choice.json").write_text(json.dumps([{**asdict(r), "failed": r.failed} for r in results], indent=2) + "\n")
    print(f"\nwrote {args.out / 'deploy_choice.json'}")
    return 1 if any(r.failed for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
