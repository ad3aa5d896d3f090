"""tfsmith optimize's floors, measured (never asserted in tests): `python -m tests.benchmarks.optimize_floors`.

On the example digits CNN (`tfsmith example`):
  1. the int8 artifact's accuracy is within 1 point of the float model's;
  2. the 80%-pruned + int8 artifact is at least 8x smaller gzipped than the float SavedModel;
  3. the int8 TFLite p50 latency at batch 1 is at least 10x lower than the float SavedModel signature's.

Two real `optimize` runs: post-training int8 alone (floor 1 without pruning in the way) and 80% pruning + int8
(floors 1-3). Prints a table, writes floors.json (and both output folders) under --out, exits 1 when a floor
is missed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from builder.optimize import tfenv


def _asdict(value: Any) -> Any:
    from dataclasses import asdict

    return asdict(value)


def _recipe(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def measure_floors(out: Path, threads: int = 2, latency_runs: int = 1000, epochs: int = 15,
                   say: Any = lambda text: None) -> dict[str, Any]:
    from builder.optimize.example import write_example
    from builder.optimize.options import Options
    from builder.optimize.pipeline import run

    tfenv.configure_threads(threads)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    files = write_example(out / "example", epochs=epochs)
    ptq = _recipe(out / "int8.toml", '[quantization]\nmodes = ["int8"]\n')
    pruned = _recipe(out / "prune80_int8.toml",
                     'choose = "tflite_int8"\n[pruning]\nsparsity = 0.8\nschedule = "polynomial"\nepochs = 4\n'
                     '[quantization]\nmodes = ["dynamic", "int8"]\n')
    runs = {}
    for name, recipe in (("int8", ptq), ("prune80_int8", pruned)):
        t0 = time.perf_counter()
        outcome = run(Options(model=files.model, data=str(files.data), recipe_spec=str(recipe), target=None,
                              out=out / name, max_accuracy_drop=0.01, threads=threads, latency_runs=latency_runs),
                      say=say)
        runs[name] = {"report": outcome.report, "seconds": round(time.perf_counter() - t0, 1)}

    def artifact(run_name: str, format: str) -> Any:
        return next(a for a in runs[run_name]["report"].artifacts if a.format == format)

    base = runs["int8"]["report"].baseline
    base_acc = base.metric("probs").accuracy
    ptq_int8, pr_int8 = artifact("int8", "tflite_int8"), artifact("prune80_int8", "tflite_int8")
    ptq_acc, pr_acc = ptq_int8.metric("probs").accuracy, pr_int8.metric("probs").accuracy
    # The int8 run's exported SavedModel is the same float model as the baseline, timed in the same loop:
    # compare against the faster of the two so a slow first measurement cannot flatter the ratio.
    signature_p50 = min(base.latency_us.p50, artifact("int8", "saved_model").latency_us.p50)
    floors = [
        {"floor": "int8 accuracy within 1 point of float (post-training int8)",
         "measured": f"{ptq_acc:.4f} vs float {base_acc:.4f} (drop {base_acc - ptq_acc:+.4f})",
         "passed": base_acc - ptq_acc <= 0.01 + 1e-9},
        {"floor": "int8 accuracy within 1 point of float (80% pruned + int8)",
         "measured": f"{pr_acc:.4f} vs float {base_acc:.4f} (drop {base_acc - pr_acc:+.4f}); top-1 agreement with "
                     f"the original {pr_int8.metric('probs').agreement:.4f}",
         "passed": base_acc - pr_acc <= 0.01 + 1e-9},
        {"floor": "80% pruned + int8 >= 8x smaller gzipped than the float SavedModel",
         "measured": f"{pr_int8.gzip_bytes} B vs {base.gzip_bytes} B ({base.gzip_bytes / pr_int8.gzip_bytes:.1f}x)",
         "passed": pr_int8.gzip_bytes * 8 <= base.gzip_bytes},
        {"floor": "int8 TFLite p50 >= 10x lower than the SavedModel signature's (batch 1)",
         "measured": f"{ptq_int8.latency_us.p50:.1f} us vs {signature_p50:.1f} us "
                     f"({signature_p50 / ptq_int8.latency_us.p50:.1f}x)",
         "passed": ptq_int8.latency_us.p50 * 10 <= signature_p50},
    ]
    result = {
        "floors": floors,
        "passed": all(f["passed"] for f in floors),
        "example_val_accuracy": files.val_accuracy,
        "threads": threads,
        "latency_runs": latency_runs,
        "seconds": round(time.perf_counter() - start, 1),
        "runs": {name: {"seconds": r["seconds"], "chosen": r["report"].chosen,
                        "chosen_runtime": r["report"].chosen_runtime, "sparsity": r["report"].sparsity,
                        "baseline": _asdict(r["report"].baseline),
                        "artifacts": [_asdict(a) for a in r["report"].artifacts]} for name, r in runs.items()},
        "cpu_features": runs["int8"]["report"].target["features"],
    }
    try:
        import resource

        result["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    except ImportError:
        pass
    (out / "floors.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.optimize_floors", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench-results/optimize"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--latency-runs", type=int, default=1000)
    args = parser.parse_args(argv)
    import os

    progress = os.fdopen(os.dup(2), "w", buffering=1)  # the real stderr, while native banners are silenced

    def say(text: str) -> None:
        if text.startswith("ok"):
            progress.write(f"{text}\n")

    with tfenv.quiet_native_stderr():
        result = measure_floors(args.out, threads=args.threads, latency_runs=args.latency_runs, say=say)
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"optimize floors (threads={args.threads}, {result['seconds']} s, "
                        f"peak RSS {result.get('peak_rss_mib', '?')} MiB)")
    table.add_column("floor")
    table.add_column("measured")
    table.add_column("result")
    for floor in result["floors"]:
        table.add_row(floor["floor"], floor["measured"], "PASS" if floor["passed"] else "FAIL")
    Console(width=160).print(table)
    for name, r in result["runs"].items():
        rows = ", ".join(f"{a['format']} {a['gzip_bytes'] / 1024:.0f}KiB/{a['latency_us']['p50']:.0f}us/"
                         f"{a['metrics'][0]['accuracy']:.4f}" for a in r["artifacts"])
        base = r["baseline"]
        print(f"{name}: baseline {base['metrics'][0]['accuracy']:.4f} {base['latency_us']['p50']:.0f}us; {rows}")
    print(f"json: {args.out / 'floors.json'}")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
