"""plan_build: flags, toolchain, resources, digests and refusals, from recorded/constructed targets only."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from builder import compat
from builder.build.plan import (
    REFERENCE_BUILD_MACHINE,
    BuildMachine,
    BuildOptions,
    plan_build,
    reference_build_facts,
    toolchain_for,
)
from builder.errors import IncompatibleError, InputError
from builder.target_types import BuildTarget, CudaSpec
from builder.targets import resolve_target

GIB = 1024**3

V3 = BuildTarget(
    name="x86-64-v3",
    arch="x86_64",
    features=frozenset({"avx", "avx2", "fma", "bmi2"}),
    copts=("-march=x86-64-v3", "-mtune=generic"),
    host_copts=("-march=x86-64-v2", "-mtune=generic"),
)
CUDA = replace(V3, cuda=CudaSpec(version="12.5.1", cudnn="9.3.0", capabilities=("8.0", "9.0"), ptx="9.0"))
WHEEL = Path("/wheels/tensorflow-2.21.0-cp312-cp312-manylinux_2_27_x86_64.whl")


def test_cpu_plan_has_the_official_wheel_flags_and_target_copts() -> None:
    plan = plan_build(V3)
    flags = plan.bazel_flags
    assert "--repo_env=USE_PYWRAP_RULES=1" in flags
    assert "--repo_env=WHEEL_NAME=tensorflow_cpu" in flags
    assert "--repo_env=HERMETIC_PYTHON_VERSION=3.12" in flags
    assert [f for f in flags if f.startswith("--copt=")] == ["--copt=-march=x86-64-v3", "--copt=-mtune=generic"]
    assert not any(f.startswith("--config=") for f in flags)  # CPU: no config needed, and never `opt`
    assert not any("native" in f for f in flags)
    # host-tool flags are build-machine tuning: in the bazelrc, never among the image-defining flags
    assert not any("host_copt" in f for f in flags)
    assert "build --host_copt=-march=x86-64-v2" in plan.bazelrc_lines


def test_cuda_plan_uses_hermetic_cuda_and_the_cuda_wheel_config() -> None:
    plan = plan_build(CUDA)
    assert plan.bazel_flags[:2] == ("--config=cuda", "--config=cuda_wheel")
    assert "--repo_env=WHEEL_NAME=tensorflow" in plan.bazel_flags
    assert "--repo_env=HERMETIC_CUDA_VERSION=12.5.1" in plan.bazel_flags
    assert "--repo_env=HERMETIC_CUDNN_VERSION=9.3.0" in plan.bazel_flags
    assert "--repo_env=HERMETIC_CUDA_COMPUTE_CAPABILITIES=sm_80,sm_90,compute_90" in plan.bazel_flags
    assert plan.tag == "tf2.21.0-py3.12-x86-64-v3-cu12.5-cc80-cc90-ptx90"


def test_every_config_used_exists_in_that_tf_versions_bazelrc() -> None:
    for tf in compat.SUPPORTED_TF_VERSIONS:
        row = compat.lookup(tf)
        target = replace(CUDA, tf_version=f"{tf}.0", python=row.python_max, compiler_version=row.clang)
        plan = plan_build(target)
        used = {f.removeprefix("--config=") for f in plan.bazel_flags if f.startswith("--config=")}
        assert used and used <= set(row.bazel_configs)
        assert plan.toolchain.clang == row.clang and plan.toolchain.bazel == row.bazel


def test_a_config_missing_from_the_version_is_refused() -> None:
    toolchain = replace(toolchain_for("2.21.0"), bazel_configs=frozenset({"cuda"}))
    with pytest.raises(IncompatibleError, match="cuda_wheel"):
        plan_build(CUDA, toolchain=toolchain)


def test_toolchain_and_checksums_follow_the_compat_table() -> None:
    plan = plan_build(V3)
    assert (plan.toolchain.clang, plan.toolchain.bazel) == ("18.1.8", "7.4.1")
    assert plan.downloads["bazel"].url.endswith("/7.4.1/bazel-7.4.1-linux-x86_64")
    assert plan.downloads["clang"].url.endswith("clang+llvm-18.1.8-x86_64-linux-gnu-ubuntu-18.04.tar.xz")
    assert all(len(d.sha256 or "") == 64 for d in plan.downloads.values())
    arm = plan_build(replace(V3, name="neoverse_v1", arch="aarch64", copts=("-march=armv8.4-a+sve",), host_copts=()))
    assert arm.downloads["bazel"].url.endswith("bazel-7.4.1-linux-arm64")
    assert arm.downloads["clang"].url.endswith("clang+llvm-18.1.8-aarch64-linux-gnu.tar.xz")


def test_unverified_checksum_is_left_empty_never_invented() -> None:
    # clang 17.0.6 for x86_64 (TF 2.18): no checksum we could verify, so the build must be given one.
    target = replace(V3, tf_version="2.18.0", compiler_version="17.0.6")
    plan = plan_build(target)
    assert plan.downloads["clang"].sha256 is None
    assert "CLANG_SHA256" not in plan.build_args
    assert plan.downloads["bazel"].sha256 is not None  # bazel 6.5.0 is pinned


@pytest.mark.parametrize(
    ("cpus", "memory_gib", "jobs", "ram_mb"),
    [
        (2, 24, 2, int(24 * 1024 * 0.85)),  # this VM: cores are the limit
        (16, 8, 3, int(8 * 1024 * 0.85)),  # many cores, little memory: ~2 GB per job wins
        (64, 512, 64, int(512 * 1024 * 0.85)),
        (4, 1, 1, 2048),  # never below one job / one job's memory
    ],
)
def test_resources_fit_the_build_machine(cpus: int, memory_gib: int, jobs: int, ram_mb: int) -> None:
    plan = plan_build(V3, build_machine=BuildMachine(cpus=cpus, memory_bytes=memory_gib * GIB))
    assert (plan.resources.jobs, plan.resources.local_ram_mb, plan.resources.local_cpus) == (jobs, ram_mb, cpus)
    assert f"build --jobs={jobs}" in plan.bazelrc_lines
    assert f"build --local_ram_resources={ram_mb}" in plan.bazelrc_lines
    assert f"build --local_cpu_resources={cpus}" in plan.bazelrc_lines


def test_resources_from_cgroup_aware_host_facts() -> None:
    facts = reference_build_facts("x86_64")
    limited = replace(facts, cpu=replace(facts.cpu, usable_cpus=3, usable_memory_bytes=5 * GIB))
    plan = plan_build(V3, build_machine=limited)
    assert plan.resources.jobs == 2  # 5 GiB * 0.85 / 2 GB per job
    assert plan.resources.local_cpus == 3
    unknown = replace(facts, cpu=replace(facts.cpu, usable_cpus=4, usable_memory_bytes=None))
    # unknown memory: assume 2 GB per core rather than the host's total, then the usual headroom
    assert plan_build(V3, build_machine=unknown).resources.local_ram_mb == int(4 * 2048 * 0.85)


def test_explicit_jobs_and_ram_win() -> None:
    plan = plan_build(V3, BuildOptions(jobs=7, local_ram_mb=9000))
    assert (plan.resources.jobs, plan.resources.local_ram_mb) == (7, 9000)


def test_default_build_machine_is_the_fixed_reference() -> None:
    plan = plan_build(V3)
    assert plan.resources.machine == REFERENCE_BUILD_MACHINE.name
    assert plan.resources.jobs == 16


def test_spec_digest_ignores_the_build_machine_and_build_only_settings() -> None:
    base = plan_build(V3)
    same = [
        plan_build(V3, build_machine=BuildMachine(cpus=2, memory_bytes=4 * GIB)),
        plan_build(V3, BuildOptions(remote_cache="https://cache.example:9092", jobs=3)),
        plan_build(V3, BuildOptions(ca_bundle=Path("/etc/ssl/certs/ca-certificates.crt"))),
        plan_build(replace(V3, host_copts=("-march=x86-64",))),
    ]
    for other in same:
        assert other.spec_digest == base.spec_digest
        assert other.wheel_digest == base.wheel_digest
    different = [
        plan_build(replace(V3, copts=("-march=haswell",))),
        plan_build(V3, BuildOptions(base_image="python:3.12-slim")),
        plan_build(replace(V3, python="3.11")),
        plan_build(V3, BuildOptions(tf_ref="r2.21")),
        plan_build(V3, BuildOptions(labels=(("com.example.team", "ml"),))),
        plan_build(CUDA),
    ]
    digests = {p.spec_digest for p in different} | {base.spec_digest}
    assert len(digests) == len(different) + 1


def test_wheel_digest_survives_runtime_only_changes() -> None:
    base = plan_build(V3)
    runtime_only = plan_build(V3, BuildOptions(base_image="registry.local:5000/python:3.12-slim"))
    assert runtime_only.spec_digest != base.spec_digest
    assert runtime_only.wheel_digest == base.wheel_digest
    assert plan_build(replace(V3, copts=("-march=haswell",))).wheel_digest != base.wheel_digest


def test_manifest_json_is_the_plan_and_labels_carry_the_spec() -> None:
    plan = plan_build(CUDA, BuildOptions(labels=(("com.example.team", "ml"),)))
    manifest = json.loads(plan.to_json())
    assert manifest == plan.manifest()
    assert manifest["spec"]["bazel_flags"] == list(plan.bazel_flags)
    assert manifest["spec"]["cuda"]["hermetic_compute_capabilities"] == "sm_80,sm_90,compute_90"
    assert manifest["build"]["host_copts"] == ["-march=x86-64-v2", "-mtune=generic"]
    labels = plan.labels()
    assert json.loads(labels["io.tfsmith.manifest"]) == manifest["spec"]
    assert labels["io.tfsmith.spec-digest"] == manifest["spec_digest"]
    assert labels["org.opencontainers.image.version"] == "2.21.0"
    assert labels["com.example.team"] == "ml"


def test_source_defaults_to_the_version_tag_or_a_local_context() -> None:
    assert plan_build(V3).source == {
        "kind": "git",
        "repo": "https://github.com/tensorflow/tensorflow.git",
        "ref": "v2.21.0",
    }
    local = plan_build(V3, BuildOptions(tf_source_dir=Path("/src/tf")))
    assert local.source == {"kind": "dir", "context": "tf-source"}
    assert local.build_contexts == {"tf-source": Path("/src/tf")}


def test_prebuilt_wheel_plans_only_the_packages_and_runtime_stages() -> None:
    plan = plan_build(V3, BuildOptions(wheel=WHEEL, wheel_sha256="0" * 64))
    assert plan.stages == ("packages", "runtime")
    assert plan.spec()["prebuilt_wheel"] == {"file": WHEEL.name, "sha256": "0" * 64}
    assert plan.spec()["bazel_flags"] == [] and plan.spec()["toolchain"] is None


@pytest.mark.parametrize(
    ("wheel", "error"),
    [
        ("tensorflow-2.21.0-cp311-cp311-manylinux_2_27_x86_64.whl", "cp311"),
        ("tensorflow-2.21.0-cp312-cp312-manylinux_2_27_aarch64.whl", "aarch64"),
    ],
)
def test_a_wheel_for_another_python_or_cpu_is_refused(wheel: str, error: str) -> None:
    with pytest.raises(IncompatibleError, match=error):
        plan_build(V3, BuildOptions(wheel=Path(wheel), wheel_sha256="0" * 64))


def test_mismatched_versions_are_refused() -> None:
    with pytest.raises(InputError, match="2.20.0"):
        plan_build(V3, BuildOptions(tf_version="2.20.0"))
    with pytest.raises(InputError, match="3.11"):
        plan_build(V3, BuildOptions(python="3.11"))
    with pytest.raises(IncompatibleError, match="3.10"):
        plan_build(replace(V3, python="3.9"))
    with pytest.raises(IncompatibleError, match="gcc"):
        plan_build(replace(V3, compiler="gcc"))


def test_native_is_never_accepted() -> None:
    with pytest.raises(InputError, match="native"):
        plan_build(replace(V3, copts=("-march=native",)))
    with pytest.raises(InputError, match="native"):
        plan_build(replace(V3, host_copts=("-mtune=native",)))


def test_canonical_targets_resolve_against_the_reference_machine() -> None:
    arm = resolve_target("neoverse_v1", build_machine=reference_build_facts("aarch64"))
    x86 = resolve_target("sapphirerapids", build_machine=reference_build_facts("x86_64"))
    assert arm.host_copts == ("-march=armv8-a", "-mtune=generic")
    assert x86.host_copts == ("-march=x86-64-v2", "-mtune=generic")
    assert plan_build(x86).tag == "tf2.21.0-py3.12-sapphirerapids-cpu"
    assert plan_build(arm).docker_arch == "arm64"


def test_a_build_for_the_other_architecture_gives_bazel_host_flags_of_the_target_family() -> None:
    """On an x86 machine an arm64 image is built under emulation: bazel's host tools run as arm64 too."""
    x86_machine = reference_build_facts("x86_64")
    arm = plan_build(resolve_target("neoverse_v1", build_machine=x86_machine), build_machine=x86_machine)
    assert arm.platform == "linux/arm64"
    assert arm.target.host_copts == ("-march=armv8-a", "-mtune=generic")
    assert "build --host_copt=-march=armv8-a" in arm.bazelrc_lines
    assert not any("x86-64" in line for line in arm.bazelrc_lines)
    same = plan_build(resolve_target("x86-64-v3", build_machine=x86_machine), build_machine=x86_machine)
    assert same.platform == "linux/amd64" and same.target.host_copts == ("-march=x86-64-v2", "-mtune=generic")
