"""Running arm64 programs on an x86 machine: the kernel's binfmt_misc hands them to QEMU user mode.

Why this exists: a fleet of x86 and ARM servers needs arm64 images, and the machine that builds and tests
them is usually x86. Once the kernel knows a `qemu-aarch64` entry, any arm64 ELF (a container's /bin/sh
included) runs as if native. Which QEMU matters: Debian bookworm's 7.2 segfaults creating LiteRT's
interpreter ("uncaught target signal 11"), the runtime most arm64 serving images carry, while trixie's
`qemu-user` 10.0 runs it. Its /usr/bin/qemu-aarch64 is a static-pie binary, so it runs on bookworm too:
`builder.engine.local.ensure_qemu` fetches that one package through a private apt configuration naming
trixie (`apt_options`), never upgrading the system, and registers its binary itself (`register_line`).
Two details decide whether that works for containers:

- the entry needs the F ("fix binary") flag: the kernel opens the interpreter when the entry is registered,
  so it is found inside a container's root filesystem, which has no /usr/libexec/qemu-binfmt;
- binfmt_misc must be mounted on /proc/sys/fs/binfmt_misc (machines without systemd often lack it).

QEMU picks the emulated CPU from `QEMU_CPU` in a process's environment (`cortex-a53`, `neoverse-v1`,
`max`, ...), and the auxiliary vector (AT_HWCAP) a program sees describes that CPU, which is how the
preflight guard is tested on CPUs this machine does not have.

Pure parts here (the probe binary, reading an entry); `builder.engine.local.ensure_emulation` does the I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")
#: Docker's architecture names -> QEMU's (the binfmt entry is `qemu-<QEMU name>`).
QEMU_ARCH: Mapping[str, str] = {"arm64": "aarch64", "amd64": "x86_64"}
#: The exit code the probe binary returns: proves it ran, not just that something answered.
PROBE_EXIT = 42
#: The Debian suite and package whose static qemu-aarch64 runs LiteRT (bookworm's 7.2 does not).
QEMU_SUITE = "trixie"
QEMU_PACKAGE = "qemu-user"
#: The oldest QEMU user mode known to run the arm64 images tfsmith ships (10.0: LiteRT checked; 7.2 crashes).
MIN_QEMU = (10, 0)
# binfmt_misc magic and mask of an arm64 ELF executable (QEMU's scripts/qemu-binfmt-conf.sh).
AARCH64_MAGIC = r"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00"
AARCH64_MASK = r"\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff"


def probe_binary() -> bytes:
    """A 132-byte static arm64 Linux program that exits with PROBE_EXIT: `mov x0, #42; mov x8, #93 (exit);
    svc #0`. Written here instead of downloaded, so checking emulation needs no package and no network."""
    code = struct.pack("<3I", 0xD2800000 | (PROBE_EXIT << 5), 0xD2800000 | (93 << 5) | 8, 0xD4000001)
    base, offset = 0x400000, 64 + 56
    size = offset + len(code)
    header = struct.pack(
        "<4s5B7x2HI3QI6H",
        b"\x7fELF", 2, 1, 1, 0, 0,  # 64-bit, little-endian, ELF version 1, System V ABI
        2, 0xB7, 1,  # executable, EM_AARCH64, version
        base + offset, 64, 0,  # entry point, program headers at 64, no section headers
        0, 64, 56, 1, 0, 0, 0,  # flags, header size, one program header, no sections
    )  # fmt: skip
    segment = struct.pack("<2I6Q", 1, 5, 0, base, base, size, size, 0x1000)  # PT_LOAD, R+X, the whole file
    return header + segment + code


@dataclass(frozen=True)
class BinfmtEntry:
    """One /proc/sys/fs/binfmt_misc entry as the kernel reports it."""

    enabled: bool
    interpreter: str
    flags: str

    @property
    def fixed(self) -> bool:
        """The F flag: the interpreter was opened at registration, so containers can use it."""
        return "F" in self.flags


def parse_entry(text: str) -> BinfmtEntry:
    """`enabled\\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\\nflags: PF\\n...` -> BinfmtEntry."""
    lines = [line.strip() for line in text.splitlines()]
    fields = dict(line.partition(" ")[::2] for line in lines if line)
    return BinfmtEntry(
        enabled="enabled" in lines,
        interpreter=fields.get("interpreter", "").strip(),
        flags=fields.get("flags:", "").strip(),
    )


def entry_path(arch: str) -> Path:
    """The binfmt_misc entry Debian's qemu-user-static registers for Docker architecture `arch`."""
    return BINFMT_DIR / f"qemu-{QEMU_ARCH[arch]}"


def register_line(interpreter: str, name: str = "qemu-aarch64") -> str:
    """What to write to binfmt_misc's `register` file for arm64 ELFs run by `interpreter`, flag F (opened now,
    so containers find it without it in their root filesystem)."""
    if ":" in interpreter or "\n" in interpreter:
        raise ValueError(f"binfmt_misc cannot register an interpreter path with ':' or a newline: {interpreter!r}")
    return f":{name}:M::{AARCH64_MAGIC}:{AARCH64_MASK}:{interpreter}:F"


def parse_qemu_version(text: str) -> tuple[int, int] | None:
    """`qemu-aarch64 version 10.0.13 (Debian 1:10.0.13+ds-0+deb13u1)` -> (10, 0); None when not that shape."""
    words = text.split()
    for before, word in zip(words, words[1:]):
        if before == "version":
            parts = word.split(".")
            if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
                return int(parts[0]), int(parts[1])
    return None


def sources_list(mirror: str, suite: str = QEMU_SUITE) -> str:
    """The private apt sources file: only the suite QEMU is fetched from."""
    return f"deb {mirror} {suite} main\n"


def apt_options(state: Path) -> list[str]:
    """apt-get options that read only `state` (its sources file, lists and cache), never the system's: the
    system's packages and sources stay as they are, and `apt-get download` fetches one .deb."""
    return [
        "-o", f"Dir::Etc::SourceList={state / 'sources.list'}",
        "-o", "Dir::Etc::SourceParts=/dev/null",
        "-o", f"Dir::State::Lists={state / 'lists'}",
        "-o", f"Dir::Cache={state / 'cache'}",
    ]  # fmt: skip
