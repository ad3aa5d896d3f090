"""`tfsmith package` names the server's counts as the server does, and still takes the older spellings."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from builder.cli import build_app


@pytest.mark.parametrize("processes, interpreters", [("--model-processes", "--interpreters"),
                                                     ("--processes", "--workers")])
def test_both_spellings_reach_the_same_option(processes: str, interpreters: str) -> None:
    # the value is checked before the artifact is looked at: the refusal names the one option, by its new name
    result = CliRunner().invoke(build_app(), ["package", "/nonexistent-artifact", processes, "x"])
    assert str(result.exception) == "--model-processes: expected a whole number or auto, got 'x'"
    result = CliRunner().invoke(build_app(), ["package", "/nonexistent-artifact", interpreters, "y"])
    assert str(result.exception) == "--interpreters: expected a whole number or auto, got 'y'"
