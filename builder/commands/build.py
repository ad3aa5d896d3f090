"""`tfsmith build`, `matrix`, `push-index` and `engine-up`.

Thin: parse flags into a `BuildConfig` (flags > TFSMITH_* env > tfsmith.toml > defaults, the same path
`render` and `target` take), call the stage, print. The docker SDK, archspec and the planning modules are
imported inside the command bodies.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from builder.commands.options import CudaCcOption, TargetOption, TfVersionOption


class _StepDisplay:
    """A rich spinner line showing the build's current step (terminals only)."""

    def __init__(self, console: Any, title: str) -> None:
        self.title = title
        self.status = console.status(title, spinner="dots")

    def update(self, step: str) -> None:
        self.status.update(f"{self.title}: {step[:110]}")

    def __enter__(self) -> _StepDisplay:
        self.status.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.status.__exit__(*exc)


def register(app: typer.Typer) -> None:
    """Add `build`, `matrix`, `push-index` and `engine-up` to the tfsmith app."""

    @app.command("build")
    def build(
        target: TargetOption = None,
        cuda_cc: CudaCcOption = None,
        wheel: str = typer.Option(None, "--wheel", help="Build the runtime image from this prebuilt TF wheel."),
        repository: str = typer.Option(None, "--repository", help="Image repository (default tfsmith/tensorflow)."),
        tag: list[str] = typer.Option(None, "--tag", help="Extra tag for the image (repeatable)."),
        push: str = typer.Option(None, "--push", help="Push the image's tags to this registry (host:port/path)."),
        export_wheel: str = typer.Option(None, "--export-wheel", help="Copy the built wheel into this directory."),
        only: str = typer.Option(None, "--only", help="Build one entry of `tfsmith matrix` by its id."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Resolve and show the plan; build nothing."),
        config: Path = typer.Option(None, "--config", help="Config file (default ./tfsmith.toml or pyproject)."),
        tf_source: str = typer.Option(None, "--tf-source", help="Local TensorFlow checkout (dir) or git ref."),
        tf_version: TfVersionOption = None,
        python: str = typer.Option(None, "--python", help="Python minor version of the wheel, e.g. 3.12."),
        base_image: str = typer.Option(None, "--base-image", help="Runtime base image (must exist locally)."),
        toolchain_image: str = typer.Option(
            None, "--toolchain-image", help="Debian-family image for the compiler stages (must exist locally)."
        ),
        ca_bundle: str = typer.Option(
            None, "--ca-bundle", help="PEM bundle trusted by pip/curl in the build (system|none|FILE)."
        ),
        remote_cache: str = typer.Option(None, "--remote-cache", help="Bazel remote cache URL."),
        jobs: int = typer.Option(None, "--jobs", help="Bazel jobs (default: from cores and memory)."),
        state_dir: str = typer.Option(None, "--state-dir", help="Where contexts and logs go (default .tfsmith)."),
        label: list[str] = typer.Option(None, "--label", help="Extra image label KEY=VALUE (repeatable)."),
        facts: str = typer.Option(None, "--facts", help="Facts JSON (tfsmith detect --json) for `host`/`auto`."),
    ) -> None:
        """Detect, resolve, plan, render and build the TensorFlow image (cached by its spec digest)."""
        from rich.console import Console

        from builder.build.run import build_image
        from builder.build.settings import load_config

        flags = {
            "target": target, "cuda_cc": cuda_cc, "wheel": wheel, "tags": tuple(tag or ()), "push": push, "repository": repository,
            "export_wheel": export_wheel, "dry_run": dry_run or None, "tf_source": tf_source, "tf_version": tf_version,
            "python": python, "base_image": base_image, "toolchain_image": toolchain_image, "ca_bundle": ca_bundle, "remote_cache": remote_cache,
            "jobs": jobs, "state_dir": state_dir, "labels": tuple(label or ()), "facts": facts,
        }  # fmt: skip
        settings = load_config(flags, config_file=config)
        if only and (target or cuda_cc):
            from builder.errors import InputError

            raise InputError("--only ID already names the target and CUDA capabilities: drop --target/--cuda-cc")
        console = Console(stderr=True)
        progress = (lambda title: _StepDisplay(console, title)) if console.is_terminal else None
        outcome = build_image(settings, only=only, say=lambda line: console.print(line, highlight=False, soft_wrap=True),
                              progress=progress)
        if not outcome.dry_run:
            typer.echo(outcome.image_ref)

    @app.command("matrix")
    def matrix(
        targets: str = typer.Option(None, "--targets", help="Comma-separated fleet targets."),
        # Not the shared CudaCcOption: here each use adds one CUDA variant per x86 target (repeatable list).
        cuda_cc: list[str] = typer.Option(
            None, "--cuda-cc", help="Add a CUDA image per x86 target for this capability list (repeatable)."
        ),
        fmt: str = typer.Option("json", "--format", help="github | gitlab | json"),
        config: Path = typer.Option(None, "--config", help="Config file ([matrix] targets, cuda_cc)."),
    ) -> None:
        """The fleet's build matrix for CI; each entry's id is what `tfsmith build --only ID` builds."""
        from builder.build.settings import load_config
        from builder.build.matrix import fleet_matrix, render_matrix

        settings = load_config({"targets": targets, "matrix_cuda_cc": tuple(cuda_cc or ())}, config_file=config)
        sys.stdout.write(render_matrix(fleet_matrix(settings.targets, settings.matrix_cuda_cc), fmt) + "\n")

    @app.command("push-index")
    def push_index(
        ref: str = typer.Argument(..., help="Where the index goes: REGISTRY/REPO:TAG."),
        images: list[str] = typer.Argument(..., help="Local images, one per architecture (e.g. amd64 and arm64)."),
    ) -> None:
        """One tag for several architectures: push each image as REF-<arch>, then an image index under REF, so
        every node pulls REF for its own architecture. Prints each platform's digest and the index's."""
        from builder.engine import default_engine

        pushed = default_engine().push_index(ref, images, log=lambda line: typer.echo(line, err=True))
        for platform, digest in sorted(pushed.platforms.items()):
            typer.echo(f"{platform}  {pushed.by_digest(platform)}")
        typer.echo(f"index        {pushed.ref}@{pushed.digest}")

    @app.command("engine-up")
    def engine_up(
        base_image: str = typer.Option(None, "--base-image", help="Base image to create when missing."),
        arch: str = typer.Option(
            None, "--arch", help="Architecture of the base image: this machine's (default), amd64 or arm64 "
            "(arm64 on x86 installs and registers QEMU emulation for the image's checks; the base itself is configured on this machine: about half a minute, once)."
        ),
    ) -> None:
        """Bring up a Docker engine (install + start dockerd when needed) and the local Python base image."""
        from builder.engine.local import docker_arch, ensure_base_image, ensure_emulation, ensure_engine, host_arch

        ensure_engine(say=typer.echo)
        if arch:
            ensure_emulation(arch, say=typer.echo)
        if arch and base_image is None and docker_arch(arch) != host_arch():
            # this machine's own base too: an image built on the other installs its packages in it
            ensure_base_image(say=typer.echo)
        ref = ensure_base_image(base_image, say=typer.echo, arch=arch)
        typer.echo(f"engine up; base image {ref} present")
