"""Target resolution: archspec's real cpuinfo dumps, our recorded ones, names, flags, CUDA and refusals."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import archspec
import pytest

from builder.errors import IncompatibleError, InputError
from builder.guard import canonical_features
from builder.hardware.cpu import detect_cpu
from builder.hardware.facts import GpuFacts, GpuReport, HostFacts
from builder.targets import can_run, resolve_target, target_names

CPUINFO = Path(__file__).resolve().parents[1] / "fixtures" / "cpuinfo"
ARCHSPEC_DUMPS = sorted((Path(archspec.__file__).parent / "json" / "tests" / "targets").glob("linux-*"))


def facts_of(path: Path, gpus: tuple[GpuFacts, ...] = ()) -> HostFacts:
    return HostFacts(cpu=detect_cpu(path), gpu=GpuReport(status="ok" if gpus else "no-gpu", devices=gpus))


VM = facts_of(CPUINFO / "this-vm-amd-epyc-zen3")  # x86-64-v3 build machine
ARM = facts_of(CPUINFO / "aws-graviton3-neoverse-v1-sve")
SPR_GUEST = facts_of(CPUINFO / "xeon-spr-guest-amx-hidden")
OLD = facts_of(CPUINFO / "old-xeon-e5-2670-sandybridge")


def test_archspec_ships_dumps() -> None:
    assert len(ARCHSPEC_DUMPS) >= 30


@pytest.mark.parametrize("dump", [*ARCHSPEC_DUMPS, *sorted(p for p in CPUINFO.iterdir() if p.suffix != ".md")], ids=lambda p: p.name)
def test_host_target_features_are_a_subset_of_the_dump(dump: Path) -> None:
    facts = facts_of(dump)
    if facts.cpu.arch not in ("x86_64", "aarch64"):
        with pytest.raises(IncompatibleError, match="x86_64 or aarch64"):
            resolve_target("host", facts=facts, build_machine=VM)
        return
    target = resolve_target("host", facts=facts, build_machine=facts)
    assert target.features <= canonical_features(facts.cpu.features), target.name
    assert can_run(target, facts) == ()
    assert not any("native" in flag for flag in (*target.copts, *target.host_copts))
    assert target.copts and target.host_copts
    # host_copts are the machine's generic level, never a named microarchitecture
    assert any(f.startswith("-march=x86-64") or f.startswith("-march=armv8-a") for f in target.host_copts)


@pytest.mark.parametrize(
    ("dump", "expected"),
    [
        ("linux-rhel7-haswell", "haswell"),
        ("linux-unknown-sapphirerapids", "sapphirerapids"),
        ("linux-rocky9-zen5", "zen4"),  # clang 18 cannot target zen5: its parent instead
        ("linux-ubuntu24.04-neoverse_v3ae", "neoverse_v2"),  # same, through the ancestors
        ("linux-rhel7-x86_64_v3", "x86-64-v3"),
    ],
)
def test_host_names(dump: str, expected: str) -> None:
    facts = facts_of(ARCHSPEC_DUMPS[0].parent / dump)
    assert resolve_target("host", facts=facts, build_machine=VM).name == expected


def test_zen5_resolves_to_itself_with_a_newer_clang_only() -> None:
    with pytest.raises(IncompatibleError, match=r"cannot target zen5.*zen4"):
        resolve_target("zen5", build_machine=VM)


HINTS_HIDDEN = {"cldemote", "movdir64b", "movdiri", "serialize", "waitpkg"}


@pytest.mark.parametrize(
    "dump",
    [
        "xeon-spr-guest-amx-hidden",  # AMX hidden too
        "xeon-spr-vm-amx-hints-hidden",  # AMX exposed, the five hints hidden
        "gcp-c3-xeon-spr-no-vpmu-pdcm-hidden",  # no vPMU: pdcm (and every perf flag) hidden
        "this-vm-xeon-spr-class-waitpkg-hidden",  # recorded on a development VM: waitpkg hidden
    ],
)
def test_sapphire_rapids_guests_hiding_hints_are_sapphirerapids(dump: str) -> None:
    facts = facts_of(CPUINFO / dump)
    hidden = (resolve_target("sapphirerapids", build_machine=VM).hints | {"pdcm"}) - canonical_features(facts.cpu.features)
    assert hidden, "the fixture hides nothing archspec's sapphirerapids lists"
    target = resolve_target("host", facts=facts, build_machine=VM)
    assert target.name == "sapphirerapids"
    assert "-march=sapphirerapids" in target.copts
    assert {"avx512_bf16", "avx512_fp16", "avx_vnni"} <= target.features  # the VM builds with BF16 and FP16
    assert can_run(resolve_target("sapphirerapids", build_machine=VM), facts) == ()


def test_sapphirerapids_requires_what_its_code_needs_and_no_hints() -> None:
    spr = resolve_target("sapphirerapids", build_machine=VM)
    assert HINTS_HIDDEN | {"amx_tile", "amx_int8", "amx_bf16"} <= spr.hints
    assert not spr.hints & spr.features
    # -march=sapphirerapids lets the compiler emit AVX512-FP16 and AVX-VNNI, which archspec does not list
    assert {"avx512_fp16", "avx_vnni", "avx512_bf16"} <= spr.features
    guest = facts_of(CPUINFO / "xeon-spr-vm-amx-hints-hidden")
    without_fp16 = HostFacts(cpu=replace(guest.cpu, features=guest.cpu.features - {"avx512_fp16"}))
    assert can_run(spr, without_fp16) == ("avx512_fp16",)
    assert "avx512_fp16" in can_run(spr, facts_of(CPUINFO / "amd-epyc-9454-zen4-guest"))


@pytest.mark.parametrize("dump", ["aws-m6i-xeon-icelake-server-umip-hidden", "xeon-spr-vm-amx-hints-hidden"])
def test_a_server_part_gets_server_tuning(dump: str) -> None:
    facts = facts_of(CPUINFO / dump)
    target = resolve_target("host", facts=facts, build_machine=VM)
    assert "Xeon" in facts.cpu.model_name
    assert not any("client" in flag for flag in target.copts), target.copts
    assert can_run(target, facts) == ()


def test_ice_lake_server_hiding_umip_is_icelake_with_server_tuning() -> None:
    facts = facts_of(CPUINFO / "aws-m6i-xeon-icelake-server-umip-hidden")
    assert "umip" not in facts.cpu.features
    target = resolve_target("host", facts=facts, build_machine=VM)
    assert target.name == "icelake"
    assert target.copts == ("-march=icelake-server", "-mtune=icelake-server")
    named = resolve_target("icelake", build_machine=VM)  # a named target keeps archspec's spelling
    assert named.copts == ("-march=icelake-client", "-mtune=icelake-client")
    assert named.features == target.features


def test_host_extras_add_one_flag_per_code_feature_beyond_the_microarchitecture() -> None:
    zen4 = facts_of(CPUINFO / "amd-epyc-9454-zen4-guest")
    with_vnni = HostFacts(cpu=replace(zen4.cpu, features=zen4.cpu.features | {"avx_vnni"}))
    target = resolve_target("host", facts=with_vnni, build_machine=VM)
    assert target.name == "zen4" and target.extras == ("avx_vnni",)
    assert target.copts[-1] == "-mavxvnni" and "avx_vnni" in target.features
    assert target.tag_token == "zen4-avxvnni-cpu"
    assert can_run(target, zen4) == ("avx_vnni",)
    assert resolve_target("host", facts=zen4, build_machine=VM).extras == ()


def test_neoverse_v1_guest_without_dgh_is_neoverse_v1() -> None:
    facts = facts_of(CPUINFO / "neoverse-v1-vm-dgh-hidden")
    assert "dgh" not in facts.cpu.features
    assert resolve_target("host", facts=facts, build_machine=VM).name == "neoverse_v1"
    target = resolve_target("neoverse_v1", build_machine=VM)
    assert "dgh" in target.hints and "dgh" not in target.features
    assert can_run(target, facts) == ()


def test_generic_levels_and_spellings() -> None:
    for spelling in ("x86-64-v3", "x86_64_v3", "X86-64-V3"):
        target = resolve_target(spelling, build_machine=VM)
        assert target.name == "x86-64-v3" and target.arch == "x86_64"
        assert target.copts == ("-march=x86-64-v3", "-mtune=generic")
    assert resolve_target("skylake-avx512", build_machine=VM).name == "skylake_avx512"
    v4 = resolve_target("x86-64-v4", build_machine=VM)
    assert {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"} <= v4.features
    assert can_run(v4, VM) == ("avx512bw", "avx512cd", "avx512dq", "avx512f", "avx512vl")


def test_host_copts_are_the_build_machines_never_the_targets() -> None:
    assert resolve_target("sapphirerapids", build_machine=VM).host_copts == ("-march=x86-64-v3", "-mtune=generic")
    assert resolve_target("haswell", build_machine=OLD).host_copts == ("-march=x86-64-v2", "-mtune=generic")
    # a cross-architecture target keeps the build machine's flags
    assert resolve_target("neoverse_v1", build_machine=VM).host_copts == ("-march=x86-64-v3", "-mtune=generic")
    assert resolve_target("x86-64-v3", build_machine=ARM).host_copts == ("-march=armv8-a", "-mtune=generic")


def test_arm_target() -> None:
    target = resolve_target("neoverse_v1", build_machine=ARM)
    assert target.arch == "aarch64" and {"sve", "asimddp", "i8mm", "bf16"} <= target.features
    assert target.copts == ("-march=armv8.4-a+sve+fp16+bf16+crypto+i8mm+rng",)
    assert can_run(target, ARM) == ()
    assert can_run(target, VM) == ("arch:aarch64",)
    assert not {"evtstrm", "cpuid"} & target.features  # kernel hwcaps, not instructions
    vm_without_evtstrm = HostFacts(cpu=replace(ARM.cpu, features=ARM.cpu.features - {"evtstrm", "cpuid"}))
    assert can_run(target, vm_without_evtstrm) == ()


def test_old_cpu_cannot_run_haswell() -> None:
    # rdrand is missing too, but compilers only emit it through intrinsics: not required
    assert "rdrand" not in OLD.cpu.features
    assert can_run(resolve_target("haswell", build_machine=VM), OLD) == ("abm", "avx2", "bmi1", "bmi2", "f16c", "fma", "movbe")


def test_cuda_explicit_list() -> None:
    target = resolve_target("x86-64-v3", cuda_cc="9.0,8.0,80", build_machine=VM)
    assert target.cuda is not None
    assert target.cuda.capabilities == ("8.0", "9.0") and target.cuda.ptx == "9.0"
    assert target.cuda.hermetic_list == "sm_80,sm_90,compute_90"
    assert (target.cuda.version, target.cuda.cudnn) == ("12.5.1", "9.3.0")
    assert target.tag_token == "x86-64-v3-cu12.5-cc80-cc90-ptx90"
    assert resolve_target("icelake", cuda_cc="sm_80,sm_90", build_machine=VM).tag_token == "icelake-cu12.5-cc80-cc90-ptx90"


def test_cuda_auto_from_mixed_gpus() -> None:
    gpus = (GpuFacts(0, "GPU-a", "NVIDIA A100", "8.0"), GpuFacts(1, "GPU-b", "NVIDIA H100", "9.0"), GpuFacts(2, "GPU-c", "A100", "8.0"))
    target = resolve_target("host", cuda_cc="auto", facts=facts_of(CPUINFO / "xeon-spr-guest-amx-hidden", gpus), build_machine=VM)
    assert target.cuda is not None and target.cuda.hermetic_list == "sm_80,sm_90,compute_90"
    assert target.tag_token == "sapphirerapids-cu12.5-cc80-cc90-ptx90"


def test_cuda_auto_without_gpus_says_so() -> None:
    with pytest.raises(InputError, match="no GPU capability.*--cuda-cc 8.0,9.0"):
        resolve_target("x86-64-v3", cuda_cc="auto", facts=VM, build_machine=VM)


@pytest.mark.parametrize("cc", ["10.0", "12.0", "8.0,10.0", "sm_100"])
def test_blackwell_refused_for_tf_2_21(cc: str) -> None:
    with pytest.raises(IncompatibleError, match=r"Blackwell needs CUDA >= 12.8.*--cuda-cc 9.0"):
        resolve_target("x86-64-v3", cuda_cc=cc, build_machine=VM)


def test_capability_below_cuda_minimum_refused() -> None:
    with pytest.raises(IncompatibleError, match="cannot compile for capability 3.5"):
        resolve_target("x86-64-v3", cuda_cc="3.5,8.0", build_machine=VM)


@pytest.mark.parametrize("bad", ["", "eight", "8.x", "sm_"])
def test_bad_capability_values(bad: str) -> None:
    with pytest.raises(InputError):
        resolve_target("x86-64-v3", cuda_cc=bad or ",", build_machine=VM)


def test_python_outside_range() -> None:
    with pytest.raises(IncompatibleError, match=r"3.10-3.13, not 3.9"):
        resolve_target("x86-64-v3", python="3.9", build_machine=VM)
    assert resolve_target("x86-64-v3", python="3.9", tf_version="2.19.0", build_machine=VM).python == "3.9"
    with pytest.raises(IncompatibleError):
        resolve_target("x86-64-v3", python="3.13", tf_version="2.18", build_machine=VM)


def test_toolchain_follows_tf_version() -> None:
    assert resolve_target("x86-64-v3", tf_version="2.18.1", python="3.11", build_machine=VM).compiler_version == "17.0.6"
    assert resolve_target("x86-64-v3", build_machine=VM).compiler_version == "18.1.8"
    with pytest.raises(InputError, match="2.18, 2.19, 2.20, 2.21"):
        resolve_target("x86-64-v3", tf_version="2.17.0", build_machine=VM)


@pytest.mark.parametrize(("name", "suggestion"), [("skylake_avx", "skylake_avx512"), ("sapphire", "sapphirerapids"), ("x86-64-v5", "x86-64-v4"), ("neoverse-v1", "neoverse_v1"), ("zen9", "zen")])
def test_unknown_names_suggest_close_ones(name: str, suggestion: str) -> None:
    if name == "neoverse-v1":  # dash spelling is accepted outright
        assert resolve_target(name, build_machine=VM).name == suggestion
        return
    with pytest.raises(InputError, match=f"unknown target '{name}'.*did you mean.*{suggestion}"):
        resolve_target(name, build_machine=VM)


def test_other_families_refused() -> None:
    with pytest.raises(InputError, match="power9.*x86_64 or aarch64"):
        resolve_target("power9", build_machine=VM)


def test_target_names() -> None:
    names = target_names()
    assert names[0] == "host"
    assert {"x86-64-v2", "x86-64-v3", "x86-64-v4", "haswell", "icelake", "sapphirerapids", "zen4", "neoverse_v1"} <= set(names)
    assert not any(n.startswith("x86_64") or n.startswith("power") for n in names)


def test_guard_env_matches_target() -> None:
    target = resolve_target("haswell", cuda_cc="7.5,8.6", build_machine=VM)
    env = target.guard_env
    assert env["TFSMITH_IMAGE_TARGET"] == "haswell"
    assert set(env["TFSMITH_IMAGE_FEATURES"].split(",")) == set(target.features)
    assert (env["TFSMITH_IMAGE_CUDA_CC"], env["TFSMITH_IMAGE_PTX"]) == ("7.5,8.6", "8.6")


def _no_host_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every way tfsmith reads this machine raises: /proc/cpuinfo and cgroups, NVML, nvidia-smi, detect_host."""
    import builder.hardware
    import builder.hardware.cpu
    import builder.hardware.gpu

    def probed(*_: object, **__: object) -> None:
        raise AssertionError("resolving a named target probed the host")

    monkeypatch.setattr(builder.hardware.cpu, "_read", probed)
    monkeypatch.setattr(builder.hardware.cpu, "detect_cpu", probed)
    monkeypatch.setattr(builder.hardware.gpu, "_run_smi", probed)
    monkeypatch.setattr(builder.hardware.gpu, "detect_gpus", probed)
    monkeypatch.setattr(builder.hardware.gpu, "report_from_nvml", probed)
    monkeypatch.setattr(builder.hardware, "detect_host", probed)


