"""`tfsmith render` (one build context) and `tfsmith dockerfiles` (the canonical set in dockerfiles/).

Thin on purpose: the flags go through the same settings path as `tfsmith build` (flags > TFSMITH_*
environment > tfsmith.toml > defaults, `builder.build.settings`) and the same settings -> plan path
(`builder.build.from_settings`), so `render --dry-run` and `build --dry-run` show the same plan. Planning and
rendering modules are imported inside the command bodies so `tfsmith detect` never pays for Jinja.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from builder.commands.options import CudaCcOption, TargetOption, TfVersionOption

if TYPE_CHECKING:
    from builder.build.plan import BuildPlan

DEFAULT_OUT_ROOT = Path("tfsmith-contexts")


def _build_command(plan: BuildPlan, context: Path) -> str:
    parts = ["DOCKER_BUILDKIT=1 docker build"]
    for secret_id, path in plan.secrets.items():
        parts.append(f"--secret id={secret_id},src={path}")
    for name, path in plan.build_contexts.items():
        parts.append(f"--build-context {name}={path}")
    parts.append(f"-t {plan.image_ref} {context}")
    return " ".join(parts)


def register(app: typer.Typer) -> None:
    """Add `render` and `dockerfiles` to the tfsmith app."""

    @app.command("render")
    def render(
        target: TargetOption = None,
        cuda_cc: CudaCcOption = None,
        tf_version: TfVersionOption = None,
        python: Optional[str] = typer.Option(None, "--python", help="Python minor version (default 3.12)"),
        base_image: Optional[str] = typer.Option(
            None, "--base-image", help="runtime base with python3+venv (default python:<py>-slim-bookworm)"
        ),
        toolchain_image: Optional[str] = typer.Option(
            None, "--toolchain-image", "--toolchain-base-image", help="Debian-family base of the compile stages"
        ),
        tf_source: Optional[str] = typer.Option(
            None, "--tf-source", help="local TensorFlow checkout (DIR) or git ref (default v<tf-version>)"
        ),
        remote_cache: Optional[str] = typer.Option(None, "--remote-cache", help="bazel --remote_cache URL"),
        jobs: Optional[int] = typer.Option(None, "--jobs", help="bazel --jobs (default: from cores and memory)"),
        wheel: Optional[str] = typer.Option(None, "--wheel", help="build the runtime image from this wheel"),
        repository: Optional[str] = typer.Option(
            None, "--repository", help="image repository (default tfsmith/tensorflow)"
        ),
        ca_bundle: Optional[str] = typer.Option(
            None, "--ca-bundle", help="PEM CA bundle to trust: system (default), none or FILE (a BuildKit secret)"
        ),
        label: list[str] = typer.Option([], "--label", help="extra image label KEY=VALUE (repeatable)"),
        facts: Optional[str] = typer.Option(
            None, "--facts", help="host facts JSON (tfsmith detect --json) for `host` / `--cuda-cc auto`"
        ),
        config: Optional[Path] = typer.Option(None, "--config", help="config file (default ./tfsmith.toml)"),
        out: Optional[Path] = typer.Option(None, "--out", help="context folder (default tfsmith-contexts/TAG)"),
        print_dockerfile: bool = typer.Option(False, "--print", help="write the Dockerfile to stdout only"),
        dry_run: bool = typer.Option(False, "--dry-run", help="print the resolved plan (JSON) only"),
    ) -> None:
        """Write a Docker build context that compiles TensorFlow for a target (or packages a --wheel)."""
        from builder.build.settings import load_config
        from builder.build.from_settings import plan_from_settings
        from builder.build.render import render_context, render_dockerfile

        flags = {
            "target": target, "cuda_cc": cuda_cc, "tf_version": tf_version, "python": python,
            "base_image": base_image, "toolchain_image": toolchain_image, "tf_source": tf_source,
            "remote_cache": remote_cache, "jobs": jobs, "wheel": wheel, "repository": repository,
            "ca_bundle": ca_bundle, "labels": tuple(label), "facts": facts,
        }  # fmt: skip
        plan = plan_from_settings(load_config(flags, config_file=config))
        if dry_run:
            sys.stdout.write(plan.to_json())
            return
        if print_dockerfile:
            sys.stdout.write(render_dockerfile(plan))
            return
        context = render_context(plan, out if out is not None else DEFAULT_OUT_ROOT / plan.tag)
        typer.echo(f"wrote {context}")
        typer.echo(f"  image   {plan.image_ref}")
        typer.echo(f"  target  {plan.target.name}  copts: {' '.join(plan.target.copts)}")
        typer.echo(f"  spec    {plan.spec_digest}")
        typer.echo(
            f"  bazel   --jobs={plan.resources.jobs} --local_ram_resources={plan.resources.local_ram_mb} "
            f"({plan.resources.machine})"
        )
        typer.echo(f"  build   {_build_command(plan, context)}")

    @app.command("dockerfiles")
    def dockerfiles(
        out: Path = typer.Option(Path("dockerfiles"), "--out", help="folder for the canonical contexts"),
        check: bool = typer.Option(False, "--check", help="only report whether --out is current (exit 1 if stale)"),
    ) -> None:
        """Regenerate the canonical build contexts (CPU x86-64-v3/v4, sapphirerapids, neoverse_v1, CUDA 8.0+9.0)."""
        import tempfile

        from builder.build.from_settings import canonical_plans
        from builder.build.render import render_set

        plans = canonical_plans()
        if not check:
            for path in render_set(plans, out):
                typer.echo(f"wrote {path}")
            return
        with tempfile.TemporaryDirectory(prefix="tfsmith-dockerfiles-") as tmp:
            fresh = Path(tmp) / "dockerfiles"
            render_set(plans, fresh)
            stale = _differences(fresh, out)
        if stale:
            typer.echo(f"{out} is stale ({len(stale)} differences, e.g. {stale[0]}); run `make dockerfiles`", err=True)
            from builder.errors import EXIT_STALE

            raise typer.Exit(EXIT_STALE)
        typer.echo(f"{out} is current")


def _differences(fresh: Path, existing: Path) -> list[str]:
    """Relative paths that differ between two trees (missing on either side, or different bytes)."""
    fresh_files = {p.relative_to(fresh) for p in fresh.rglob("*") if p.is_file()}
    old_files = {p.relative_to(existing) for p in existing.rglob("*") if p.is_file()} if existing.is_dir() else set()
    diffs = sorted(str(p) for p in fresh_files ^ old_files)
    for rel in sorted(fresh_files & old_files):
        if (fresh / rel).read_bytes() != (existing / rel).read_bytes():
            diffs.append(str(rel))
    return diffs
