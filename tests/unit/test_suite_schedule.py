"""The suite's own schedule (tests/conftest.py): every unit it names exists, so a renamed file or test cannot
silently fall back to running in its file's unit, at the end of the queue."""

from __future__ import annotations

import ast

from tests import conftest


def _test_names(path: str) -> list[str]:
    tree = ast.parse((conftest.REPO / path).read_text(encoding="utf-8"))
    return [node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")]


def test_every_group_takes_at_least_one_test_out_of_its_file() -> None:
    for (path, prefix), unit in conftest.GROUPS.items():
        names = [name for name in _test_names(path) if name.startswith(prefix)]
        assert names, f"{unit}: no test in {path} starts with {prefix}"
        assert all(conftest.unit_of(path, name) == unit for name in names)


def test_every_unit_started_first_is_a_file_or_a_group() -> None:
    groups = set(conftest.GROUPS.values())
    for unit in conftest.FIRST:
        assert unit in groups or (conftest.REPO / unit).is_file(), unit


def test_first_units_go_out_before_the_rest_and_unit_tests_last() -> None:
    ranks = [conftest.rank(unit) for unit in (*conftest.FIRST, "tests/e2e/test_serve.py", conftest.LATE[0],
                                              "tests/unit/test_guard.py")]
    assert ranks == sorted(ranks) and len(set(ranks)) == len(ranks)


def test_a_parametrized_test_stays_in_its_group() -> None:
    path, prefix = next(iter(conftest.GROUPS))
    assert conftest.unit_of(path, f"{prefix}x[max]") == conftest.GROUPS[(path, prefix)]
    assert conftest.unit_of(path, "test_something_else") == path


def test_the_summary_names_each_worker_and_the_longest_unit_first() -> None:
    lines = conftest.time_summary({"a.py": 10.0, "b": 70.0}, {"gw0": 60.0, "gw1": 20.0}, {"a.py": "gw1", "b": "gw0"})
    assert lines[0] == "each worker's time in tests: gw0 1.0 min, gw1 0.3 min"
    assert lines[1].split() == ["70.0s", "gw0", "b"] and lines[2].split() == ["10.0s", "gw1", "a.py"]


def test_the_summary_says_when_each_worker_ran_dry_and_what_it_ran_last() -> None:
    lines = conftest.time_summary({"a.py": 10.0, "b": 70.0}, {"gw0": 60.0, "gw1": 20.0}, {"a.py": "gw1", "b": "gw0"},
                                  spans={"gw0": (1000.0, 1072.0), "gw1": (1003.0, 1030.0)}, last={"gw0": "b", "gw1": "a.py"})
    assert lines[0] == "each worker's time in tests: gw0 1.0 min (done at 1.2 min, last b), gw1 0.3 min (done at 0.5 min, last a.py)"
