"""CLI commands of the serve room: `tfsmith serve` (run the REST server) and `tfsmith package` (serving images).

Heavy imports (LiteRT, FastAPI, uvicorn, docker) happen inside the command bodies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    """Add this room's commands to the tfsmith app."""

    @app.command("serve")
    def serve(
        artifact: Annotated[Path, typer.Argument(help=".tflite model or `tfsmith optimize --out` folder")],
        port: Annotated[int, typer.Option(help="TCP port (TF Serving's REST port is 8501)")] = 8501,
        host: Annotated[str, typer.Option(help="Address to listen on (0.0.0.0 for all)")] = "127.0.0.1",
        model_name: Annotated[str | None, typer.Option(help="Name in /v1/models/<name> (default: from the path)")] = None,
        model_version: Annotated[int, typer.Option(help="Version number served")] = 1,
        threads: Annotated[int, typer.Option(help="Intra-op threads per interpreter")] = 1,
        workers: Annotated[int, typer.Option(help="Interpreters, one per worker thread")] = 2,
        processes: Annotated[int, typer.Option(help="Server processes sharing the port (throughput)")] = 1,
        runtime: Annotated[str, typer.Option(help="auto | litert | openvino | openvino-nncf (auto measures them here)")] = "litert",
        max_batch: Annotated[int, typer.Option(help="Dynamic batching: max examples per batch (1 = off)")] = 1,
        batch_timeout_us: Annotated[int, typer.Option(help="Dynamic batching: max wait for a fuller batch")] = 0,
        max_body_bytes: Annotated[int, typer.Option(help="Larger request bodies get 413")] = 16 * 1024 * 1024,
        dispatch: Annotated[str, typer.Option(help="auto | inline (on the event loop) | threads (worker pool)")] = "auto",
        log_level: Annotated[str, typer.Option(help="uvicorn log level")] = "info",
    ) -> None:
        """Serve a .tflite model with TensorFlow Serving's REST API (LiteRT, XNNPACK on)."""
        import logging

        from builder.serve.app import configure, run_server

        logging.basicConfig(level=log_level.upper(), format="%(levelname)s: %(message)s")
        config = configure(
            artifact,
            model_name=model_name,
            version=model_version,
            runtime=runtime,
            workers=workers,
            threads=threads,
            max_batch=max_batch,
            batch_timeout_us=batch_timeout_us,
            max_body_bytes=max_body_bytes,
            dispatch=dispatch,
        )
        typer.echo(
            f"serving {config.model_name} v{config.version} ({config.model_path.name}, runtime {config.runtime}: "
            f"{config.runtime_reason}) on http://{host}:{port}/v1/models/{config.model_name}",
            err=True,
        )
        if processes < 1:
            from builder.errors import InputError

            raise InputError("--processes must be at least 1")
        run_server(config, host=host, port=port, log_level=log_level, processes=processes)

    @app.command("package")
    def package(
        artifact: Annotated[Path, typer.Argument(help=".tflite model or `tfsmith optimize --out` folder")],
        runtime: Annotated[str, typer.Option(help="litert (our server) | tfserving (TF Serving layout)")] = "litert",
        target: Annotated[str | None, typer.Option(help="Build target for the preflight guard and copts")] = None,
        base_image: Annotated[str | None, typer.Option(help="Local base image (never pulled)")] = None,
        tag: Annotated[str | None, typer.Option(help="Image tag (default: tfsmith/serve-<name>:<runtime>-<digest>)")] = None,
        model_name: Annotated[str | None, typer.Option(help="Served model name (default: from the path)")] = None,
        model_version: Annotated[int, typer.Option(help="Version number served")] = 1,
        server_runtime: Annotated[str, typer.Option(help="In a litert image: litert | openvino | openvino-nncf | auto")] = "litert",
        workers: Annotated[int, typer.Option(help="Interpreters in the server")] = 2,
        threads: Annotated[int, typer.Option(help="Threads per interpreter")] = 1,
        max_batch: Annotated[int, typer.Option(help="Dynamic batching: max batch (1 = off)")] = 1,
        batch_timeout_us: Annotated[int, typer.Option(help="Dynamic batching timeout")] = 0,
        context: Annotated[Path | None, typer.Option(help="Also keep the rendered build context here")] = None,
        smoke: Annotated[bool, typer.Option("--smoke/--no-smoke", help="Run the image and check its answers")] = True,
    ) -> None:
        """Package a model into a serving image, then prove the image answers correctly (--smoke)."""
        from builder.serve.workflow import PackageOptions, package_model

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
