"""arm64 emulation set-up: the probe program, binfmt entries, and what `ensure_emulation` does on a bare machine.

The probe and the entry tfsmith registers are checked against the magic and mask Debian's qemu-user-static
registers for arm64, so the kernel hands both to QEMU exactly as it hands a container's arm64 programs. The
set-up runs against a recorded bare machine (a temporary binfmt_misc folder that behaves as the kernel's;
apt-get, dpkg-deb and mount recorded, not run).
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


def _decoded(escaped: str) -> bytes:
    """binfmt_misc's `\\xHH` escapes (mixed with plain characters, as in `\\x7fELF`) -> bytes."""
    return escaped.encode("ascii").decode("unicode_escape").encode("latin-1")


def test_the_registered_magic_is_debians_and_matches_the_probe() -> None:
    line = emulation.register_line("/opt/qemu/qemu-aarch64")
    _, name, kind, offset, magic, mask, interpreter, flags = line.split(":")
    assert (name, kind, offset, interpreter, flags) == ("qemu-aarch64", "M", "", "/opt/qemu/qemu-aarch64", "F")
    assert _decoded(magic) == DEBIAN_MAGIC and _decoded(mask) == DEBIAN_MASK
    with pytest.raises(ValueError, match="':'"):
        emulation.register_line("/odd:path/qemu")


@pytest.mark.parametrize(
    ("text", "version"),
    [("qemu-aarch64 version 10.0.13 (Debian 1:10.0.13+ds-0+deb13u1)\nCopyright (c) 2003-2025", (10, 0)),
     ("qemu-aarch64 version 7.2.15 (Debian 1:7.2+dfsg-7+deb12u13)", (7, 2)), ("Illegal option", None)],
)
def test_qemu_versions_are_read_from_its_banner(text: str, version: tuple[int, int] | None) -> None:
    assert emulation.parse_qemu_version(text) == version


def test_the_private_apt_configuration_names_only_trixie(tmp_path: Path) -> None:
    assert emulation.sources_list("http://deb.debian.org/debian") == "deb http://deb.debian.org/debian trixie main\n"
    options = emulation.apt_options(tmp_path)
    assert options[1::2] == [f"Dir::Etc::SourceList={tmp_path / 'sources.list'}", "Dir::Etc::SourceParts=/dev/null",
                             f"Dir::State::Lists={tmp_path / 'lists'}", f"Dir::Cache={tmp_path / 'cache'}"]
    assert set(options[::2]) == {"-o"}


OLD_QEMU = "/usr/libexec/qemu-binfmt/aarch64-binfmt-P"  # bookworm's qemu-user-static: QEMU 7.2


class _BareX86:
    """An x86 machine without a new QEMU: binfmt_misc unmounted until `mount`; the kernel's register file
    creates entries and "-1" removes one; apt-get and dpkg-deb are recorded, not run."""

    def __init__(self, root: Path, qemu_dir: Path) -> None:
        self.root = root
        self.qemu_dir = qemu_dir
        self.calls: list[list[str]] = []
        self.versions = {OLD_QEMU: (7, 2)}

    def which(self, program: str) -> str | None:
        return f"/usr/bin/{program}" if program in ("apt-get", "dpkg-deb", "mount") else None

    def run(self, argv: list[str], cwd: Path | None = None, **_: object) -> object:
        self.calls.append(list(argv))
        if argv[0] == "apt-get" and "download" in argv:
            assert cwd is not None
            (Path(cwd) / "qemu-user_1%3a10.0.13+ds-0+deb13u1_amd64.deb").write_bytes(b"!<arch>")
        elif argv[0] == "mount":
            (self.root / "register").write_text("")

        class Done:
            returncode = 0
            stdout = stderr = ""

        return Done()

    def extract(self, deb: Path, member: str, dest: Path) -> None:
        self.calls.append(["dpkg-deb", "--fsys-tarfile", deb.name, member])
        dest.write_text("static qemu-aarch64")
        self.versions[str(dest)] = (10, 0)

    def write(self, path: Path, text: str, what: str) -> None:
        if path.name == "register":
            _, name, *_rest, interpreter, flags = text.split(":")
            (self.root / name).write_text(f"enabled\ninterpreter {interpreter}\nflags: {flags}\noffset 0\n")
        elif text == "-1":
            path.unlink()

    def version(self, binary: str) -> tuple[int, int]:
        return self.versions.get(binary, (0, 0)) if Path(binary).exists() or binary == OLD_QEMU else (0, 0)

    def probe(self) -> bool:
        entry = self.root / "qemu-aarch64"
        return entry.exists() and self.version(emulation.parse_entry(entry.read_text()).interpreter) >= (10, 0)


