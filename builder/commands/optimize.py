"""CLI commands for optimizing models: `tfsmith optimize` and `tfsmith example`.

Thin: parse flags, call builder.optimize, print. TensorFlow is imported only inside the command bodies so
`tfsmith detect` stays fast and the core works without the optimize extra.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from builder.commands.options import CudaCcOption, TargetOption
from builder.errors import InputError


def _require_optimize_extra() -> None:
    """One clear line when the optimize extra is not installed, instead of an ImportError traceback."""
    import importlib.util

    missing = [m for m in ("tensorflow", "tf_keras", "tensorflow_model_optimization", "ai_edge_litert")
               if importlib.util.find_spec(m) is None]
    if missing:
        raise InputError(f"the optimize extra is not installed (missing {', '.join(missing)}): "
                         "pip install 'tfsmith[optimize]'")


def register(app: typer.Typer) -> None:
    """Add the optimize commands to the tfsmith app."""

    @app.command("example")
    def example(
        out: Path = typer.Option(Path("example"), "--out", help="Folder for MODEL and DATA."),
        epochs: int = typer.Option(15, "--epochs", min=1, help="Training epochs (a few seconds on 2 cores)."),
    ) -> None:
        """Train a small CNN on scikit-learn's bundled digits and write MODEL + DATA (no network needed)."""
        _require_optimize_extra()
        from rich.console import Console

        from builder.optimize.example import write_example

        from builder.optimize.progress import announce

        console = Console(stderr=True)
        with console.status("") as status:
            announce(console, status, "training the example digits CNN (tf_keras)...")
            files = write_example(out, epochs=epochs)
        typer.echo(f"model: {files.model}")
        typer.echo(f"data:  {files.data}")
        typer.echo(f"validation accuracy: {files.val_accuracy:.4f}")
        typer.echo(f"next:  tfsmith optimize {files.model} --data {files.data} --recipe auto --out optimized")

    @app.command("optimize")
    def optimize(
        model: Path = typer.Argument(..., help="Keras 2 .keras/.h5 (tf_keras), Keras 3 .keras, SavedModel dir, or .tflite."),
        data: str = typer.Option(..., "--data", help="DATA: .npz (x_val/<input>, y_val/<output>, x_train/..., "
                                 "y_train/..., x_calib/...; plain x_val etc. for one input/output) or module:function."),
        recipe: str = typer.Option("auto", "--recipe", help="Recipe file (TOML/YAML) or 'auto' (from the target's facts)."),
        target: TargetOption = None,
        cuda_cc: CudaCcOption = None,
        out: Path = typer.Option(Path("optimized"), "--out", help="Output folder (written atomically)."),
        max_accuracy_drop: float = typer.Option(0.01, "--max-accuracy-drop", min=0.0, max=1.0,
                                                help="Quality gate, classification outputs: largest accuracy loss "
                                                     "(or disagreement without labels) vs the original model."),
        max_relative_error: float = typer.Option(0.05, "--max-relative-error", min=0.0,
                                                 help="Quality gate, regression outputs: largest relative error "
                                                      "||y - y_original|| / ||y_original|| vs the original model."),
        explain: bool = typer.Option(False, "--explain", help="Print the plan and the reason for every choice, then stop."),
        threads: int = typer.Option(2, "--threads", min=1, help="Interpreter / intra-op threads for evaluation."),
        latency_runs: int = typer.Option(300, "--latency-runs", min=10,
                                         help="Timing effort: about latency_runs/100 s per artifact x runtime."),
        signature: Optional[str] = typer.Option(None, "--signature",
                                                help="SavedModel signature that is the contract and the served "
                                                     "default (default: serving_default), e.g. predict."),
        memory: Optional[str] = typer.Option(None, "--memory", help="Memory optimize may use, e.g. 8G or 7.5GB "
                                             "(default: what this host or its cgroup allows). A step that does not "
                                             "fit drops out with a note; when not even the model's own SavedModel "
                                             "fits, optimize stops at once, saying how much it needs."),
        imports: list[str] = typer.Option([], "--import", help="Python module to import before loading MODEL, so "
                                          "the custom layers/objects it registers load (repeatable; searched on "
                                          "sys.path and in the current directory)."),
    ) -> None:
        """Prune, quantize and export MODEL keeping its API; judge every artifact per output against the original
        model (exit 3 when the chosen one fails) and pick the fastest accepted artifact x runtime on this host."""
        if not explain:
            _require_optimize_extra()
        from builder.optimize.command import run_optimize_command

        memory_bytes = None
        if memory is not None:
            from builder.measure.memory import parse_size

            try:
                memory_bytes = parse_size(memory)
            except ValueError as error:
                raise typer.BadParameter(str(error), param_hint="--memory") from None

        # --cuda-cc none travels as it is: unset means the host's GPUs where `tfsmith build` would build for them
        # (builder.targets.choose_cuda), so `none` is the only way to say CPU-only
        code = run_optimize_command(model=model, data=data, recipe=recipe, target=target, out=out,
                                    max_accuracy_drop=max_accuracy_drop, explain=explain, threads=threads,
                                    cuda_cc=cuda_cc, latency_runs=latency_runs,
                                    max_relative_error=max_relative_error, signature=signature,
                                    imports=tuple(imports), memory=memory_bytes)
        if code:
            raise typer.Exit(code)
