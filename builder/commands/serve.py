"""`tfsmith serve` (run the model server here) and `tfsmith package` (serving images).

`serve` forwards its arguments to the server's own parser (builder.server.options), so the server's options
are listed once. Heavy imports (LiteRT, FastAPI, docker) happen inside the command bodies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    """Add the serve and package commands to the tfsmith app."""

    @app.command(
        "serve",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
        add_help_option=False,
    )
    def serve(ctx: typer.Context) -> None:
        """Serve a .tflite model with TensorFlow Serving's REST API (see `tfsmith serve --help`)."""
        from builder.packaging.runtime_choice import choose_runtime
        from builder.server.__main__ import main

        def measured(requested: str, model: Path, threads: int) -> tuple[str, str]:
            from builder.model.artifact import resolve_artifact

            choice = choose_runtime(requested, resolve_artifact(model).model_path, threads)
            return choice.runtime, choice.reason

        raise typer.Exit(main(ctx.args, prog="tfsmith serve", choose_runtime=measured))

    @app.command("package")
    def package(
        artifact: Annotated[Path, typer.Argument(help=".tflite model, SavedModel folder or `tfsmith optimize --out` folder")],
        kind: Annotated[str, typer.Option(help="Image kind: auto (what the chosen artifact runs on) | litert (slim Python base) | openvino (slim, OpenVINO alone: OpenVINO's IR) | tensorflow (FROM the TensorFlow image tfsmith build made for --target) | tfserving (TF Serving's layout)")] = "auto",
        runtime: Annotated[str | None, typer.Option(help="Inference runtime in the image: litert | openvino | openvino-bf16 | tensorflow | tensorflow-bf16 | auto (default: what tfsmith optimize measured fastest, else the kind's own)")] = None,
        target: Annotated[str | None, typer.Option(help="Build target: the preflight guard, and which TensorFlow image a tensorflow image is built FROM")] = None,
        cuda_cc: Annotated[str | None, typer.Option(help="CUDA compute capabilities of the target (its and-cuda TensorFlow image), e.g. 8.0,9.0")] = None,
        base_image: Annotated[str | None, typer.Option(help="Local base image (never pulled); overrides the kind's default")] = None,
        tag: Annotated[str | None, typer.Option(help="Image tag (default: tfsmith/serve-<name>:<kind>-<digest>)")] = None,
        model_name: Annotated[str | None, typer.Option(help="Served model name (default: from the path)")] = None,
        model_version: Annotated[int, typer.Option(help="Version number served")] = 1,
        signature: Annotated[str | None, typer.Option(help="Signature a request without signature_name gets (default: the one tfsmith optimize chose)")] = None,
        processes: Annotated[str, typer.Option("--model-processes", "--processes", help="Model processes in the server (1: the models run in the front's own process), or auto: sized when the container starts from the CPUs it gets and the model's measured call time")] = "auto",
        workers: Annotated[str, typer.Option("--interpreters", "--workers", help="Interpreters per model process, or auto")] = "auto",
        threads: Annotated[str, typer.Option(help="Threads per interpreter, or auto")] = "auto",
        max_batch: Annotated[str, typer.Option(help="Dynamic batching: max batch (1 = off), or auto (natural batching where it measures cheaper)")] = "auto",
        batch_timeout_us: Annotated[int, typer.Option(help="Dynamic batching timeout")] = 0,
        context: Annotated[Path | None, typer.Option(help="Also keep the rendered build context here")] = None,
        smoke: Annotated[bool, typer.Option("--smoke/--no-smoke", help="Run the image and check its answers")] = True,
    ) -> None:
        """Package a model into a serving image, then prove the image answers correctly (--smoke)."""
        from builder.packaging.workflow import PackageOptions, package_model

        options = PackageOptions(
            kind=kind,
            runtime=runtime,
            target=target,
            base_image=base_image,
            tag=tag,
            version=model_version,
            processes=_count(processes, "--model-processes"),
            workers=_count(workers, "--interpreters"),
            threads=_count(threads, "--threads"),
            max_batch=_count(max_batch, "--max-batch"),
            batch_timeout_us=batch_timeout_us,
            signature=signature,
        )
        package_model(artifact, options, model_name=model_name, smoke=smoke, keep_context=context, say=typer.echo,
                      cuda_cc=cuda_cc)


def _count(text: str, flag: str) -> int | None:
    """A count of at least 1, or None for auto; InputError in one line otherwise."""
    import argparse

    from builder.errors import InputError
    from builder.server.options import auto_count

    try:
        return auto_count(text)
    except argparse.ArgumentTypeError as error:
        raise InputError(f"{flag}: {error}") from None
