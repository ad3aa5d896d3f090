"""One at a time across the suite's worker processes (pytest-xdist runs test files in two processes at once).

What several test files prepare the same way on this machine — the TensorFlow image every `tensorflow` serving
kind is built FROM, the Docker engine's base images, QEMU's registration, the wheel cache — is prepared under a
file lock, so the second worker waits and then finds it ready instead of building it again beside the first
(two `docker build`s of one spec, two `pip download`s into one cache file).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

def _engine_key(host: str) -> str:
    """A folder name for the engine DOCKER_HOST names ("" for the default socket): what one engine holds is
    prepared once for it, and two engines on one machine (a second one to measure a cold run) do not wait on
    each other."""
    return "".join(c if c.isalnum() else "-" for c in host).strip("-")


_KEY = _engine_key(os.environ.get("DOCKER_HOST", ""))
LOCKS = Path(tempfile.gettempdir()) / ("tfsmith-test-locks" + (f"-{_KEY}" if _KEY else ""))


@contextlib.contextmanager
def one_at_a_time(name: str, folder: Path = LOCKS, *, shared: bool = False) -> Iterator[None]:
    """Hold the lock `name` in `folder` (machine-wide by default; a test run's own folder for what that run
    makes), released when the block ends or the process dies. `shared` holders run beside each other and wait
    only for an exclusive holder (readers and a writer)."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / f"{name}.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
