"""Suite-wide fixtures: where recorded facts live, how tests reach the CLI, and how the run is split across
worker processes (and says where its time went)."""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"


#: Where tests that start `tfsmith serve` write its output (`server_logs`).
SERVER_LOGS = "TFSMITH_TEST_SERVER_LOGS"


@pytest.fixture(scope="session", autouse=True)
def server_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of pytest's own temporary tree for the servers' output: kept for the last few runs (to read
    after a failure) and then removed by pytest, where the temporary directory itself would gather them."""
    logs = tmp_path_factory.mktemp("server-logs")
    os.environ[SERVER_LOGS] = str(logs)
    return logs


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


#: Work units started first, longest first, as a cold run on a 2-core machine timed them (no images, no build
#: cache; setup + call + teardown): the zoo served and packaged (~370 s); the arm64 base made under emulation and
#: the guard proofs on it (~200 s); the arm64 TensorFlow image and the serving image FROM it (~150 s, its Python
#: packages installed by this machine's pip, its server started under emulation); then every unit of a minute
#: or more, so that what is left for the end is short and the two workers of `make test` finish together.
#: A unit is a test file, or a group of tests sharing one image (`GROUPS`); whichever worker is free takes the
#: next. test_optimize_zoo reads the zoo runs test_zoo_serving makes: shared under locks (tests/zoo_runs.py), so
#: started beside it, each worker makes the runs the other has not begun. (With plain `--dist loadfile`,
#: pytest-xdist hands files out most-tests-first, whatever this order says.)
FIRST = (
    "tests/e2e/test_zoo_serving.py",
    "tests/engine/test_arm64.py",
    "arm64-tensorflow-serving",
    "tests/e2e/test_optimize_zoo.py",
    "tests/e2e/test_optimize_memory.py",
    "tests/engine/test_bench_served_images.py",
    "tests/e2e/test_optimize.py",
    "tests/e2e/test_wheel_install.py",
    "tests/engine/test_package_tensorflow.py",
    "tests/e2e/test_model_generator.py",
    "tests/e2e/test_user_models.py",
    "tests/e2e/test_serve_tensorflow.py",
    "arm64-litert-serving",
    "tests/e2e/test_bench.py",
    "tests/e2e/test_variable_length.py",
    "tests/e2e/test_optimize_first_contact.py",
    "tests/e2e/test_optimize_unseen_kinds.py",
    "arm64-cli-build",
    "tests/engine/test_multiarch.py",
)
#: Started after the rest of tests/e2e and tests/engine: it reads the zoo runs test_zoo_serving makes (a worker
#: asking for one while the other makes it waits on its lock), and the unit tests fill in behind it.
LATE = ("tests/e2e/test_zoo.py",)
#: Tests taken out of their file's unit into a unit of their own: (file, test name prefix) -> unit. Each names
#: one image (or chain of images) its tests alone need, so the slow emulated builds do not queue in one worker.
GROUPS = {
    ("tests/engine/test_arm64.py", "test_cli_builds_"): "arm64-cli-build",
    ("tests/engine/test_package_arm64.py", "test_an_arm64_litert_"): "arm64-litert-serving",
    ("tests/engine/test_package_arm64.py", "test_an_arm64_serving_"): "arm64-tensorflow-serving",
}


def _path(item: pytest.Item) -> str:
    return Path(str(item.fspath)).relative_to(REPO).as_posix()


def unit_of(path: str, name: str) -> str:
    """The work unit a test belongs to: its file, unless `GROUPS` gives it one of its own."""
    for (file, prefix), unit in GROUPS.items():
        if path == file and name.startswith(prefix):
            return unit
    return path


def rank(unit: str) -> tuple[int, int]:
    """Where a unit goes in the run: FIRST in its order, the other end-to-end and engine files, LATE, unit tests."""
    if unit in FIRST:
        return (0, FIRST.index(unit))
    return (3, 0) if unit.startswith("tests/unit/") else (2, 0) if unit in LATE else (1, 0)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The run's order (the scheduler below hands out units in it): by `rank`, each file's own order within."""
    items.sort(key=lambda item: rank(unit_of(_path(item), item.name)))  # stable


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """With `--dist loadscope`, a unit (`unit_of`) is what one worker runs whole: a file, or a group of its tests
    sharing an image. (pytest-xdist's own `xdist_group` marks no longer reach its scheduler under pytest 9, which
    keeps node ids where xdist's worker no longer rewrites them.) `make test` adds `--no-loadscope-reorder`, so
    units go out in the collected order above rather than most-tests-first."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path, _, name = nodeid.partition("::")
            return unit_of(path, name)

        def _assign_work_unit(self, node: Any) -> None:
            """A worker still busy (xdist sends a worker more before it runs dry: it needs the next test to
            know what to tear down) gets the last unit queued, a short one, as its lookahead; the next long unit
            waits for whichever worker frees first instead of queueing behind a long unit of one test."""
            if self._pending_of(self.assigned_work.get(node, {})) > 0 and len(self.workqueue) > 1:
                self.workqueue.move_to_end(next(reversed(self.workqueue)), last=False)
            super()._assign_work_unit(node)

    return UnitScheduling(config, log)


# --- where the time went --------------------------------------------------------------------------------
_SPENT: dict[str, float] = defaultdict(float)  # unit -> seconds (setup + call + teardown)
_WORKER: dict[str, float] = defaultdict(float)  # worker -> seconds
_UNIT_WORKER: dict[str, str] = {}
_SPAN: dict[str, tuple[float, float]] = {}  # worker -> (its first test's start, its last test's end), epoch seconds
_LAST: dict[str, str] = {}  # worker -> the unit of the last test it ended


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add each phase's duration to its unit and worker (in the controller when xdist runs the suite)."""
    path, _, name = report.nodeid.partition("::")
    unit = unit_of(path, name)
    worker = getattr(getattr(report, "node", None), "gateway", None)
    worker_id = worker.id if worker is not None else "main"
    _SPENT[unit] += report.duration
    _WORKER[worker_id] += report.duration
    _UNIT_WORKER[unit] = worker_id
    start, stop = getattr(report, "start", None), getattr(report, "stop", None)
    if isinstance(start, float) and isinstance(stop, float):
        first, last = _SPAN.get(worker_id, (start, stop))
        _SPAN[worker_id] = (min(first, start), max(last, stop))
        if stop >= last:
            _LAST[worker_id] = unit


