"""What the path benchmarks (`request_path`, `optimize_path`) share: a profile hook put into every Python process
they start, and their report on the terminal and as JSON."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def hook_path(folder: Path, hook: str, source: Path | str | None = None) -> str:
    """A PYTHONPATH that makes every Python process started with it import `hook` at start (as `sitecustomize`,
    written into `folder/hook`), then finds tfsmith in `source` (or wherever the current PYTHONPATH does)."""
    (folder / "hook").mkdir(exist_ok=True)
    (folder / "hook" / "sitecustomize.py").write_text(hook)
    rest = str(source) if source is not None else os.environ.get("PYTHONPATH")
    return os.pathsep.join(filter(None, [str(folder / "hook"), rest]))


@contextlib.contextmanager
def work_folder(prefix: str) -> Iterator[Path]:
    """A temporary folder for one measurement: removed when it succeeds, kept (its logs named in the error) when
    it fails."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def report(text: str, result: Any, json_path: Path | None) -> int:
    """Print the table; also write the counts as JSON when asked."""
    print(text)
    if json_path is not None:
        json_path.write_text(json.dumps(result, indent=2))
    return 0
