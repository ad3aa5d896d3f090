"""Placement property: a node labelled as NFD would label a machine may run a target's Deployment iff the
preflight guard (what `tfsmith check --target` runs) accepts that machine, over every archspec target of
the x86_64 and aarch64 families and every recorded Linux /proc/cpuinfo (tests/fixtures/cpuinfo plus the
dumps archspec's wheel ships), evaluated on the rendered manifests by builder.deploy.simulate.

The guard's verdict here is builder.guard.cpu_problem (the function `tfsmith check` and the in-image guard
call) plus the architecture: an image of another architecture cannot start at all.

Targets require only the features their compiler flags may emit (builder/data/cpu_features.json), so the
intrinsic-only x86 features NFD's cpuid library does not detect (clflushopt, clwb, rdpid, fsgsbase, pku,
tsc_adjust) no longer leave a gap. One known gap, pinned exactly: the Armv9.x FP8 and LUT hwcaps the
olympus target requires are not among the hwcaps NFD names, so no label or rule can select on them; a
Neoverse V2 machine is selected for an olympus image and the image's guard refuses there. The test
lists every such (fixture, target) pair it finds and requires the list to be exactly KNOWN_GAPS, so a
change in either direction is seen.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import archspec.cpu
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builder import guard
from builder.deploy import inputs, manifests, nfd, plan, simulate
from builder.errors import TfsmithError
from builder.hardware.cpu import arch_of
from builder.target_types import BuildTarget
from builder.targets import FAMILIES, canonical_name

REPO = Path(__file__).resolve().parents[2]
ARCHSPEC_DUMPS = Path(archspec.cpu.__file__).resolve().parents[1] / "json" / "tests" / "targets"
KNOWN_GAPS = {  # (fixture, target): features the guard wants that NFD cannot see
    (machine, "olympus"): ("f8cvt", "f8dp2", "f8dp4", "f8e4m3", "f8e5m2", "f8fma", "faminmax", "fpmr", "lut")
    for machine in ("linux-rhel9-neoverse_v2", "linux-ubuntu22.04-neoverse_v2", "linux-ubuntu24.04-neoverse_v3ae")
}


@lru_cache(maxsize=1)
def machines() -> tuple[tuple[str, str, frozenset[str]], ...]:
    """(name, arch, flags) of every recorded Linux x86_64/aarch64 /proc/cpuinfo."""
    paths = sorted((REPO / "tests" / "fixtures" / "cpuinfo").iterdir()) + sorted(ARCHSPEC_DUMPS.glob("linux-*"))
    found = []
    for path in paths:
        if path.suffix == ".md":
            continue
        data = guard.parse_cpuinfo(path.read_text(encoding="utf-8", errors="replace"))
        arch = arch_of(data, "unknown")
        if arch in FAMILIES:
            found.append((path.name, arch, guard.cpuinfo_flags(data)))
    return tuple(found)


@lru_cache(maxsize=1)
def targets() -> tuple[tuple[BuildTarget, ...], tuple[str, ...]]:
    """Every archspec target of the families TensorFlow builds for, resolved as `tfsmith build` would, and
    the names the toolchain cannot target (no image can exist for those: nothing to place)."""
    resolved, refused = [], []
    for name, micro in sorted(archspec.cpu.TARGETS.items()):
        if micro.family.name not in FAMILIES:
            continue
        try:
            resolved.append(inputs.resolve(canonical_name(name)))
        except TfsmithError:
            refused.append(name)
    return tuple(resolved), tuple(refused)


@lru_cache(maxsize=None)
def rendered(target: BuildTarget) -> tuple[dict, ...]:
    images = (plan.FleetImage(target=target, image="registry.example/m:t"),)
    fleet = plan.plan_fleet(images, plan.DeployOptions(model_name="m"), plan.default_resources())
    return tuple(manifests.fleet(fleet))


def guard_accepts(target: BuildTarget, arch: str, flags: frozenset[str]) -> bool:
    return arch == target.arch and guard.cpu_problem(target.name, target.features, flags) is None


def deployment_matches(target: BuildTarget, arch: str, flags: frozenset[str]) -> bool:
    objects = list(rendered(target))
    labels = simulate.node_labels(arch, flags, objects)
    (workload,) = simulate.workloads(objects)
    return simulate.can_schedule(workload, labels)


def test_the_corpus_is_what_we_think() -> None:
    names = {name for name, _, _ in machines()}
    archs = {arch for _, arch, _ in machines()}
    assert len(names) >= 35 and archs == {"x86_64", "aarch64"}
    assert {"this-vm-amd-epyc-zen3", "xeon-spr-guest-amx-hidden", "linux-unknown-sapphirerapids"} <= names
    resolved, refused = targets()
    assert len(resolved) >= 50
    assert {"x86-64-v3", "x86-64-v4", "sapphirerapids", "neoverse_v1"} <= {t.name for t in resolved}
    assert len(refused) <= 5, refused  # only what clang 18 cannot target (zen5, zen6, neoverse_v3ae)


def test_affinity_matches_iff_the_guard_accepts_on_every_fixture() -> None:
    resolved, _ = targets()
    gaps = {}
    checked = 0
    for target in resolved:
        invisible = set(plan.placement(target).invisible)
        for name, arch, flags in machines():
            accepts, matches = guard_accepts(target, arch, flags), deployment_matches(target, arch, flags)
            checked += 1
            if accepts:
                assert matches, f"{name} can run {target.name} but its Deployment excludes it"
            elif matches:
                missing = set(guard.missing_features(target.features, flags))
                assert missing <= invisible, f"{target.name} is placed on {name}, which lacks {sorted(missing)}"
                gaps[(name, target.name)] = tuple(sorted(missing))
    assert checked >= 50 * 35
    assert gaps == KNOWN_GAPS


@pytest.mark.parametrize("name", ["x86-64-v3", "x86-64-v4", "sapphirerapids"])
def test_the_example_targets_have_no_gap_on_any_fixture(name: str) -> None:
    target = inputs.resolve(name)
    for fixture, arch, flags in machines():
        assert deployment_matches(target, arch, flags) == guard_accepts(target, arch, flags), fixture


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_dropping_flags_from_a_real_machine_keeps_the_property(data: st.DataObject) -> None:
    """Hypervisors hide flags one by one; any subset of a real machine's flags must still place correctly."""
    name, arch, flags = data.draw(st.sampled_from(machines()))
    resolved, _ = targets()
    target = data.draw(st.sampled_from([t for t in resolved if t.arch == arch]))
    dropped = data.draw(st.sets(st.sampled_from(sorted(flags)), max_size=6))
    host = flags - dropped
    accepts, matches = guard_accepts(target, arch, host), deployment_matches(target, arch, host)
    if accepts:
        assert matches
    elif matches:
        assert set(guard.missing_features(target.features, host)) <= set(plan.placement(target).invisible)


