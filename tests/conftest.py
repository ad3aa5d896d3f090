"""Suite-wide fixtures: where recorded facts live, and how tests reach the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


#: Test files started first: the longest (an arm64 image built and smoke-tested under emulation, the zoo served
#: and packaged), so that with two workers (`make test`) neither is left running alone at the end.
FIRST = ("tests/engine/test_package_arm64.py", "tests/e2e/test_zoo_serving.py")
#: Started after the rest of tests/e2e and tests/engine: they read the zoo runs test_zoo_serving makes (a worker
#: asking for one while the other makes it waits on its lock), and the unit tests fill in behind them.
LATE = ("tests/e2e/test_zoo.py", "tests/e2e/test_optimize_zoo.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The run's order (pytest-xdist hands out files in it): FIRST, the other end-to-end and engine files as
    collected, LATE, then tests/unit. Within a file, the order is the file's own."""

    def rank(item: pytest.Item) -> int:
        path = Path(str(item.fspath)).relative_to(REPO).as_posix()
        return 0 if path in FIRST else 3 if path.startswith("tests/unit/") else 2 if path in LATE else 1

    items.sort(key=rank)  # stable: everything else keeps its collected order
