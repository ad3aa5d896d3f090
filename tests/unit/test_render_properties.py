"""Property tests: every archspec x86/ARM target renders, and the Dockerfile's flags are the manifest's."""

from __future__ import annotations

import json
from functools import lru_cache

import pytest
from archspec.cpu import TARGETS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builder import compat
from builder.build.plan import BuildOptions, BuildPlan, plan_build, reference_build_facts
from builder.errors import IncompatibleError
from builder.build.render import render_bazelrc, render_dockerfile
from builder.targets import canonical_name, resolve_target
from tests.unit.test_render import bazel_build_flags, instructions

ALL_TARGETS = sorted(name for name, t in TARGETS.items() if t.family.name in ("x86_64", "aarch64"))
CUDA_LISTS = (None, "8.0", "7.0,8.0,9.0", "8.6,8.9")


@lru_cache(maxsize=None)
def _plan(name: str, cuda_cc: str | None, tf: str, python: str, remote: bool) -> BuildPlan | None:
    """A plan, or None when the toolchain's clang cannot target that CPU (a refusal, not a crash)."""
    arch = TARGETS[name].family.name
    if cuda_cc and arch != "x86_64":
        cuda_cc = None
    try:
        target = resolve_target(
            canonical_name(name), cuda_cc=cuda_cc, tf_version=tf, python=python,
            build_machine=reference_build_facts(arch),
        )
    except IncompatibleError:
        return None
    options = BuildOptions(remote_cache="https://cache.example/bazel" if remote else None)
    return plan_build(target, options)


def test_the_target_list_is_large_and_most_render() -> None:
    assert len(ALL_TARGETS) > 40
    rendered = [name for name in ALL_TARGETS if _plan(name, None, "2.21.0", "3.12", False) is not None]
    assert len(rendered) >= 0.8 * len(ALL_TARGETS)
    assert {"x86_64_v3", "sapphirerapids", "zen4", "neoverse_v1", "neoverse_v2"} <= set(rendered)


@pytest.mark.parametrize("name", ALL_TARGETS)
def test_each_target_renders_with_defaults(name: str) -> None:
    """Every archspec x86/ARM target either renders (flags in Dockerfile == manifest) or is refused explicitly."""
    plan = _plan(name, None, "2.21.0", "3.12", False)
    if plan is None:
        with pytest.raises(IncompatibleError):
            resolve_target(canonical_name(name), build_machine=reference_build_facts(TARGETS[name].family.name))
        return
    text = render_dockerfile(plan)
    assert bazel_build_flags(text) == json.loads(plan.to_json())["spec"]["bazel_flags"]
    assert [f"--copt={c}" for c in plan.target.copts] == [f for f in bazel_build_flags(text) if f.startswith("--copt=")]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(ALL_TARGETS),
    cuda_cc=st.sampled_from(CUDA_LISTS),
    tf=st.sampled_from([f"{v}.0" for v in compat.SUPPORTED_TF_VERSIONS]),
    python=st.sampled_from(["3.10", "3.11", "3.12"]),
    remote=st.booleans(),
)
def test_every_target_renders_and_flags_match_the_manifest(
    name: str, cuda_cc: str | None, tf: str, python: str, remote: bool
) -> None:
    plan = _plan(name, cuda_cc, tf, python, remote)
    if plan is None:
        return  # refused with IncompatibleError: checked to be an explicit refusal, not a crash
    text = render_dockerfile(plan)
    manifest = json.loads(plan.to_json())
    flags = bazel_build_flags(text)
    assert flags == manifest["spec"]["bazel_flags"]
    assert [f.removeprefix("--copt=") for f in flags if f.startswith("--copt=")] == manifest["spec"]["target"]["copts"]
    assert manifest["spec"]["target"]["copts"] == list(plan.target.copts)
    host = [line.removeprefix("build --host_copt=") for line in render_bazelrc(plan).splitlines()
            if line.startswith("build --host_copt=")]
    assert host == manifest["build"]["host_copts"]
    assert "native" not in text and "--config=opt" not in text
    assert {n for n, _ in instructions(text)} <= {"FROM", "ARG", "ENV", "RUN", "COPY", "WORKDIR", "SHELL",
                                                  "ENTRYPOINT", "CMD", "LABEL"}
    env = " ".join(rest for n, rest in instructions(text) if n == "ENV")
    assert f"TFSMITH_IMAGE_FEATURES={','.join(sorted(plan.target.features))}" in env
    assert json.loads(plan.labels()["io.tfsmith.manifest"]) == manifest["spec"]
    row = compat.lookup(tf)
    configs = {f.removeprefix("--config=") for f in flags if f.startswith("--config=")}
    assert configs <= set(row.bazel_configs)
    assert ("cuda_wheel" in configs) == (plan.target.cuda is not None)


@pytest.mark.parametrize("name", ALL_TARGETS)
def test_refusals_are_explicit(name: str) -> None:
    """A target the toolchain cannot build for is refused with IncompatibleError, never another error."""
    arch = TARGETS[name].family.name
    try:
        resolve_target(canonical_name(name), build_machine=reference_build_facts(arch))
    except IncompatibleError as error:
        assert name in str(error) or canonical_name(name) in str(error)
