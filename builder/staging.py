"""Write outputs so that nobody ever sees half of one: stage in a temporary sibling, rename when complete.

A rename within one file system is atomic, so readers see either the old file/folder or the new one, and
a failure (bad input, a full disk, Ctrl-C) leaves the destination exactly as it was and removes the
staging copy. The sibling lives in the destination's own folder because a rename across file systems is
a copy, not a rename.

    with staged_file(out / "report.json") as tmp:      # a file
        tmp.write_text(text)
    with staged_dir(out / "model") as tmp:             # a folder, replacing an old one if present
        (tmp / "model.tflite").write_bytes(data)
    write_text_atomic(path, text)                      # the one-liner for small text files
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["staged_dir", "staged_file", "write_bytes_atomic", "write_text_atomic"]


@contextmanager
def staged_file(dest: Path, *, mode: int = 0o644) -> Iterator[Path]:
    """Yield a temporary path next to `dest`; on normal exit it becomes `dest` (replacing it), else it goes.

    The temporary file exists (empty) when yielded; write it, or replace it with your own file of that name.
    `mode` is applied before the rename (mkstemp creates files readable by the owner only).
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    os.close(handle)
    tmp = Path(name)
    try:
        yield tmp
        tmp.chmod(mode)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def staged_dir(dest: Path, *, mode: int = 0o755, replace: bool = True) -> Iterator[Path]:
    """Yield an empty temporary folder next to `dest`; on normal exit it becomes `dest`, else it goes.

    An existing `dest` is replaced when `replace` is true (moved aside, the new folder renamed in, the old
    one deleted: the window without `dest` is two renames long); with replace=False an existing `dest` is
    a FileExistsError before anything is written. Checking that `dest` may be replaced (is it ours?) is
    the caller's job, before entering.
    """
    dest = Path(dest)
    if dest.exists() and not replace:
        raise FileExistsError(f"{dest} exists")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    try:
        yield tmp
        tmp.chmod(mode)
        _move_into_place(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _move_into_place(tmp: Path, dest: Path) -> None:
    if not (dest.exists() or dest.is_symlink()):
        os.replace(tmp, dest)
        return
    if dest.is_symlink() or not dest.is_dir():
        raise FileExistsError(f"{dest} exists and is not a folder")
    trash = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".old", dir=dest.parent))
    os.replace(dest, trash / "old")
    try:
        os.replace(tmp, dest)
    except BaseException:
        os.replace(trash / "old", dest)  # put the old one back: never leave no destination at all
        shutil.rmtree(trash, ignore_errors=True)
        raise
    shutil.rmtree(trash, ignore_errors=True)


def write_bytes_atomic(dest: Path, data: bytes, *, mode: int = 0o644) -> Path:
    """Write `data` to `dest` through a staged file; returns `dest`."""
    with staged_file(dest, mode=mode) as tmp:
        tmp.write_bytes(data)
    return Path(dest)


def write_text_atomic(dest: Path, text: str, *, mode: int = 0o644) -> Path:
    """Write UTF-8 `text` to `dest` through a staged file; returns `dest`."""
    return write_bytes_atomic(dest, text.encode("utf-8"), mode=mode)
