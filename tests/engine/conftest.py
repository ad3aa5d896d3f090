"""Engine tests run against a real Docker engine, brought up by the suite itself when none runs.

The engine and a local Python base image (debootstrap, no registry) are prepared once per session.
Every test in this folder is marked `engine`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.engine.local import DEFAULT_BASE_IMAGE, ensure_base_image, ensure_engine


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.engine)


@pytest.fixture(scope="session")
def docker_engine() -> None:
    """A Docker daemon answering on /var/run/docker.sock."""
    ensure_engine(say=print)


@pytest.fixture(scope="session")
def base_image(docker_engine: None) -> str:
    """Tag of a local Debian bookworm image with python3 (3.11) and venv."""
    return ensure_base_image(DEFAULT_BASE_IMAGE, say=print)
