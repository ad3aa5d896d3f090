"""`tfsmith serve` (run the model server here) and `tfsmith package` (serving images).

`serve` forwards its arguments to the server's own parser (builder.server.options), so the server's options
are listed once. Heavy imports (LiteRT, FastAPI, uvicorn, docker) happen inside the command bodies.
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
            from builder.server.artifacts import resolve_artifact

            choice = choose_runtime(requested, resolve_artifact(model).model_path, threads)
            return choice.runtime, choice.reason

        raise typer.Exit(main(ctx.args, prog="tfsmith serve", choose_runtime=measured))

    @app.command("package")
    def package(
        artifact: Annotated[Path, typer.Argument(help=".tflite model or `tfsmith optimize --out` folder")],
        runtime: Annotated[str, typer.Option(help="litert (our server) | tfserving (TF Serving layout)")] = "litert",
        target: Annotated[str | None, typer.Option(help="Build target for the preflight guard and copts")] = None,
        base_image: Annotated[str | None, typer.Option(help="Local base image (never pulled)")] = None,
        tag: Annotated[str | None, typer.Option(help="Image tag (default: tfsmith/serve-<name>:<runtime>-<digest>)")] = None,
        model_name: Annotated[str | None, typer.Option(help="Served model name (default: from the path)")] = None,
        model_version: Annotated[int, typer.Option(help="Version number served")] = 1,
        server_runtime: Annotated[str | None, typer.Option(help="In a litert image: litert | openvino | openvino-nncf | auto (default: what tfsmith optimize measured fastest, else litert)")] = None,
        workers: Annotated[int, typer.Option(help="Interpreters in the server")] = 2,
        threads: Annotated[int, typer.Option(help="Threads per interpreter")] = 1,
        max_batch: Annotated[int, typer.Option(help="Dynamic batching: max batch (1 = off)")] = 1,
        batch_timeout_us: Annotated[int, typer.Option(help="Dynamic batching timeout")] = 0,
        context: Annotated[Path | None, typer.Option(help="Also keep the rendered build context here")] = None,
        smoke: Annotated[bool, typer.Option("--smoke/--no-smoke", help="Run the image and check its answers")] = True,
    ) -> None:
        """Package a model into a serving image, then prove the image answers correctly (--smoke)."""
        from builder.packaging.workflow import PackageOptions, package_model

        options = PackageOptions(
            runtime=runtime,
            server_runtime=server_runtime,
            target=target,
            base_image=base_image,
            tag=tag,
            version=model_version,
            workers=workers,
            threads=threads,
            max_batch=max_batch,
            batch_timeout_us=batch_timeout_us,
        )
        package_model(artifact, options, model_name=model_name, smoke=smoke, keep_context=context, say=typer.echo)