@pytest.mark.parametrize("exclusive", [False, True])
def test_a_fleet_gives_each_machine_the_best_image_it_can_run(exclusive: bool) -> None:
    """One fleet of every resolvable target of both families: on each recorded machine the images it
    should run (all preferences met; with --exclusive, all it may run) include the most demanding ones it
    can run, and no machine that can run some image is left without one."""
    resolved, _ = targets()
    images = tuple(plan.FleetImage(target=t, image=f"registry.example/m:{t.tag_token}") for t in resolved)
    options = plan.DeployOptions(model_name="m", exclusive=exclusive)
    fleet = plan.plan_fleet(images, options, plan.default_resources())
    objects = manifests.fleet(fleet)
    by_name = {m.name: m.image.target for m in fleet.members}
    for name, arch, flags in machines():
        labels = simulate.node_labels(arch, flags, objects)
        runnable = {n for n, t in by_name.items() if guard_accepts(t, arch, flags)}
        placed = {o["metadata"]["name"] for o in simulate.workloads(objects) if simulate.can_schedule(o, labels)}
        best = set(simulate.best_for_node(objects, labels))
        in_gap = any(k[0] == name for k in KNOWN_GAPS)
        maximal = {n for n in runnable if not any(by_name[o].features > by_name[n].features for o in runnable)}
        if exclusive:
            assert best == placed, name  # nothing left to prefer: placement is the answer
        else:
            assert runnable <= placed, name  # the required affinity never excludes a capable machine
        # a machine in a gap may be offered an image its guard refuses; never one it is not placed on
        assert maximal <= best or in_gap, (name, sorted(maximal - best))
        assert placed - runnable == set() or in_gap, (name, sorted(placed - runnable))
        assert best or not runnable, f"{name} runs nothing although {sorted(runnable)[:3]} fit"


