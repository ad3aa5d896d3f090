"""arm64 emulation set-up: the probe program, binfmt entries, and what `ensure_emulation` does on a bare machine.

The probe is checked against the magic and mask Debian's qemu-user-static registers for arm64, so the kernel
hands it to QEMU exactly as it hands a container's arm64 programs. The set-up runs against a recorded bare
machine (a temporary binfmt_misc folder; apt-get, mount and update-binfmts recorded, not run).
"""

from __future__ import annotations

import hashlib
import io
import json
import struct
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import builder.engine.emulation as emulation
from builder.engine import local
from builder.engine.base import EngineUnavailable
from builder.engine.rootfs_image import write_archive

# /usr/share/binfmts/qemu-aarch64 (Debian bookworm qemu-user-static): what the kernel matches arm64 ELFs by.
DEBIAN_MAGIC = bytes.fromhex("7f454c460201010000000000000000000200b700")
DEBIAN_MASK = bytes.fromhex("ffffffffffffff00fffffffffffffffffeffffff")
ENTRY_TEXT = """enabled
interpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P
flags: PF
offset 0
magic 7f454c460201010000000000000000000200b700
mask ffffffffffffff00fffffffffffffffffeffffff
"""


def test_the_probe_is_an_arm64_executable_the_kernel_hands_to_qemu() -> None:
    probe = emulation.probe_binary()
    head = probe[: len(DEBIAN_MAGIC)]
    assert bytes(b & m for b, m in zip(head, DEBIAN_MASK)) == DEBIAN_MAGIC
    entry, phoff = struct.unpack_from("<QQ", probe, 24)
    p_type, p_flags, p_offset, p_vaddr, _, p_filesz = struct.unpack_from("<2I4Q", probe, phoff)
    assert (p_type, p_flags, p_offset, p_filesz) == (1, 5, 0, len(probe))  # one R+X segment: the whole file
    assert p_vaddr + 64 + 56 == entry  # execution starts at the first instruction after the headers
    first = struct.unpack_from("<I", probe, entry - p_vaddr)[0]
    assert first == 0xD2800000 | (emulation.PROBE_EXIT << 5)  # movz x0, #42


def test_binfmt_entries_are_read_as_the_kernel_writes_them() -> None:
    entry = emulation.parse_entry(ENTRY_TEXT)
    assert entry == emulation.BinfmtEntry(True, "/usr/libexec/qemu-binfmt/aarch64-binfmt-P", "PF")
    assert entry.fixed
    without_f = emulation.parse_entry(ENTRY_TEXT.replace("flags: PF", "flags: P").replace("enabled", "disabled"))
    assert not without_f.enabled and not without_f.fixed


@pytest.mark.parametrize(
    ("given", "docker"),
    [("x86_64", "amd64"), ("amd64", "amd64"), ("aarch64", "arm64"), ("linux/arm64", "arm64"), ("arm64", "arm64")],
)
def test_architecture_names_fold_to_dockers(given: str, docker: str) -> None:
    assert local.docker_arch(given) == docker


def test_an_unknown_architecture_is_refused_in_one_line() -> None:
    with pytest.raises(EngineUnavailable, match=r"^unknown architecture 'riscv64': tfsmith builds amd64 and arm64"):
        local.docker_arch("riscv64")


def test_the_base_image_tag_names_a_foreign_architecture(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "host_arch", lambda: "amd64")
    assert local.base_image_ref() == local.base_image_ref("amd64") == "tfsmith/python:bookworm"
    assert local.base_image_ref("arm64") == local.base_image_ref("aarch64") == "tfsmith/python:bookworm-arm64"
    monkeypatch.setattr(local, "host_arch", lambda: "arm64")
    assert local.base_image_ref("arm64") == "tfsmith/python:bookworm"


