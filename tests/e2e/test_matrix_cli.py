"""`tfsmith matrix` output drives `tfsmith build --only ID`, as a CI pipeline uses it (dry runs: no engine)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from builder.cli import app

REPO = Path(__file__).resolve().parents[2]
TFSMITH = REPO / ".venv" / "bin" / "tfsmith"
FLEET = "x86-64-v3,x86-64-v4,sapphirerapids,neoverse_v1"


@pytest.fixture()
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.chdir(tmp_path)  # no tfsmith.toml / pyproject.toml from the repository
    for name in [n for n in os.environ if n.startswith("TFSMITH_")]:
        monkeypatch.delenv(name)
    return CliRunner()


def _dry_run(runner: CliRunner, entry_id: str) -> str:
    result = runner.invoke(app, ["build", "--only", entry_id, "--dry-run"])
    assert result.exit_code == 0, result.output
    return result.output


def test_github_matrix_round_trips_through_only(runner: CliRunner) -> None:
    result = runner.invoke(app, ["matrix", "--targets", FLEET, "--cuda-cc", "8.0,9.0", "--format", "github"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["include"]
    assert len(rows) == 7
    for row in rows:
        output = _dry_run(runner, row["id"])
        image = next(line.split()[1] for line in output.splitlines() if line.startswith("image"))
        token = row["target"] + ("-cu12.5-" + "-".join("cc" + c.replace(".", "") for c in row["cuda_cc"].split(","))
                                 if row["cuda_cc"] else "-cpu")
        assert token in image, (row, image)


def test_gitlab_child_pipeline_scripts_run(runner: CliRunner) -> None:
    result = runner.invoke(app, ["matrix", "--targets", "x86-64-v3,neoverse_v1", "--format", "gitlab"])
    assert result.exit_code == 0, result.output
    pipeline = yaml.safe_load(result.stdout)
    scripts = [job["script"][0] for name, job in pipeline.items() if name.startswith("build:")]
    assert len(scripts) == 2
    for script in scripts:
        argv = shlex.split(script)
        assert argv[:3] == ["tfsmith", "build", "--only"]
        assert "stages  toolchain -> source -> build -> wheel -> packages -> runtime" in _dry_run(runner, argv[3])


def test_matrix_targets_come_from_the_config_file(runner: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "tfsmith.toml").write_text('[matrix]\ntargets = ["icelake", "zen4"]\n')
    rows = json.loads(runner.invoke(app, ["matrix", "--format", "json"]).stdout)
    assert [row["id"] for row in rows] == ["icelake-cpu", "zen4-cpu"]


def test_bad_only_id_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(TFSMITH), "build", "--only", "not-an-id", "--dry-run"], cwd=tmp_path, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.startswith("tfsmith: error: --only: 'not-an-id' is not a matrix id")
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_unknown_config_key_is_one_line_naming_it(tmp_path: Path) -> None:
    (tmp_path / "tfsmith.toml").write_text('[build]\nbase_imgae = "x"\n')
    result = subprocess.run(
        [str(TFSMITH), "build", "--dry-run"], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 2
    assert "unknown key in tfsmith.toml [build] 'base_imgae' (did you mean 'base_image'?)" in result.stderr


@pytest.mark.parametrize("targets", ["nope", "x86-64-v3,zen44"])
def test_unknown_matrix_target_is_refused_with_the_closest_names(tmp_path: Path, targets: str) -> None:
    result = subprocess.run(
        [str(TFSMITH), "matrix", "--targets", targets], cwd=tmp_path, capture_output=True, text=True, timeout=120,
        check=False,
    )
    assert result.returncode == 2, result.stdout
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and "unknown target" in result.stderr and "Traceback" not in result.stderr
    if "zen44" in targets:
        assert "did you mean zen4" in result.stderr