def test_exclusive_makes_the_preference_a_requirement() -> None:
    images = inputs.from_targets("x86-64-v3,x86-64-v4,sapphirerapids", "registry.example/m")
    fleet = plan.plan_fleet(images, plan.DeployOptions(model_name="m", exclusive=True), plan.default_resources())
    objects = manifests.fleet(fleet)
    spr = next(f for n, _, f in machines() if n == "linux-unknown-sapphirerapids")
    zen3 = next(f for n, _, f in machines() if n == "this-vm-amd-epyc-zen3")
    for flags, expected in ((spr, ["m-sapphirerapids"]), (zen3, ["m-x86-64-v3"])):
        labels = simulate.node_labels("x86_64", flags, objects)
        assert [o["metadata"]["name"] for o in simulate.workloads(objects) if simulate.can_schedule(o, labels)] == expected


GPUS = [(major, minor) for major in (5, 6, 7, 8, 9, 10, 12) for minor in (0, 2, 5, 6, 7, 9)]


@pytest.mark.parametrize("cuda_cc", ["7.5", "8.0,9.0", "8.6", "7.0,8.0,8.9"])
def test_gpu_selectors_match_iff_the_guard_can_run_the_gpu(cuda_cc: str) -> None:
    target = inputs.resolve("x86-64-v3", cuda_cc)
    assert target.cuda is not None
    caps = [guard.parse_capability(c) for c in target.cuda.capabilities]
    ptx = guard.parse_capability(target.cuda.ptx)
    zen3 = next(f for n, _, f in machines() if n == "this-vm-amd-epyc-zen3")
    objects = list(rendered(target))
    (workload,) = simulate.workloads(objects)
    for gpu in GPUS:
        labels = simulate.node_labels("x86_64", zen3, objects, gpu=gpu)
        assert simulate.can_schedule(workload, labels) == guard.gpu_can_run(gpu, caps, ptx), (cuda_cc, gpu)
    assert not simulate.can_schedule(workload, simulate.node_labels("x86_64", zen3, objects))  # no GPU labels


def test_nfd_spellings_and_blacklist_spot_checks() -> None:
    """NFD's spellings for the flags that matter to TensorFlow builds (from its documentation)."""
    expected = {"avx": "AVX", "avx2": "AVX2", "fma": "FMA3", "avx512f": "AVX512F", "avx512bw": "AVX512BW",
                "avx512cd": "AVX512CD", "avx512dq": "AVX512DQ", "avx512vl": "AVX512VL", "avx512_vnni": "AVX512VNNI",
                "avx512_bf16": "AVX512BF16", "avx512_fp16": "AVX512FP16", "avx_vnni": "AVXVNNI",
                "amx_tile": "AMXTILE", "amx_int8": "AMXINT8", "amx_bf16": "AMXBF16", "sse4_2": "SSE42",
                "sse4_1": "SSE4", "abm": "LZCNT", "pclmulqdq": "CLMUL", "aes": "AESNI", "sha_ni": "SHA"}
    assert {f: nfd.nfd_flag("x86_64", f) for f in expected} == expected
    assert {"BMI1", "BMI2", "F16C", "LZCNT", "POPCNT", "SSE", "SSE2", "SSE3", "SSE4", "SSE42", "SSSE3", "CMOV",
            "CX16"} <= nfd.DEFAULT_BLACKLIST
    assert not {"AVX", "AVX2", "FMA3", "AVX512F", "AVX512VNNI", "AMXTILE"} & nfd.DEFAULT_BLACKLIST
    assert nfd.nfd_flag("aarch64", "asimddp") == "ASIMDDP" and nfd.nfd_flag("aarch64", "sve") == "SVE"
    assert nfd.nfd_flag("x86_64", "clwb") is None  # the cpuid library has no such flag
    # a /proc/cpuinfo that says pni (SSE3) and lzcnt-as-abm labels the way NFD does
    labels = nfd.default_labels("x86_64", {"pni", "abm", "avx2", "fma"})
    assert labels == {"kubernetes.io/arch": "amd64", nfd.LABEL_PREFIX + "AVX2": "true", nfd.LABEL_PREFIX + "FMA3": "true"}
    assert nfd.node_cpuid("x86_64", {"pni", "abm"}) == {"SSE3", "LZCNT"}


