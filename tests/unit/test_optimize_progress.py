"""Long steps say when they start in a log too (stderr not a terminal), where a rich spinner draws nothing."""

from __future__ import annotations

import io

from rich.console import Console

from builder.optimize.options import stage
from builder.optimize.progress import announce, step_say


def test_in_a_log_each_step_prints_a_line_when_it_starts() -> None:
    sink = io.StringIO()
    console = Console(file=sink, width=200)
    assert not console.is_terminal
    with console.status("tfsmith optimize") as status:
        say = step_say(console, status)
        with stage(say, "timing 6 artifact x runtime pairs (20 s, interleaved)"):
            started = sink.getvalue()
    assert "timing 6 artifact x runtime pairs (20 s, interleaved)" in started  # before the step ended
    assert "✓ timing 6 artifact x runtime pairs" in sink.getvalue()


def test_on_a_terminal_the_spinner_shows_the_step_and_no_extra_line_is_printed() -> None:
    sink = io.StringIO()
    console = Console(file=sink, force_terminal=True, width=200)

    class Status:
        text = ""

        def update(self, text: str) -> None:
            self.text = text

    status = Status()
    announce(console, status, "loading litert-int8")
    assert status.text == "loading litert-int8" and sink.getvalue() == ""
