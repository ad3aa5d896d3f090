"""Progress lines for long steps, on a terminal and in a log alike.

On a terminal a rich status spinner shows the step that is running. Where stderr is not a terminal (CI, `make`
piped to a file, `2> log`) rich draws nothing, so a step that takes minutes would leave the log silent: there
each step prints one plain line when it starts.
"""

from __future__ import annotations

from typing import Any

from builder.say import Say


def announce(console: Any, status: Any, text: str) -> None:
    """A step starts: the spinner's text on a terminal, one line otherwise (`console`: a rich Console)."""
    status.update(text)
    if not console.is_terminal:
        console.print(text, markup=False, highlight=False)


def step_say(console: Any, status: Any) -> Say:
    """optimize's `say`: "... <step>" starts a step (announced), "ok  <step> (<s> s)" ends it (always printed)."""

    def say(text: str) -> None:
        if text.startswith("ok  "):
            console.print(f"[green]✓[/green] {text[4:]}")
        else:
            announce(console, status, text[4:] if text.startswith("... ") else text)

    return say