def test_x86_64_v3_cannot_be_selected_on_default_labels_alone() -> None:
    """v3 needs BMI1/BMI2/F16C/LZCNT, which NFD does not label by default: the affinity requires the rule's
    label, and the rule matches cpu.cpuid for them."""
    objects = list(rendered(inputs.resolve("x86-64-v3")))
    rule, deploy = objects[0], objects[2]
    term = deploy["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"]
    assert {"key": "tfsmith.feature.node.kubernetes.io/x86-64-v3", "operator": "In", "values": ["true"]} in term
    assert {"BMI1", "BMI2", "F16C", "LZCNT", "AVX2", "FMA3"} <= set(rule["spec"]["rules"][0]["matchFeatures"][0]["matchExpressions"])
    zen3 = next(f for n, _, f in machines() if n == "this-vm-amd-epyc-zen3")
    assert not simulate.can_schedule(deploy, nfd.default_labels("x86_64", zen3))  # stock NFD alone: Pending, not wrong


# hwcaps (AT_HWCAP, AT_HWCAP2) QEMU 7.2 user mode reports for its emulated CPUs, read in arm64 containers on
# this project's machines: what NFD's arm64 cpu source reads on such a node, and what the image's guard reads.
QEMU_HWCAPS = {"cortex-a53": (0x8FB, 0), "neoverse-n1": (0x119FFB, 0), "max": (0xECFFFFFB, 0x7F877FFF)}


def test_a_two_architecture_fleet_places_each_image_only_on_its_own_architecture() -> None:
    """`tfsmith deploy --targets x86-64-v3,neoverse_v1`: on every recorded machine of either family, and on the
    emulated arm64 CPUs the engine tests run the guard on, an image is placed exactly where its guard lets it
    start; an x86 machine never gets the arm64 image, nor an arm64 machine the x86 one."""
    images = inputs.from_targets("x86-64-v3,neoverse_v1", "registry.example/m")
    fleet = plan.plan_fleet(images, plan.DeployOptions(model_name="m"), plan.default_resources())
    objects = manifests.fleet(fleet)
    by_name = {m.name: m.image.target for m in fleet.members}
    assert {m.placement.arch for m in fleet.members} == {"amd64", "arm64"}
    emulated = [(f"qemu-{cpu}", "aarch64", guard.hwcap_names(*caps)) for cpu, caps in QEMU_HWCAPS.items()]
    seen = {"aarch64": 0, "x86_64": 0}
    for name, arch, flags in [*machines(), *emulated]:
        labels = simulate.node_labels(arch, flags, objects)
        placed = {o["metadata"]["name"] for o in simulate.workloads(objects) if simulate.can_schedule(o, labels)}
        assert all(by_name[n].arch == arch for n in placed), (name, placed)
        runnable = {n for n, t in by_name.items() if guard_accepts(t, arch, flags)}
        assert placed == runnable, (name, sorted(placed ^ runnable))
        seen[arch] += bool(placed)
    assert seen["aarch64"] >= 3 and seen["x86_64"] >= 10  # both halves of the fleet really land somewhere
    a53 = simulate.node_labels("aarch64", guard.hwcap_names(*QEMU_HWCAPS["cortex-a53"]), objects)
    assert not any(simulate.can_schedule(o, a53) for o in simulate.workloads(objects))
