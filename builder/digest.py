"""Content digests of files and folders, read in blocks so a 600 MB wheel never sits in memory at once."""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes; of a folder (a SavedModel), `sha256_tree`."""
    if Path(path).is_dir():
        return sha256_tree(Path(path))
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256_tree(folder: Path) -> str:
    """Hex sha256 over a folder's files: each relative path (POSIX spelling, sorted) and its content's digest,
    so the same SavedModel copied anywhere has the same digest, and any changed byte or name changes it."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        digest.update(sha256_file(path).encode() + b"\n")
    return digest.hexdigest()
