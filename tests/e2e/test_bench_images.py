"""`tfsmith bench --images A,B` against the real engine, cheaply: an image that cannot run the bench (the
bare Python base image has no numpy/TensorFlow) and one that does not exist locally are both REPORTED with
their reasons, nothing is pulled, and no ratio is invented. The success path (two TensorFlow images) costs
minutes of image builds, so it is exercised by hand, not here; how a successful run is asked of the
Engine (alternating, offline, read-only mounts) is checked on the fake engine in tests/unit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from builder.bench.images import compare_images

pytestmark = pytest.mark.engine

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def base_image() -> str:
    from builder.engine.local import DEFAULT_BASE_IMAGE, ensure_base_image, ensure_engine
    from tests.locks import one_at_a_time

    with one_at_a_time("docker-engine"):
        ensure_engine()
    with one_at_a_time("base-image"):
        return ensure_base_image(DEFAULT_BASE_IMAGE)


@pytest.fixture()
def saved_model_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "out" / "artifacts" / "saved_model"
    folder.mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(b"")
    return tmp_path / "out"


def test_images_that_cannot_run_the_bench_are_reported(base_image: str, saved_model_dir: Path) -> None:
    absent = "tfsmith-test-bench/absent:none"
    comparison = compare_images(saved_model_dir, base_image, absent, threads=1, batch=2, budget_s=1)
    assert comparison.ratio is None
    assert "No module named" in comparison.first.error  # the inner bench started, then found no numpy
    assert comparison.second.error.startswith(f"no image {absent} to run")  # and never pulled
    assert not comparison.first.runs and not comparison.second.runs
    assert "could not run the bench" in comparison.summary()


def test_images_cli_writes_images_json(base_image: str, saved_model_dir: Path, tmp_path: Path) -> None:
    tfsmith = REPO / ".venv" / "bin" / "tfsmith"
    command = [str(tfsmith)] if tfsmith.exists() else [sys.executable, "-m", "builder.cli"]
    done = subprocess.run([*command, "bench", str(saved_model_dir), "--images",
                           f"{base_image},tfsmith-test-bench/absent:none", "--images-path", "inprocess", "--budget-s", "1",
                           "--out", str(tmp_path / "report")],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    data = json.loads((tmp_path / "report" / "images.json").read_text())
    assert data["ratio_b_over_a"] is None and data["first"]["image"] == base_image and data["second"]["error"]
