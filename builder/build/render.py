"""Render a BuildPlan into a Docker build context: Dockerfile, bazel options, manifest, guard.

Templates live in the top-level `templates/image/` folder (small Jinja2 partials, no logic beyond loops and
conditionals over plan fields), found through `builder.template_files` so an installed tfsmith finds them too.
The environment uses StrictUndefined, so a template that names a field the plan does not have fails
loudly instead of rendering an empty string into a Dockerfile.

Writing is atomic (`builder.staging`): the context is assembled in a temporary sibling folder and renamed
into place, so a failed render never leaves a half-written context, and a folder that is not a tfsmith
context is never clobbered.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from builder.build.plan import (
    CA_SECRET_ID,
    LLVM_PREFIX,
    WHEEL_OUTPUT_DIR,
    WHEEL_TARGET,
    BuildPlan,
)
from builder.errors import InputError
from builder.staging import staged_dir
from builder.template_files import template_environment

if TYPE_CHECKING:
    import jinja2

GUARD_SOURCE = Path(__file__).resolve().parents[1] / "guard.py"  # builder/guard.py, copied into every image

DOCKERFILE = "Dockerfile"
BAZELRC = "tfsmith.bazelrc"  # copied to the TF workspace as .bazelrc.user
MANIFEST = "manifest.json"  # the whole plan, build-machine settings included
SPEC = "spec.json"  # the image spec alone; baked into the image at /etc/tfsmith/spec.json
GUARD = "tfsmith-guard"
WHEELS_DIR = "wheels"
DOCKERIGNORE = ".dockerignore"


def dockerfile_string(value: str) -> str:
    """Escape a value for a double-quoted Dockerfile string (LABEL): backslash, quote and `$` expansion.

    Values reaching here are single-line already (plan validation); a newline is refused, not escaped.
    """
    if any(ch in value for ch in "\n\r\0"):
        raise InputError(f"multi-line value refused in a Dockerfile: {value[:40]!r}")
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The Jinja2 environment for build templates (`templates/image/`), strict and compact.

    Cached: compiled templates are reused across renders in one process."""
    env = template_environment("image")
    env.filters["dockerfile_string"] = dockerfile_string
    return env


def _context_vars(plan: BuildPlan) -> dict[str, object]:
    return {
        "plan": plan,
        "labels": sorted(plan.labels().items()),
        "ca_secret_id": CA_SECRET_ID,
        "llvm_prefix": LLVM_PREFIX,
        "wheel_target": WHEEL_TARGET,
        "wheel_output_dir": WHEEL_OUTPUT_DIR,
        "cache_id": f"tfsmith-bazel-{plan.toolchain.tf_version}-{plan.target.arch}",
        "bazelrc_name": BAZELRC,
        "guard_name": GUARD,
        "spec_name": SPEC,
        "wheels_dir": WHEELS_DIR,
    }


def render_dockerfile(plan: BuildPlan) -> str:
    """The Dockerfile text for a plan (what `tfsmith render --print` shows)."""
    return environment().get_template("Dockerfile.j2").render(**_context_vars(plan))


def render_bazelrc(plan: BuildPlan) -> str:
    """The build-machine bazel options (parallelism, host-tool copts, caches)."""
    return environment().get_template("bazelrc.j2").render(**_context_vars(plan))


def spec_json(plan: BuildPlan) -> str:
    return json.dumps({"spec": plan.spec(), "spec_digest": plan.spec_digest}, indent=2, sort_keys=True) + "\n"


def context_files(plan: BuildPlan) -> dict[str, str]:
    """Every text file of the context, name -> content (the guard and a prebuilt wheel are copied)."""
    files = {
        DOCKERFILE: render_dockerfile(plan),
        MANIFEST: plan.to_json(),
        SPEC: spec_json(plan),
        DOCKERIGNORE: "# the context holds only what the Dockerfile uses\n",
    }
    if not plan.from_wheel:
        files[BAZELRC] = render_bazelrc(plan)
    return files