def time_summary(
    spent: dict[str, float],
    workers: dict[str, float],
    where: dict[str, str],
    top: int = 15,
    spans: dict[str, tuple[float, float]] | None = None,
    last: dict[str, str] | None = None,
) -> list[str]:
    """The lines `make test` ends with: each worker's busy time (and, with `spans`, when it ran dry counted
    from the run's first test, and its last unit: a worker done long before the other shows a long unit left
    to the end), then the units that took longest."""
    begun = min((first for first, _ in (spans or {}).values()), default=0.0)

    def worker(name: str, seconds: float) -> str:
        text = f"{name} {seconds / 60:.1f} min"
        if spans and name in spans:
            text += f" (done at {(spans[name][1] - begun) / 60:.1f} min, last {(last or {}).get(name, '?')})"
        return text

    lines = ["each worker's time in tests: " + ", ".join(worker(w, s) for w, s in sorted(workers.items()))]
    for unit, seconds in sorted(spent.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"{seconds:8.1f}s  {where.get(unit, '?'):>4}  {unit}")
    return lines


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _SPENT or hasattr(terminalreporter.config, "workerinput"):
        return
    terminalreporter.section("where the time went (setup + call + teardown, by file or image group)")
    for line in time_summary(_SPENT, _WORKER, _UNIT_WORKER, spans=_SPAN, last=_LAST):
        terminalreporter.write_line(line)
