"""One settings path: every command that plans reads flags > TFSMITH_* environment > tfsmith.toml > defaults
the same way, so `render`, `build` and `target` agree on what a project's file asks for."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from builder.cli import app
from builder.errors import InputError

FILE = """
[build]
target = "icelake"
cuda_cc = "8.0"
python = "3.11"
ca_bundle = "none"
"""


@pytest.fixture()
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for name in [n for n in os.environ if n.startswith("TFSMITH_")]:
        monkeypatch.delenv(name)
    (tmp_path / "tfsmith.toml").write_text(FILE)
    return tmp_path


def _render_plan(runner: CliRunner, *args: str) -> dict:
    result = runner.invoke(app, ["render", "--dry-run", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_render_build_and_target_plan_the_same_target_from_the_file(project: Path) -> None:
    runner = CliRunner()
    plan = _render_plan(runner)
    assert plan["spec"]["target"]["name"] == "icelake"
    assert plan["spec"]["cuda"]["capabilities"] == ["8.0"] and plan["spec"]["python"] == "3.11"
    built = runner.invoke(app, ["build", "--dry-run"])
    assert built.exit_code == 0, built.output
    assert f"spec    {plan['spec_digest']}" in built.output  # the same image, digest for digest
    target = runner.invoke(app, ["target", "--json"])
    assert target.exit_code == 0, target.output
    assert json.loads(target.stdout)["name"] == "icelake"


def test_flags_beat_environment_beat_file_for_render(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    monkeypatch.setenv("TFSMITH_TARGET", "x86-64-v4")
    assert _render_plan(runner)["spec"]["target"]["name"] == "x86-64-v4"
    assert _render_plan(runner, "--target", "x86-64-v3")["spec"]["target"]["name"] == "x86-64-v3"


def test_an_images_guard_variables_do_not_change_the_plan(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside a built image TFSMITH_IMAGE_TARGET is set; tfsmith must still plan what the user asked."""
    runner = CliRunner()
    monkeypatch.setenv("TFSMITH_IMAGE_TARGET", "sapphirerapids")
    monkeypatch.setenv("TFSMITH_IMAGE_CUDA_CC", "9.0")
    plan = _render_plan(runner)
    assert plan["spec"]["target"]["name"] == "icelake" and plan["spec"]["cuda"]["capabilities"] == ["8.0"]


def test_a_typo_in_the_file_stops_render_too(project: Path) -> None:
    (project / "tfsmith.toml").write_text('[build]\ntraget = "icelake"\n')
    result = CliRunner().invoke(app, ["render", "--dry-run"])
    assert isinstance(result.exception, InputError) and "did you mean 'target'" in str(result.exception)