def test_the_load_archive_carries_the_architecture(tmp_path: Path) -> None:
    layer = tmp_path / "layer.tar"
    with tarfile.open(layer, "w") as tar:
        info = tarfile.TarInfo("etc/hostname")
        info.size = 4
        tar.addfile(info, io.BytesIO(b"box\n"))
    out = io.BytesIO()
    image_id = write_archive(layer, "tfsmith/python:bookworm-arm64", "arm64", out)
    out.seek(0)
    with tarfile.open(fileobj=out) as archive:
        names = archive.getnames()
        manifest = json.loads(archive.extractfile("manifest.json").read())  # type: ignore[union-attr]
        config = json.loads(archive.extractfile(manifest[0]["Config"]).read())  # type: ignore[union-attr]
    assert sorted(names) == sorted([manifest[0]["Config"], "manifest.json", "layer.tar"])
    assert manifest[0]["RepoTags"] == ["tfsmith/python:bookworm-arm64"]
    assert image_id == "sha256:" + manifest[0]["Config"].removesuffix(".json")
    assert (config["architecture"], config["os"]) == ("arm64", "linux")
    assert config["rootfs"]["diff_ids"] == [f"sha256:{hashlib.sha256(layer.read_bytes()).hexdigest()}"]


class _BareX86:
    """An x86 machine without QEMU: binfmt_misc unmounted until `mount`, entries appear on update-binfmts."""

    def __init__(self, root: Path, flags: str = "PF") -> None:
        self.root = root
        self.flags = flags
        self.installed: set[str] = set()
        self.calls: list[list[str]] = []

    def which(self, program: str) -> str | None:
        provides = {"qemu-user-static": "qemu-aarch64-static", "binfmt-support": "update-binfmts"}
        if program == "apt-get":
            return "/usr/bin/apt-get"
        return f"/usr/bin/{program}" if any(provides[p] == program for p in self.installed) else None

    def run(self, argv: list[str], **_: object) -> object:
        self.calls.append(list(argv))
        if argv[:2] == ["apt-get", "install"]:
            self.installed.update(a for a in argv[2:] if not a.startswith("-"))
        elif argv[0] == "mount":
            (self.root / "register").write_text("")
        elif argv[:2] == ["update-binfmts", "--enable"]:
            (self.root / argv[2]).write_text(ENTRY_TEXT.replace("flags: PF", f"flags: {self.flags}"))

        class Done:
            returncode = 0
            stdout = stderr = ""

        return Done()


@pytest.fixture()
def bare(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[_BareX86]:
    machine = _BareX86(tmp_path)
    monkeypatch.setattr(emulation, "BINFMT_DIR", tmp_path)
    monkeypatch.setattr(local.shutil, "which", machine.which)
    monkeypatch.setattr(local.subprocess, "run", machine.run)
    monkeypatch.setattr(local.os, "geteuid", lambda: 0)
    monkeypatch.setattr(local, "host_arch", lambda: "amd64")
    monkeypatch.setattr(local, "_probe_runs", lambda: (tmp_path / "qemu-aarch64").exists())
    local._apt_update.cache_clear()
    yield machine
    local._apt_update.cache_clear()


def test_a_bare_machine_gets_qemu_binfmt_mounted_and_the_entry_enabled(bare: _BareX86) -> None:
    said: list[str] = []
    local.ensure_emulation("arm64", say=said.append)
    assert bare.calls == [
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", "qemu-user-static", "binfmt-support"],
        ["mount", "-t", "binfmt_misc", "binfmt_misc", str(bare.root)],
        ["update-binfmts", "--enable", "qemu-aarch64"],
    ]
    assert said[-1] == "arm64 emulation ready (/usr/libexec/qemu-binfmt/aarch64-binfmt-P, flags PF)"
    bare.calls.clear()
    local.ensure_emulation("arm64")
    assert bare.calls == []  # ready now: nothing runs twice


def test_an_entry_without_the_f_flag_is_refused(bare: _BareX86) -> None:
    bare.flags = "P"
    with pytest.raises(EngineUnavailable, match=r"flags 'P'; arm64 containers need it enabled with the F flag"):
        local.ensure_emulation("arm64")


def test_the_native_architecture_needs_no_emulation(bare: _BareX86) -> None:
    local.ensure_emulation("amd64")
    assert bare.calls == []


def test_without_root_binfmt_misc_cannot_be_mounted(bare: _BareX86, monkeypatch: pytest.MonkeyPatch) -> None:
    bare.installed.update({"qemu-user-static", "binfmt-support"})
    monkeypatch.setattr(local.os, "geteuid", lambda: 1000)
    with pytest.raises(EngineUnavailable, match=r"^mount binfmt_misc needs root"):
        local.ensure_emulation("arm64")