def is_context(path: Path) -> bool:
    """A folder tfsmith wrote (it has our manifest), safe to replace."""
    manifest = path / MANIFEST
    if not manifest.is_file():
        return False
    try:
        return "spec_digest" in json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False


def _refuse_clobber(out_dir: Path) -> None:
    if out_dir.is_symlink() or (out_dir.exists() and not out_dir.is_dir()):
        raise InputError(f"{out_dir} exists and is not a folder; choose another --out")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not is_context(out_dir):
        raise InputError(f"{out_dir} is not empty and is not a tfsmith build context; refusing to overwrite it")


def _write_tree(plan: BuildPlan, into: Path) -> None:
    for name, text in context_files(plan).items():
        (into / name).write_text(text, encoding="utf-8")
    guard = into / GUARD
    shutil.copyfile(GUARD_SOURCE, guard)
    guard.chmod(0o755)
    if plan.options.wheel is not None:
        wheel = Path(plan.options.wheel)
        if not wheel.is_file():
            raise InputError(f"wheel not found: {wheel}")
        (into / WHEELS_DIR).mkdir()
        target = into / WHEELS_DIR / wheel.name
        try:
            os.link(wheel, target)  # same file system: no copy of a ~250 MB wheel
        except OSError:
            shutil.copyfile(wheel, target)
    for path in sorted(into.rglob("*")):  # a deterministic tree: same bytes, same modes, any umask
        if path.is_dir():
            path.chmod(0o755)
        elif path.name != GUARD:
            path.chmod(0o644)


def render_context(plan: BuildPlan, out_dir: Path) -> Path:
    """Write the build context for `plan` to out_dir (atomically); returns out_dir.

    Refuses to replace a non-empty folder that is not a tfsmith context.
    """
    out_dir = Path(out_dir).absolute()
    _refuse_clobber(out_dir)
    with staged_dir(out_dir) as tmp:
        _write_tree(plan, tmp)
    return out_dir


def render_set(plans: Iterable[tuple[str, BuildPlan]], out_dir: Path) -> list[Path]:
    """Render several named contexts under one folder (the canonical `dockerfiles/` set), atomically.

    The whole set is built in a temp folder first and then swapped in, so a folder never mixes old and new
    contexts; names no longer in the set disappear with the old folder.
    """
    out_dir = Path(out_dir).absolute()
    if out_dir.is_symlink() or (out_dir.exists() and not out_dir.is_dir()):
        raise InputError(f"{out_dir} exists and is not a folder; choose another --out")
    if out_dir.is_dir():
        strangers = [p.name for p in out_dir.iterdir() if not (p.is_dir() and is_context(p)) and p.name != "README.md"]
        if strangers:
            raise InputError(f"{out_dir} holds files that are not tfsmith contexts ({strangers[0]}); refusing")
    written: list[str] = []
    with staged_dir(out_dir) as tmp:
        for name, plan in plans:
            if "/" in name or name.startswith(".") or name in written:
                raise InputError(f"bad or duplicate context name {name!r}")
            (tmp / name).mkdir()
            _write_tree(plan, tmp / name)
            written.append(name)
        (tmp / "README.md").write_text(_set_readme(written), encoding="utf-8")
        (tmp / "README.md").chmod(0o644)
    return [out_dir / name for name in written]


def _set_readme(names: list[str]) -> str:
    lines = [
        "# Canonical build contexts",
        "",
        "Generated by `tfsmith dockerfiles --out dockerfiles` (`make dockerfiles`); never edit by hand.",
        "A test fails when they are stale. Each folder is a complete BuildKit context:",
        "",
        *(f"- `{name}/`" for name in names),
        "",
        "They are rendered for a fixed reference build machine (see `manifest.json`: `build.machine`), not",
        "for the host that regenerated them; `tfsmith render` sizes bazel for the machine you build on.",
        "",
    ]
    return "\n".join(lines)
