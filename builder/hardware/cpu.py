"""CPU facts from /proc/cpuinfo (live or a recorded dump), archspec for naming, cgroups for what is usable.

Why not archspec.cpu.host() alone: it only reads the live /proc/cpuinfo of the machine it runs on, and
its `.features` are the target's, not the host's. We parse the first processor stanza ourselves (so a
recorded dump from any machine works), keep the raw flags, and hand archspec a partial microarchitecture
built with its own helpers to rank the named targets those flags satisfy.

Why cgroups: containers and batch schedulers routinely give a process fewer CPUs and less memory than the
machine has; bazel's defaults (and `os.cpu_count()`) ignore that and over-subscribe or OOM.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from pathlib import Path

from archspec.cpu import TARGETS, Microarchitecture
from archspec.cpu import detect as archspec_detect

from builder.guard import canonical_features, parse_cpuinfo
from builder.hardware.codegen import code_features
from builder.hardware.facts import CpuFacts

# Features TensorFlow's kernels (Eigen, oneDNN, XNNPACK) care about, in display order.
TF_FEATURES: dict[str, tuple[str, ...]] = {
    "x86_64": (
        "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c",
        "avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl",
        "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni",
        "amx_tile", "amx_int8", "amx_bf16",
    ),
    "aarch64": ("asimd", "asimdhp", "asimddp", "sve", "sve2", "bf16", "i8mm", "svebf16", "svei8mm", "sme"),
}

# psABI levels, newest first; their feature lists come from archspec's generic targets.
X86_LEVELS = ("x86_64_v4", "x86_64_v3", "x86_64_v2")

# ARM architecture versions, newest first, each with a feature whose presence marks it (Linux hwcaps).
# A heuristic for display only: resolution uses archspec's named targets.
ARM_LEVEL_MARKERS: tuple[tuple[str, str], ...] = (
    ("armv9-a", "sve2"),
    ("armv8.6-a", "i8mm"),
    ("armv8.5-a", "flagm2"),
    ("armv8.4-a", "ilrcpc"),
    ("armv8.3-a", "lrcpc"),
    ("armv8.2-a", "asimddp"),
    ("armv8.1-a", "atomics"),
)

UNLIMITED = 1 << 60  # cgroup v1 writes ~2^63 for "no limit"


def arch_of(data: dict[str, str], default: str | None = None) -> str:
    """Architecture family of a cpuinfo stanza: x86 has `flags`+`vendor_id`, ARM has `Features`+implementer."""
    if "flags" in data and "vendor_id" in data:
        return "x86_64"
    if "Features" in data and ("CPU implementer" in data or "CPU architecture" in data):
        return "aarch64"
    if "POWER" in data.get("cpu", ""):
        return "ppc64le"
    if "isa" in data or "uarch" in data:
        return "riscv64"
    return default or platform.machine()


def vendor_of(data: dict[str, str], arch: str) -> str:
    """Vendor as archspec names it: `vendor_id` on x86, the implementer code mapped to a name on ARM."""
    if arch == "aarch64":
        return archspec_detect._canonicalize_aarch64_vendor(data)  # noqa: SLF001 - archspec's own table
    return data.get("vendor_id", "generic")


def ranked_targets(arch: str, vendor: str, flags: frozenset[str], cpu_part: str = "") -> list[Microarchitecture]:
    """Named targets a CPU with these raw flags can run, best first, then the generic levels.

    archspec's host() ranking, with one difference: a target fits when the machine has every feature its
    compiler flags may emit (`codegen.code_features`), not every feature archspec lists, so a cloud guest
    whose hypervisor hides hints and intrinsic-only features (waitpkg, serialize, cldemote, movdir*, pdcm,
    umip, dgh) is still named for its chip. As in archspec: only descendants of the best generic level
    count (one niche feature disabled in a BIOS does not knock the CPU back years), an exact ARM `CPU part`
    match wins, and more code-generating features rank first, then an exact match of archspec's list,
    deeper ancestry and more features. The generic levels follow as fallbacks,
    so a caller can walk down the list until the toolchain can target one.
    """
    if arch not in TARGETS or arch not in ("x86_64", "aarch64"):
        return []
    root = TARGETS[arch]
    have = canonical_features(flags)
    vendor = vendor or "generic"

    def fits(target: Microarchitecture) -> bool:
        if not (target == root or root in target.ancestors):
            return False
        if target.vendor not in (vendor, "generic"):
            return False
        if arch == "aarch64" and target.vendor == "generic" and target.name != arch:
            return False  # archspec lists no hwcaps for the armv8.x generics
        return code_features(target) <= have

    compatible = [target for target in TARGETS.values() if fits(target)]

    def rank(target: Microarchitecture) -> tuple[int, bool, int, int]:
        # More code-generating features first; among targets that emit the same, the one whose every
        # archspec feature the machine has (a Broadwell is `broadwell`, though -march=skylake adds only
        # clflushopt and xsavec, which compilers never emit), then archspec's depth and feature count.
        exact = canonical_features(target.features) <= have
        return len(code_features(target)), exact, len(target.ancestors), len(target.features)

    generic = sorted((t for t in compatible if t.vendor == "generic"), key=rank, reverse=True)
    if not generic:
        generic = [root]
    named = compatible
    if cpu_part and any(t.cpu_part == cpu_part for t in named):
        named = [t for t in named if t.cpu_part == cpu_part]
    named = sorted((t for t in named if t > generic[0]), key=rank, reverse=True)
    return [*named, *generic]


def x86_level(flags: frozenset[str]) -> str:
    """Best x86-64 psABI level ("x86-64-v3") whose features these flags cover; "x86-64" (v1) otherwise."""
    have = canonical_features(flags)
    for name in X86_LEVELS:
        if TARGETS[name].features <= have:
            return name.replace("_", "-")
    return "x86-64"


def arm_level(flags: frozenset[str]) -> str:
    """ARM architecture version suggested by the hwcaps ("armv8.2-a"); "armv8-a" when nothing newer shows."""
    for level, marker in ARM_LEVEL_MARKERS:
        if marker in flags:
            return level
    return "armv8-a"


def level_of(arch: str, flags: frozenset[str]) -> str | None:
    if arch == "x86_64":
        return x86_level(flags)
    if arch == "aarch64":
        return arm_level(flags)
    return None


def tf_features(arch: str, flags: frozenset[str]) -> tuple[tuple[str, bool], ...]:
    """(feature, present) for every feature TensorFlow cares about on this architecture, in order."""
    have = canonical_features(flags)
    return tuple((feature, feature in have) for feature in TF_FEATURES.get(arch, ()))


# ------------------------------------------------------------------------------------------ cgroups
# The readers live with the server's sizing (`builder.measure.cores`, standard library only: serving images
# carry it); host detection uses the same ones.
from builder.measure.cores import _cgroup_dirs, _read, cgroup_cpu_limit, usable_cpus  # noqa: E402,F401


from builder.measure.memory import cgroup_memory_limit, mem_total, usable_memory  # noqa: E402,F401


# ------------------------------------------------------------------------------------------- facts
def cpu_facts_from_text(
    text: str,
    *,
    usable_cpu_count: int | None = None,
    total_memory: int | None = None,
    usable_memory_bytes: int | None = None,
    default_arch: str | None = None,
) -> CpuFacts:
    """CpuFacts of a /proc/cpuinfo text; counts and memory come from the caller (they are not in the dump)."""
    data = parse_cpuinfo(text)
    arch = arch_of(data, default_arch)
    flags = frozenset((data.get("flags") or data.get("Features") or "").split())
    vendor = vendor_of(data, arch)
    ranked = ranked_targets(arch, vendor, flags, data.get("CPU part", ""))
    logical = sum(1 for line in text.splitlines() if line.split(":")[0].strip() == "processor") or 1
    return CpuFacts(
        arch=arch,
        vendor=vendor,
        model_name=data.get("model name", data.get("Model", "")),
        microarchitecture=ranked[0].name if ranked else arch,
        level=level_of(arch, flags),
        features=flags,
        cpu_part=data.get("CPU part", ""),
        logical_cpus=logical,
        usable_cpus=usable_cpu_count if usable_cpu_count is not None else logical,
        total_memory_bytes=total_memory,
        usable_memory_bytes=usable_memory_bytes,
    )


# Keys that every architecture's /proc/cpuinfo has at least one of (x86, ARM, RISC-V, POWER).
CPUINFO_IDENTITY_KEYS = frozenset({"flags", "Features", "isa", "cpu", "vendor_id", "CPU implementer"})


def detect_cpu(
    cpuinfo: Path | None = None,
    *,
    root: Path = Path("/"),
    affinity: Callable[[], int | None] | None = None,
) -> CpuFacts:
    """CPU facts of this machine (cpuinfo None) or of a recorded dump (no counts/memory: they are unknown)."""
    if cpuinfo is not None:
        try:
            text = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
        except OSError as error:
            from builder.errors import InputError

            raise InputError(f"cannot read cpuinfo dump {cpuinfo}: {error.strerror}") from None
        keys = {line.split(":")[0].strip() for line in text.splitlines() if ":" in line}
        if not keys & CPUINFO_IDENTITY_KEYS:
            from builder.errors import InputError

            raise InputError(f"{cpuinfo} is not a /proc/cpuinfo dump: no 'flags', 'Features', 'isa' or 'cpu' line")
        return cpu_facts_from_text(text)
    text = _read(root / "proc/cpuinfo") or ""
    logical = os.cpu_count() or 1
    mask = (affinity or _affinity)()
    total = mem_total(root)
    return cpu_facts_from_text(
        text,
        usable_cpu_count=usable_cpus(logical, mask, cgroup_cpu_limit(root)),
        total_memory=total,
        usable_memory_bytes=usable_memory(total, cgroup_memory_limit(root)),
        default_arch=platform.machine(),
    )


def _affinity() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