@pytest.mark.parametrize(("name", "cuda_cc"), [("x86-64-v3", None), ("sapphirerapids", "8.0,9.0"),
                                                ("neoverse_v1", None), ("zen4", "sm_90")])
def test_resolving_a_named_target_never_probes_the_host(monkeypatch: pytest.MonkeyPatch, name: str,
                                                        cuda_cc: str | None) -> None:
    from builder.deploy.inputs import resolve
    from builder.hardware.reference import reference_build_facts

    _no_host_probe(monkeypatch)
    target = resolve_target(name, cuda_cc=cuda_cc)
    # the build machine is the fixed reference of the target's own architecture, not this host (nor x86 for ARM)
    assert target.host_copts == resolve_target(name, build_machine=reference_build_facts(target.arch)).host_copts
    assert target.host_copts in (("-march=x86-64-v2", "-mtune=generic"), ("-march=armv8-a", "-mtune=generic"))
    assert resolve(name, cuda_cc) == target  # deploy resolves the same way


def test_host_and_auto_still_read_the_given_facts_only(monkeypatch: pytest.MonkeyPatch) -> None:
    _no_host_probe(monkeypatch)
    gpu = GpuFacts(index=0, name="H100", uuid="GPU-1", compute_capability="9.0")
    target = resolve_target("host", cuda_cc="auto", facts=replace(VM, gpu=GpuReport(status="ok", devices=(gpu,))))
    assert target.cuda is not None and target.cuda.capabilities == ("9.0",)
    with pytest.raises(AssertionError, match="probed the host"):
        resolve_target("host")  # no facts given: "host" means reading this machine
