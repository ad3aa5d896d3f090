"""Atomic placement of the whole output folder: built in a staging folder next to --out, then renamed.

(The serving SavedModel itself is written by `builder.optimize.model_io.export_keras`, with the contract's
signature.)
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from builder.errors import InputError

REPORT_NAME = "report.json"


def check_out_dir(out: Path) -> None:
    """Refuse an --out that holds something other than an earlier tfsmith optimize output (before any work)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / REPORT_NAME).is_file():
        raise InputError(f"--out {out}: folder is not empty and holds no earlier {REPORT_NAME}; "
                         "choose an empty or new folder")


def staging_dir(out: Path) -> Path:
    """A fresh temp folder next to --out (same filesystem, so the final rename is atomic)."""
    out = Path(out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{out.name}.tfsmith-", dir=out.parent))


def publish(staging: Path, out: Path) -> None:
    """Move the finished staging folder into place; an earlier output is replaced only after success."""
    out = Path(out).resolve()
    os.chmod(staging, 0o755)  # mkdtemp makes it private; the output is meant to be shared (images, servers)
    old = None
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        os.rmdir(old)
        os.replace(out, old)
    os.replace(staging, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
