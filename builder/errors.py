"""User-facing errors.

Every problem a user can cause (bad flag, unknown target, missing file, unreachable engine) is raised as a
`TfsmithError`; the CLI prints its message as one line and exits non-zero, never with a traceback. Anything
else that escapes is a bug in tfsmith and keeps its traceback so it can be reported.
"""

from __future__ import annotations


class TfsmithError(Exception):
    """A problem the user can fix; `str(error)` is the whole message, one line."""

    exit_code: int = 2


class InputError(TfsmithError):
    """Bad input: a flag value, a file, a name that does not resolve."""


class IncompatibleError(TfsmithError):
    """A combination that cannot work (e.g. Blackwell GPUs with TF 2.21's CUDA 12.5)."""
