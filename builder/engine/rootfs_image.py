"""An image from a root filesystem, for any architecture, without a registry: a `docker load` archive.

Why not `docker import`: Docker 20.10's daemon stamps an imported image with its own architecture and
ignores `--platform`, so an arm64 root filesystem imported on an x86 host claims to be amd64, and BuildKit
then refuses it as the base of a `--platform linux/arm64` build (it looks for an arm64 image and tries to
pull one). `docker load` takes the image config as written, architecture included. The archive is the
format `docker save` writes: `manifest.json`, the config JSON named after its sha256, one layer tar.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

CHUNK = 1 << 20


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def image_config(diff_id: str, arch: str, cmd: Sequence[str], comment: str) -> dict[str, Any]:
    """The OCI/Docker image config of a one-layer image for `arch` (linux), running `cmd` by default."""
    created = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "architecture": arch,
        "os": "linux",
        "created": created,
        "config": {"Cmd": list(cmd), "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
        "history": [{"created": created, "comment": comment}],
    }


def write_archive(layer: Path, ref: str, arch: str, out: IO[bytes], *, cmd: Sequence[str] = ("/bin/bash",),
                  comment: str = "root filesystem made by debootstrap") -> str:
    """Write a `docker load` archive of one layer (an uncompressed tar of the root filesystem) to `out`,
    tagged `ref`; returns the config's sha256 (the image id the engine will report)."""
    config = json.dumps(image_config(file_sha256(layer), arch, cmd, comment), sort_keys=True).encode()
    config_id = hashlib.sha256(config).hexdigest()
    manifest = json.dumps([{"Config": f"{config_id}.json", "RepoTags": [ref], "Layers": ["layer.tar"]}]).encode()
    with tarfile.open(fileobj=out, mode="w|") as archive:
        for name, data in ((f"{config_id}.json", config), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        archive.add(str(layer), arcname="layer.tar")
    return f"sha256:{config_id}"
