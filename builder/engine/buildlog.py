"""Reading BuildKit's plain progress output: which step runs now, which one failed, its last lines.

`docker build --progress=plain` prints every vertex as `#N [stage i/n] INSTRUCTION`, then `#N <seconds>
<output>` lines, then `#N DONE`, `#N CACHED` or `#N ERROR: ...`. Steps interleave when stages run in
parallel, so lines are grouped by vertex number. Pure: fed one line at a time, no I/O.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field

_VERTEX = re.compile(r"^#(\d+) (.*)$")
_TIMED = re.compile(r"^\d+\.\d+ (.*)$")
_WORK = re.compile(r"^\[[^\]]*\d+/\d+\] (RUN|COPY|ADD)\b")
_STATUS = re.compile(r"^(DONE|CACHED|ERROR)\b:? ?(.*)$")


@dataclass
class Step:
    """One BuildKit vertex: its title (`[build 3/5] RUN bazel build ...`) and its recent output."""

    number: int
    title: str
    lines: deque[str] = field(default_factory=lambda: deque(maxlen=200))
    state: str = "running"  # running | done | cached | error
    error: str = ""


class StepTracker:
    """Follows a plain-progress stream; tells the current step and, after a failure, the failing one."""

    def __init__(self) -> None:
        self.steps: dict[int, Step] = {}
        self.current: Step | None = None
        self.trailer: list[str] = []  # lines outside any vertex (the final `error: ...` summary)

    def feed(self, line: str) -> None:
        line = line.rstrip("\r\n")
        match = _VERTEX.match(line)
        if not match:
            if line.strip() and line.strip() != "------":
                self.trailer.append(line)
            return
        number, rest = int(match.group(1)), match.group(2)
        step = self.steps.get(number)
        if step is None:
            step = self.steps[number] = Step(number, rest)
            self.current = step
            return
        status = _STATUS.match(rest)
        if status:
            kind, detail = status.group(1), status.group(2)
            step.state = {"DONE": "done", "CACHED": "cached", "ERROR": "error"}[kind]
            if kind == "ERROR":
                step.error = detail
            return
        if rest.startswith("sha256:"):
            return
        timed = _TIMED.match(rest)
        step.lines.append(timed.group(1) if timed else rest)

    @property
    def user_steps(self) -> list[Step]:
        """Steps of the Dockerfile itself (not BuildKit's internal context/metadata loads)."""
        return [s for s in self.steps.values() if not s.title.startswith("[internal]")]

    @property
    def cached_all(self) -> bool:
        """True when every Dockerfile step that ran came from cache (nothing was rebuilt)."""
        runs = [s for s in self.user_steps if _WORK.match(s.title)]
        return all(s.state == "cached" for s in runs)

    def failed_step(self) -> Step | None:
        errors = [s for s in self.steps.values() if s.state == "error"]
        return errors[-1] if errors else None

    def failure_summary(self, tail: int = 25) -> tuple[str, tuple[str, ...]]:
        """(one-line reason, the failing step's last lines) for a build that exited non-zero."""
        step = self.failed_step()
        if step is not None:
            reason = f"{step.title}: {step.error}" if step.error else step.title
            return reason, tuple(list(step.lines)[-tail:])
        last = [line for line in self.trailer if line.strip()]
        reason = last[-1] if last else "docker build exited non-zero"
        return reason, tuple(last[-tail:])
