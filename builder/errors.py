"""User-facing errors.

Every problem a user can cause (bad flag, unknown target, missing file, unreachable engine) is raised as a
`TfsmithError`; the CLI prints its message as one line and exits non-zero, never with a traceback. Anything
else that escapes is a bug in tfsmith and keeps its traceback so it can be reported.
"""

from __future__ import annotations

#: Every exit code tfsmith uses, in one place (the README's table lists them). The preflight guard, which runs
#: alone inside images with the standard library only, repeats EXIT_USAGE and EXIT_CANNOT_RUN; a unit test keeps
#: the two equal.
EXIT_OK = 0
EXIT_STALE = 1  # `tfsmith dockerfiles --check`: the committed contexts differ from a fresh render
EXIT_USAGE = 2  # a problem the user can fix: a flag, a file, a name, an engine that is not there
EXIT_CANNOT_RUN = 3  # this CPU/GPU cannot run the target (check, target, the guard)
#: optimize: the chosen artifact failed the quality gate. The same code as EXIT_CANNOT_RUN on purpose: what was
#: asked for cannot be delivered as asked, and the input was fine (not EXIT_USAGE); scripts already test for 3.
EXIT_GATE_FAILED = EXIT_CANNOT_RUN
EXIT_SOURCE_UNREACHABLE = 4  # a from-source build cannot fetch TensorFlow (make build falls back on it)


class TfsmithError(Exception):
    """A problem the user can fix; `str(error)` is the whole message, one line."""

    exit_code: int = EXIT_USAGE


class InputError(TfsmithError):
    """Bad input: a flag value, a file, a name that does not resolve."""


class IncompatibleError(TfsmithError):
    """A combination that cannot work (e.g. Blackwell GPUs with TF 2.21's CUDA 12.5)."""


class SourceUnreachable(InputError):
    """A from-source build cannot fetch TensorFlow or its toolchain; its own exit code so scripts can tell it
    apart (`make build` falls back to the stock wheel on it)."""

    exit_code = EXIT_SOURCE_UNREACHABLE
