"""`tfsmith bench`: runtimes side by side on this host for the user's model, measured fairly in one run.

Thin: parse flags, call builder.bench, print. TensorFlow, LiteRT, OpenVINO and ONNX Runtime are imported
inside the command body (through builder.bench) so `tfsmith detect` stays fast.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional

import typer

from builder.errors import InputError


def parse_batches(text: str) -> int:
    """`--batch 1,32` -> 32: batch 1 is always measured (latency); the larger size gives throughput."""
    try:
        sizes = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise InputError(f"--batch must be comma-separated positive integers, got {text!r}") from None
    if not sizes or sizes[0] < 1:
        raise InputError(f"--batch must be comma-separated positive integers, got {text!r}")
    if len(sizes) > 2 or (len(sizes) == 2 and sizes[0] != 1):
        raise InputError(f"--batch takes 1 and one larger size (e.g. 1,32), got {text!r}")
    return sizes[-1] if sizes[-1] > 1 else 1


def parse_runtimes(text: str) -> list[str]:
    from builder.bench.runtimes import ALL_RUNTIMES

    if text.strip() in ("", "all"):
        return list(ALL_RUNTIMES)
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [n for n in names if n not in ALL_RUNTIMES]
    if unknown:
        raise InputError(f"unknown runtime(s) {', '.join(unknown)}; known: {', '.join(ALL_RUNTIMES)}")
    return list(dict.fromkeys(names))


def register(app: typer.Typer) -> None:
    """Add `tfsmith bench` to the tfsmith app."""

    @app.command("bench")
    def bench(
        model: str = typer.Argument(..., help="Keras 2 model file, optimize --out folder (its files are timed "
                                              "as shipped), SavedModel folder, .tflite, or a built-in: example "
                                              "(tfsmith example's CNN, trained here in seconds), mobilenet_v2, "
                                              "resnet50 (random weights, latency only)."),
        data: Optional[Path] = typer.Option(None, "--data", help="DATA .npz (x_val, y_val, x_calib or x_train; "
                                                                  "plain or /<name> arrays) for accuracy and "
                                                                  "int8 calibration."),
        runtimes: str = typer.Option("all", "--runtimes", help="Comma-separated runtimes, or 'all'."),
        threads: int = typer.Option(2, "--threads", min=1, help="Threads for EVERY runtime."),
        batch: str = typer.Option("1,32", "--batch", help="Batch 1 for latency, and a larger batch for throughput."),
        profile: Optional[Path] = typer.Option(None, "--profile", help="Write a TensorFlow Profiler trace of the "
                                                                        "SavedModel runs here (TensorBoard)."),
        images: Optional[str] = typer.Option(None, "--images", help="A,B: two local TensorFlow images (e.g. the one "
                                                                     "tfsmith build made here and a stock-wheel one): "
                                                                     "the SavedModel served from each, and the ratio."),
        images_path: str = typer.Option("served", "--images-path", help="served: package the SavedModel FROM each "
                                                                         "image and time gRPC requests (what clients "
                                                                         "see); inprocess: time the signature inside "
                                                                         "each image."),
        out: Path = typer.Option(Path("bench-out"), "--out", help="Folder for bench.json, bench.md, bench.png."),
        budget_s: float = typer.Option(60.0, "--budget-s", min=0.1, help="Seconds for the timed rounds."),
    ) -> None:
        """Benchmark runtimes side by side on this host: interleaved rounds, same inputs, same threads."""
        batch_size = parse_batches(batch)
        names = parse_runtimes(runtimes)
        if data is not None and not data.is_file():
            raise InputError(f"--data {data}: no such file")
        if images is not None:
            _bench_images(model, images, threads, batch_size, out, budget_s, images_path)
            return
        _require_bench_extras()
        from builder.bench.models import BUILTINS

        if not Path(model).exists() and model not in BUILTINS:
            raise InputError(f"MODEL {model!r} is neither a file, a folder, nor a built-in ({', '.join(BUILTINS)})")
        from rich.console import Console

        from builder.bench import report
        from builder.bench.harness import Settings, run_bench
        from builder.bench.models import resolve
        from builder.bench.runtimes import configure_tf_threads

        from builder.bench.quiet import native_output_to
        from builder.optimize.progress import announce

        workdir = out / "artifacts"
        log = out / "bench.log"
        try:
            with native_output_to(log) as progress:
                console = Console(file=progress)
                with console.status("preparing the model") as status:
                    def say(text: str) -> None:
                        announce(console, status, text)

                    say("preparing the model")
                    configure_tf_threads(threads)
                    started = time.perf_counter()
                    bench_model = resolve(model, data, workdir, say=say)
                    bench_model.notes.append(f"artifacts prepared (export, conversions) in "
                                             f"{time.perf_counter() - started:.0f} s into {workdir}")
                    bench_model.notes.append(f"native library output (TensorFlow, converters, NNCF): {log}")
                    run = run_bench(bench_model, names,
                                    Settings(threads=threads, batch=batch_size, budget_s=budget_s),
                                    workdir, say=say, profile_dir=profile)
        except InputError:
            raise
        except Exception:
            typer.echo(f"tfsmith bench failed; library output is in {log}", err=True)
            raise
        terminal = Console()
        report.print_table(run, terminal if terminal.is_terminal else Console(width=170))
        paths = report.write(run, out)
        typer.echo("wrote: " + ", ".join(str(p) for p in paths.values()))


def _require_bench_extras() -> None:
    import importlib.util

    missing = [m for m in ("tensorflow", "tf_keras", "ai_edge_litert") if importlib.util.find_spec(m) is None]
    if missing:
        raise InputError(f"tfsmith bench needs the optimize extra (missing {', '.join(missing)}): "
                         "pip install 'tfsmith[optimize,bench]'")


def _bench_images(model: str, images: str, threads: int, batch: int, out: Path, budget_s: float,
                  how: str = "served") -> None:
    from rich.console import Console

    from builder.bench.images import compare_images, parse_images

    if how not in ("served", "inprocess"):
        raise InputError(f"--images-path {how!r}: choose served or inprocess")
    first, second = parse_images(images)
    path = Path(model)
    if not path.exists():
        raise InputError(f"--images needs MODEL as a SavedModel folder or optimize --out folder, got {model!r}")
    if how == "served":
        from builder.bench.served_images import compare_served_images

        comparison: Any = compare_served_images(path, first, second, threads=threads, budget_s=budget_s,
                                                say=typer.echo)
    else:
        from builder.optimize.progress import announce

        console = Console(stderr=True)
        with console.status("") as status:
            announce(console, status, f"running the SavedModel bench in {first} and {second}")
            comparison = compare_images(path, first, second, threads=threads, batch=batch, budget_s=budget_s)
    out.mkdir(parents=True, exist_ok=True)
    (out / "images.json").write_text(comparison.to_json())
    typer.echo(comparison.summary())
    typer.echo(f"wrote: {out / 'images.json'}")
