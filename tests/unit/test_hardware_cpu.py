"""CPU facts from recorded /proc/cpuinfo dumps, psABI/ARM levels, and cgroup-aware limits on fake trees."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.errors import InputError
from builder.hardware import cpu
from builder.hardware.cpu import (
    cgroup_cpu_limit,
    cgroup_memory_limit,
    cpu_facts_from_text,
    detect_cpu,
    mem_total,
    tf_features,
    usable_cpus,
    usable_memory,
)

CPUINFO = Path(__file__).resolve().parents[1] / "fixtures" / "cpuinfo"


@pytest.mark.parametrize(
    ("dump", "arch", "vendor", "micro", "level"),
    [
        ("this-vm-amd-epyc-zen3", "x86_64", "AuthenticAMD", "zen3", "x86-64-v3"),
        # hypervisors hide hints and intrinsic-only features; the name follows what compilers emit
        ("xeon-spr-guest-amx-hidden", "x86_64", "GenuineIntel", "sapphirerapids", "x86-64-v4"),
        ("xeon-spr-vm-amx-hints-hidden", "x86_64", "GenuineIntel", "sapphirerapids", "x86-64-v4"),
        ("gcp-c3-xeon-spr-no-vpmu-pdcm-hidden", "x86_64", "GenuineIntel", "sapphirerapids", "x86-64-v4"),
        ("this-vm-xeon-spr-class-waitpkg-hidden", "x86_64", "GenuineIntel", "sapphirerapids", "x86-64-v4"),
        ("aws-m6i-xeon-icelake-server-umip-hidden", "x86_64", "GenuineIntel", "icelake", "x86-64-v4"),
        ("neoverse-v1-vm-dgh-hidden", "aarch64", "ARM", "neoverse_v1", "armv8.6-a"),
        ("old-xeon-e5-2670-sandybridge", "x86_64", "GenuineIntel", "sandybridge", "x86-64-v2"),
        ("amd-epyc-9454-zen4-guest", "x86_64", "AuthenticAMD", "zen4", "x86-64-v4"),
        ("aws-graviton3-neoverse-v1-sve", "aarch64", "ARM", "neoverse_v1", "armv8.6-a"),
    ],
)
def test_recorded_dumps_are_named(dump: str, arch: str, vendor: str, micro: str, level: str) -> None:
    facts = detect_cpu(CPUINFO / dump)
    assert (facts.arch, facts.vendor, facts.microarchitecture, facts.level) == (arch, vendor, micro, level)


def test_avx512_guest_shows_avx512_but_no_amx() -> None:
    facts = detect_cpu(CPUINFO / "xeon-spr-guest-amx-hidden")
    present = {name for name, have in tf_features(facts.arch, facts.features) if have}
    assert {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni"} <= present
    assert not {"amx_tile", "amx_int8", "amx_bf16"} & present


def test_raw_flags_are_kept_verbatim() -> None:
    facts = detect_cpu(CPUINFO / "this-vm-amd-epyc-zen3")
    assert "pni" in facts.features and "sse3" not in facts.features  # raw spelling, not archspec's
    assert "avx512f" not in facts.features


def test_arm_features_and_counts() -> None:
    facts = detect_cpu(CPUINFO / "aws-graviton3-neoverse-v1-sve")
    present = dict(tf_features("aarch64", facts.features))
    assert present["sve"] and present["asimddp"] and present["i8mm"] and present["bf16"]
    assert not present["sve2"]
    assert facts.cpu_part == "0xd40" and facts.logical_cpus == 2


def test_recorded_dump_has_no_memory_facts() -> None:
    facts = detect_cpu(CPUINFO / "old-xeon-e5-2670-sandybridge")
    assert facts.usable_memory_bytes is None and facts.total_memory_bytes is None


def test_unreadable_dump_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read cpuinfo"):
        detect_cpu(tmp_path / "missing")


def test_a_file_that_is_not_a_cpuinfo_dump_is_an_input_error(tmp_path: Path) -> None:
    """A wrong file must not pass for a CPU with no features (which would resolve to the weakest target)."""
    wrong = tmp_path / "notes.txt"
    wrong.write_text("processor: maybe\nsome text\n")
    with pytest.raises(InputError, match="not a /proc/cpuinfo dump"):
        detect_cpu(wrong)


def test_x86_level_boundaries() -> None:
    v2 = "cx16 lahf_lm mmx sse sse2 pni ssse3 sse4_1 sse4_2 popcnt"
    v3 = v2 + " avx avx2 bmi1 bmi2 f16c fma abm movbe xsave"
    v4 = v3 + " avx512f avx512bw avx512cd avx512dq avx512vl"
    assert cpu.x86_level(frozenset(v2.split())) == "x86-64-v2"
    assert cpu.x86_level(frozenset(v3.split())) == "x86-64-v3"
    assert cpu.x86_level(frozenset(v4.split())) == "x86-64-v4"
    assert cpu.x86_level(frozenset(v3.replace(" movbe", "").split())) == "x86-64-v2"
    assert cpu.x86_level(frozenset("sse sse2".split())) == "x86-64"


def test_arm_level_markers() -> None:
    assert cpu.arm_level(frozenset({"fp", "asimd"})) == "armv8-a"
    assert cpu.arm_level(frozenset({"asimd", "atomics", "asimddp"})) == "armv8.2-a"
    assert cpu.arm_level(frozenset({"sve2", "sve"})) == "armv9-a"


def test_cpuinfo_text_without_counts_defaults() -> None:
    text = (CPUINFO / "this-vm-amd-epyc-zen3").read_text()
    facts = cpu_facts_from_text(text, usable_cpu_count=1, total_memory=8 << 30, usable_memory_bytes=4 << 30)
    assert (facts.usable_cpus, facts.total_memory_bytes, facts.usable_memory_bytes) == (1, 8 << 30, 4 << 30)


# ---------------------------------------------------------------------------------------------- cgroups
def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return root


def test_cgroup_v2_quota_and_memory(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "proc/self/cgroup": "0::/docker/abc\n",
            "sys/fs/cgroup/docker/abc/cpu.max": "150000 100000\n",
            "sys/fs/cgroup/docker/abc/memory.max": str(3 << 30),
            "sys/fs/cgroup/docker/cpu.max": "max 100000\n",
            "proc/meminfo": "MemTotal:       24576000 kB\nMemFree: 1 kB\n",
        },
    )
    assert cgroup_cpu_limit(root) == pytest.approx(1.5)
    assert cgroup_memory_limit(root) == 3 << 30
    assert mem_total(root) == 24576000 * 1024
    assert usable_cpus(16, 16, cgroup_cpu_limit(root)) == 2  # 1.5 CPUs rounds up


def test_cgroup_v2_parent_limit_is_tighter(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "proc/self/cgroup": "0::/a/b\n",
            "sys/fs/cgroup/a/b/cpu.max": "400000 100000",
            "sys/fs/cgroup/a/cpu.max": "200000 100000",
            "sys/fs/cgroup/a/b/memory.max": "max",
        },
    )
    assert cgroup_cpu_limit(root) == pytest.approx(2.0)
    assert cgroup_memory_limit(root) is None


def test_cgroup_v1_quota_unlimited_memory(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "proc/self/cgroup": "4:memory:/job\n3:cpu,cpuacct:/job\n1:name=systemd:/job\n",
            "sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_quota_us": "50000",
            "sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_period_us": "100000",
            "sys/fs/cgroup/memory/job/memory.limit_in_bytes": "9223372036854771712",
        },
    )
    assert cgroup_cpu_limit(root) == pytest.approx(0.5)
    assert cgroup_memory_limit(root) is None
    assert usable_cpus(8, None, 0.5) == 1


def test_cgroup_v1_no_quota_but_memory_limit(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "proc/self/cgroup": "4:memory:/\n3:cpu:/\n",
            "sys/fs/cgroup/cpu/cpu.cfs_quota_us": "-1",
            "sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000",
            "sys/fs/cgroup/memory/memory.limit_in_bytes": str(2 << 30),
        },
    )
    assert cgroup_cpu_limit(root) is None
    assert cgroup_memory_limit(root) == 2 << 30


def test_usable_counts_honour_affinity_and_limits() -> None:
    assert usable_cpus(64, 4, None) == 4
    assert usable_cpus(64, None, None) == 64
    assert usable_cpus(64, 8, 2.0) == 2
    assert usable_memory(32 << 30, 4 << 30) == 4 << 30
    assert usable_memory(32 << 30, None) == 32 << 30
    assert usable_memory(None, None) is None


def test_live_detection_on_a_fake_root(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "proc/cpuinfo": (CPUINFO / "xeon-spr-guest-amx-hidden").read_text(),
            "proc/meminfo": "MemTotal: 8388608 kB\n",
            "proc/self/cgroup": "0::/\n",
            "sys/fs/cgroup/cpu.max": "100000 100000",
            "sys/fs/cgroup/memory.max": str(1 << 30),
        },
    )
    facts = detect_cpu(None, root=root, affinity=lambda: 3)
    assert facts.microarchitecture == "sapphirerapids"
    assert facts.usable_cpus == 1
    assert (facts.total_memory_bytes, facts.usable_memory_bytes) == (8 << 30, 1 << 30)
