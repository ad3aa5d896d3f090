"""CLI commands of the render room: `tfsmith render` (one build context) and `tfsmith dockerfiles` (the
canonical set in dockerfiles/).

Thin on purpose: parse flags, turn them into `BuildOptions`, call resolve -> plan -> render, print. Planning
and rendering modules are imported inside the command bodies so `tfsmith detect` never pays for Jinja.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from builder.digest import sha256_file
from builder.errors import InputError

if TYPE_CHECKING:
    from builder.plan import BuildOptions, BuildPlan

DEFAULT_OUT_ROOT = Path("tfsmith-contexts")


def _source(value: str | None) -> tuple[str | None, Path | None]:
    """`--tf-source`: an existing directory is a local checkout; anything else is a git ref."""
    if value is None:
        return None, None
    path = Path(value).expanduser()
    if path.is_dir():
        return None, path.resolve()
    if value.startswith(("/", "./", "../", "~")):
        raise InputError(f"--tf-source {value!r}: no such directory (a git ref cannot start with / . or ~)")
    return value, None


def _labels(values: list[str]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in values:
        key, sep, value = item.partition("=")
        if not sep:
            raise InputError(f"--label {item!r}: expected KEY=VALUE")
        pairs.append((key, value))
    return tuple(pairs)


def build_options(
    *,
    tf_version: str,
    python: str,
    base_image: str | None = None,
    toolchain_base_image: str | None = None,
    tf_source: str | None = None,
    remote_cache: str | None = None,
    jobs: int | None = None,
    wheel: Path | None = None,
    ca_bundle: Path | None = None,
    labels: list[str] | None = None,
) -> BuildOptions:
    """BuildOptions from CLI-style values, doing the file-system checks plan_build must not do."""
    from builder.plan import DEFAULT_TOOLCHAIN_BASE, BuildOptions

    tf_ref, tf_dir = _source(tf_source)
    wheel_sha = None
    if wheel is not None:
        if not wheel.is_file():
            raise InputError(f"--wheel {wheel}: no such file")
        wheel = wheel.resolve()
        wheel_sha = sha256_file(wheel)
    if ca_bundle is not None:
        if not ca_bundle.is_file():
            raise InputError(f"--ca-bundle {ca_bundle}: no such file")
        ca_bundle = ca_bundle.resolve()
    return BuildOptions(
        tf_version=tf_version,
        python=python,
        base_image=base_image,
        toolchain_base_image=toolchain_base_image or DEFAULT_TOOLCHAIN_BASE,
        tf_ref=tf_ref,
        tf_source_dir=tf_dir,
        remote_cache=remote_cache,
        jobs=jobs,
        wheel=wheel,
        wheel_sha256=wheel_sha,
        ca_bundle=ca_bundle,
        labels=_labels(labels or []),
    )


def plan_for(
    target_name: str,
    cuda_cc: str | None,
    options: BuildOptions,
    facts_file: Path | None = None,
) -> BuildPlan:
    """detect (only what is needed) -> resolve -> plan, for this machine as the build machine."""
    from builder.hardware import detect_host, load_facts
    from builder.plan import plan_build
    from builder.targets import resolve_target

    host = detect_host()  # the build machine: its cores/memory size bazel, its level sets host_copts
    facts = load_facts(facts_file) if facts_file is not None else host
    target = resolve_target(
        target_name,
        cuda_cc=cuda_cc,
        facts=facts,
        tf_version=options.tf_version or "2.21.0",
        python=options.python or "3.12",
        build_machine=host,
    )
    return plan_build(target, options, build_machine=host)


def _build_command(plan: BuildPlan, context: Path) -> str:
    parts = ["DOCKER_BUILDKIT=1 docker build"]
    for secret_id, path in plan.secrets.items():
        parts.append(f"--secret id={secret_id},src={path}")
    for name, path in plan.build_contexts.items():
        parts.append(f"--build-context {name}={path}")
    parts.append(f"-t {plan.image_ref} {context}")
    return " ".join(parts)


def register(app: typer.Typer) -> None:
    """Add this room's commands to the tfsmith app."""

    @app.command("render")
    def render(
        target: str = typer.Option("host", "--target", help="host, x86-64-v2|v3|v4, or an archspec name"),
        cuda_cc: Optional[str] = typer.Option(None, "--cuda-cc", help="GPU capabilities: 8.0,9.0 or auto"),
        tf_version: str = typer.Option("2.21.0", "--tf-version", help="TensorFlow version (2.18-2.21)"),
        python: str = typer.Option("3.12", "--python", help="Python minor version of the wheel and image"),
        base_image: Optional[str] = typer.Option(
            None, "--base-image", help="runtime base with python3+venv (default python:<py>-slim-bookworm)"
        ),
        toolchain_base_image: Optional[str] = typer.Option(
            None, "--toolchain-base-image", help="Debian-family base of the compile stages"
        ),
        tf_source: Optional[str] = typer.Option(
            None, "--tf-source", help="local TensorFlow checkout (DIR) or git ref (default v<tf-version>)"
        ),
        remote_cache: Optional[str] = typer.Option(None, "--remote-cache", help="bazel --remote_cache URL"),
        jobs: Optional[int] = typer.Option(None, "--jobs", help="bazel --jobs (default: from cores and memory)"),
        wheel: Optional[Path] = typer.Option(None, "--wheel", help="build the runtime image from this wheel"),
        ca_bundle: Optional[Path] = typer.Option(
            None, "--ca-bundle", help="PEM CA bundle to trust (BuildKit secret ca_bundle, never in a layer)"
        ),
        label: list[str] = typer.Option([], "--label", help="extra image label KEY=VALUE (repeatable)"),
        facts: Optional[Path] = typer.Option(
            None, "--facts", help="host facts JSON (tfsmith detect --json) for `host` / `--cuda-cc auto`"
        ),
        out: Optional[Path] = typer.Option(None, "--out", help="context folder (default tfsmith-contexts/TAG)"),
        print_dockerfile: bool = typer.Option(False, "--print", help="write the Dockerfile to stdout only"),
        dry_run: bool = typer.Option(False, "--dry-run", help="print the resolved plan (JSON) only"),
    ) -> None:
        """Write a Docker build context that compiles TensorFlow for a target (or packages a --wheel)."""
        from builder.render import render_context, render_dockerfile

        options = build_options(
            tf_version=tf_version,
            python=python,
            base_image=base_image,
            toolchain_base_image=toolchain_base_image,
            tf_source=tf_source,
            remote_cache=remote_cache,
            jobs=jobs,
            wheel=wheel,
            ca_bundle=ca_bundle,
            labels=label,
        )
        plan = plan_for(target, cuda_cc, options, facts)
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

        from builder.render import canonical_plans, render_set

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
            raise typer.Exit(1)
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