@pytest.fixture()
def bare(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[_BareX86]:
    binfmt = tmp_path / "binfmt_misc"
    binfmt.mkdir()
    machine = _BareX86(binfmt, tmp_path / "qemu")
    monkeypatch.setattr(emulation, "BINFMT_DIR", binfmt)
    monkeypatch.setattr(local, "QEMU_DIR", machine.qemu_dir)
    monkeypatch.setattr(local.shutil, "which", machine.which)
    monkeypatch.setattr(local.subprocess, "run", machine.run)
    monkeypatch.setattr(local.os, "geteuid", lambda: 0)
    monkeypatch.setattr(local, "host_arch", lambda: "amd64")
    monkeypatch.setattr(local, "_extract", machine.extract)
    monkeypatch.setattr(local, "_write_root", machine.write)
    monkeypatch.setattr(local, "_qemu_version", machine.version)
    monkeypatch.setattr(local, "_probe_runs", machine.probe)
    yield machine


def test_a_bare_machine_gets_trixies_qemu_without_touching_the_systems_packages(bare: _BareX86) -> None:
    said: list[str] = []
    local.ensure_emulation("arm64", say=said.append)
    options = emulation.apt_options(bare.qemu_dir / "apt")
    binary = bare.qemu_dir / "qemu-aarch64"
    assert bare.calls == [
        ["apt-get", *options, "-q", "update"],
        ["apt-get", *options, "-q", "download", "qemu-user"],
        ["dpkg-deb", "--fsys-tarfile", "qemu-user_1%3a10.0.13+ds-0+deb13u1_amd64.deb", "./usr/bin/qemu-aarch64"],
        ["mount", "-t", "binfmt_misc", "binfmt_misc", str(bare.root)],
    ]
    assert (bare.qemu_dir / "apt" / "sources.list").read_text() == emulation.sources_list(local.DEBIAN_MIRROR)
    assert not list((bare.qemu_dir / "deb").glob("*.deb"))  # only the one binary is kept
    entry = emulation.parse_entry((bare.root / "qemu-aarch64").read_text())
    assert (entry.interpreter, entry.flags, entry.enabled) == (str(binary), "F", True)
    assert said[-1] == f"arm64 emulation ready ({binary}, flags F)"
    bare.calls.clear()
    local.ensure_emulation("arm64")
    assert bare.calls == []  # ready now: nothing runs twice


def test_bookworms_qemu_is_replaced_by_one_that_runs_litert(bare: _BareX86) -> None:
    (bare.root / "register").write_text("")
    bare.write(bare.root / "register", f":qemu-aarch64:M::x:y:{OLD_QEMU}:PF", "seed")
    said: list[str] = []
    local.ensure_emulation("arm64", say=said.append)
    assert any(line.startswith(f"replacing qemu-aarch64 ({OLD_QEMU}, flags PF)") for line in said)
    entry = emulation.parse_entry((bare.root / "qemu-aarch64").read_text())
    assert entry.interpreter == str(bare.qemu_dir / "qemu-aarch64") and entry.fixed
    assert not any(call[:2] == ["apt-get", "install"] for call in bare.calls)


def test_a_fetched_qemu_is_reused(bare: _BareX86) -> None:
    local.ensure_qemu()
    bare.calls.clear()
    assert local.ensure_qemu() == bare.qemu_dir / "qemu-aarch64"
    assert bare.calls == []


def test_the_native_architecture_needs_no_emulation(bare: _BareX86) -> None:
    local.ensure_emulation("amd64")
    assert bare.calls == []


def test_without_root_binfmt_misc_cannot_be_mounted(bare: _BareX86, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local.os, "geteuid", lambda: 1000)
    with pytest.raises(EngineUnavailable, match=r"^mount binfmt_misc needs root"):
        local.ensure_emulation("arm64")
