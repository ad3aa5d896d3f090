"""render: the Dockerfile's shape, the context on disk, atomic writes and refusals."""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from pathlib import Path

import jinja2
import pytest

from builder.build.plan import BuildOptions, BuildPlan, plan_build
from builder.errors import InputError
from builder.build.render import (
    GUARD_SOURCE,
    environment,
    is_context,
    render_bazelrc,
    render_context,
    render_dockerfile,
    render_set,
)
from builder.build.from_settings import canonical_plans
from builder.target_types import BuildTarget, CudaSpec

V3 = BuildTarget(
    name="x86-64-v3",
    arch="x86_64",
    features=frozenset({"avx", "avx2", "fma"}),
    copts=("-march=x86-64-v3", "-mtune=generic"),
    host_copts=("-march=x86-64-v2", "-mtune=generic"),
)
CUDA = replace(V3, cuda=CudaSpec(version="12.5.1", cudnn="9.3.0", capabilities=("8.0", "9.0"), ptx="9.0"))
CA = Path("/etc/ssl/certs/ca-certificates.crt")
INSTRUCTIONS = {"FROM", "ARG", "ENV", "RUN", "COPY", "WORKDIR", "SHELL", "ENTRYPOINT", "CMD", "LABEL"}


def instructions(dockerfile: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, rest) per logical line: comments dropped, backslash continuations joined."""
    logical, current = [], ""
    for line in dockerfile.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    assert current == "", "dangling line continuation"
    return [(text.split(None, 1)[0], text.split(None, 1)[1] if " " in text.strip() else "") for text in logical]


def bazel_build_flags(dockerfile: str) -> list[str]:
    """The flags of the `bazel build` command in the Dockerfile, in order."""
    for name, rest in instructions(dockerfile):
        if name == "RUN" and " bazel build " in f" {rest} ":
            words = rest.split()
            start = words.index("build", words.index("bazel")) + 1
            end = next(i for i in range(start, len(words)) if words[i].startswith("//"))
            return words[start:end]
    raise AssertionError("no bazel build in the Dockerfile")


def stage_of(dockerfile: str, name: str) -> list[tuple[str, str]]:
    """The instructions of one stage (`FROM ... AS name` up to the next FROM)."""
    steps, inside = [], False
    for instruction, rest in instructions(dockerfile):
        if instruction == "FROM":
            inside = rest.endswith(f" AS {name}")
        if inside:
            steps.append((instruction, rest))
    return steps


def pip_install(dockerfile: str) -> str:
    """The packages stage's RUN that installs TensorFlow, up to the end of its pip command."""
    runs = [rest for name, rest in stage_of(dockerfile, "packages") if name == "RUN" and " pip install " in rest]
    assert len(runs) == 1, runs
    return runs[0].split(" pip install ", 1)[1].split(" && ", 1)[0]


def test_source_build_has_every_stage_in_order_and_labels_last() -> None:
    text = render_dockerfile(plan_build(V3))
    steps = instructions(text)
    assert {name for name, _ in steps} <= INSTRUCTIONS
    froms = [rest for name, rest in steps if name == "FROM"]
    assert froms == [
        "debian:bookworm-slim AS toolchain",
        "toolchain AS source",
        "source AS build",
        "scratch AS wheel",
        "--platform=$BUILDPLATFORM python:3.12-slim-bookworm AS packages",
        "python:3.12-slim-bookworm AS runtime",
    ]
    assert steps[-1][0] == "LABEL"
    assert [name for name, _ in steps].count("LABEL") == 1


def test_rules_no_syntax_line_no_pull_no_native_no_opt() -> None:
    for plan in (plan_build(V3), plan_build(CUDA), plan_build(V3, BuildOptions(ca_bundle=CA))):
        text = render_dockerfile(plan)
        assert "# syntax" not in text.lower()
        assert "--pull" not in text
        assert "native" not in text
        assert "--config=opt" not in text


def test_flags_in_dockerfile_are_the_plans_and_the_manifests() -> None:
    plan = plan_build(CUDA)
    flags = bazel_build_flags(render_dockerfile(plan))
    assert flags == list(plan.bazel_flags) == plan.manifest()["spec"]["bazel_flags"]
    assert "//tensorflow/tools/pip_package:wheel" in render_dockerfile(plan)


def test_bazel_state_is_on_a_locked_cache_mount_and_bazelrc_is_the_users() -> None:
    plan = plan_build(V3, BuildOptions(remote_cache="grpcs://cache.example:443"))
    text = render_dockerfile(plan)
    assert re.search(r"RUN --mount=type=cache,id=tfsmith-bazel-2\.21-x86_64,target=/root/\.cache,sharing=locked", text)
    assert "COPY tfsmith.bazelrc /src/tensorflow/.bazelrc.user" in text
    rc = render_bazelrc(plan)
    assert "build --remote_cache=grpcs://cache.example:443" in rc
    assert "build --disk_cache=/root/.cache/bazel-disk" in rc
    assert "build --host_copt=-march=x86-64-v2" in rc
    assert "remote_cache" not in text  # build-machine settings stay out of the image definition


def test_toolchain_downloads_are_verified_against_pinned_checksums() -> None:
    plan = plan_build(V3)
    text = render_dockerfile(plan)
    assert f"ARG CLANG_SHA256={plan.downloads['clang'].sha256}" in text
    assert f"ARG BAZEL_SHA256={plan.downloads['bazel'].sha256}" in text
    assert text.count("sha256sum -c -") == 2


def test_an_unverified_checksum_makes_the_build_arg_required() -> None:
    plan = plan_build(replace(V3, tf_version="2.18.0", compiler_version="17.0.6"))
    text = render_dockerfile(plan)
    assert "ARG CLANG_SHA256=\n" in text
    assert 'test -n "${CLANG_SHA256}" ||' in text
    assert "pass --build-arg CLANG_SHA256=" in text


def test_ca_bundle_is_a_secret_mount_never_a_layer() -> None:
    with_ca = render_dockerfile(plan_build(V3, BuildOptions(ca_bundle=CA)))
    without = render_dockerfile(plan_build(V3))
    assert "--mount=type=secret,id=ca_bundle" in with_ca
    assert "PIP_CERT=/run/secrets/ca_bundle" in with_ca and "GIT_SSL_CAINFO=/run/secrets/ca_bundle" in with_ca
    assert str(CA) not in with_ca  # the host path never reaches the Dockerfile
    copied = " ".join(rest for name, rest in instructions(with_ca) if name in ("COPY", "ADD"))
    assert "ca_bundle" not in copied and ".crt" not in copied and ".pem" not in copied
    assert "secret" not in without


def test_prebuilt_wheel_renders_only_the_packages_and_runtime_stages() -> None:
    wheel = Path("/w/tensorflow-2.21.0-cp312-cp312-manylinux_2_27_x86_64.whl")
    text = render_dockerfile(plan_build(V3, BuildOptions(wheel=wheel, wheel_sha256="0" * 64)))
    assert [rest for name, rest in instructions(text) if name == "FROM"] == [
        "--platform=$BUILDPLATFORM python:3.12-slim-bookworm AS packages", "python:3.12-slim-bookworm AS runtime"]
    assert "bazel" not in text.replace("bazel_flags", "")
    assert f'"/tmp/wheels/{wheel.name}"' in text
    assert "--mount=type=bind,source=wheels,target=/tmp/wheels" in text


def test_local_source_comes_from_the_named_context() -> None:
    text = render_dockerfile(plan_build(V3, BuildOptions(tf_source_dir=Path("/src/tf"))))
    assert "COPY --from=tf-source . /src/tensorflow" in text
    assert "git fetch" not in text


def test_runtime_guard_environment_matches_the_target() -> None:
    text = render_dockerfile(plan_build(CUDA))
    env = " ".join(rest for name, rest in instructions(text) if name == "ENV")
    assert "TFSMITH_IMAGE_TARGET=x86-64-v3" in env
    assert "TFSMITH_IMAGE_FEATURES=avx,avx2,fma" in env
    assert "TFSMITH_IMAGE_CUDA_CC=8.0,9.0" in env and "TFSMITH_IMAGE_PTX=9.0" in env
    assert 'ENTRYPOINT ["/usr/local/bin/tfsmith-guard", "--"]' in text


def test_no_image_variable_is_a_tfsmith_setting() -> None:
    """Every image sets the guard's variables; none of them may change `tfsmith build` run inside it."""
    from builder.build.settings import SETTINGS_ENV

    for plan in (plan_build(V3), plan_build(CUDA)):
        env = " ".join(rest for name, rest in instructions(render_dockerfile(plan)) if name == "ENV")
        names = {item.split("=", 1)[0] for item in env.split() if item.startswith("TFSMITH")}
        assert names and all(n.startswith("TFSMITH_IMAGE_") for n in names), names
        assert not names & set(SETTINGS_ENV.values())


def test_cuda_images_install_tensorflow_with_its_cuda_libraries(tmp_path: Path) -> None:
    """TensorFlow's wheel pulls no CUDA libraries without [and-cuda]: a CUDA image installs the extra,
    from a compiled wheel and from a prebuilt one alike; CPU images do not."""
    install = pip_install(render_dockerfile(plan_build(CUDA)))
    assert " ".join(install.split()).endswith('/tmp/wheels/*.whl "tensorflow[and-cuda]==2.21.0"'), install
    wheel = tmp_path / "tensorflow-2.21.0-cp312-cp312-manylinux_2_27_x86_64.whl"
    prebuilt = plan_build(CUDA, BuildOptions(wheel=wheel, wheel_sha256="0" * 64))
    assert f'"/tmp/wheels/{wheel.name}" "tensorflow[and-cuda]==2.21.0"' in pip_install(render_dockerfile(prebuilt))
    assert "and-cuda" not in render_dockerfile(plan_build(V3))
    assert plan_build(CUDA).spec()["runtime"]["pip_extras"] == ["tensorflow[and-cuda]==2.21.0"]


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_packages_are_installed_by_the_build_machines_pip_for_the_images_platform(arch: str) -> None:
    """Whatever the image's CPU family, pip runs in a stage on the build machine's own platform, choosing wheels
    for the image's platform and Python; the runtime stage copies the venv in and runs one short check on the
    image's CPU (under emulation for another family), never pip."""
    target = replace(V3, arch=arch, copts=(), host_copts=()) if arch == "aarch64" else V3
    wheel = Path(f"/w/tensorflow-2.21.0-cp311-cp311-manylinux_2_27_{arch}.whl")
    text = render_dockerfile(plan_build(replace(target, python="3.11"),
                                        BuildOptions(wheel=wheel, wheel_sha256="0" * 64, python="3.11")))
    packages = stage_of(text, "packages")
    assert packages[0] == ("FROM", "--platform=$BUILDPLATFORM python:3.11-slim-bookworm AS packages")
    install = " ".join(pip_install(text).split())
    assert "--only-binary=:all:" in install and "--python-version 3.11" in install and "--abi cp311" in install
    assert f"--platform manylinux2014_{arch}" in install and f"--platform manylinux_2_%s_{arch}" in " ".join(
        rest for _, rest in packages)
    assert '--target "$site"' in install and "/opt/venv/lib/python3.11/site-packages" in " ".join(
        rest for _, rest in packages)
    runtime = stage_of(text, "runtime")
    assert runtime[0] == ("FROM", "python:3.11-slim-bookworm AS runtime")
    assert ("COPY", "--from=packages /opt/venv /opt/venv") in runtime
    runs = [rest for name, rest in runtime if name == "RUN"]
    assert len(runs) == 1 and "pip" not in runs[0] and 'have == "3.11"' in runs[0]


def test_tfsmiths_local_base_for_another_cpu_family_installs_from_the_build_machines_twin() -> None:
    """tfsmith's local bases are one platform each (`tfsmith/python:bookworm-arm64` beside the build machine's
    `tfsmith/python:bookworm`); any other base is taken to name every platform (python:3.11-slim-bookworm)."""
    from builder.build.plan import packages_base_for

    assert packages_base_for("tfsmith/python:bookworm-arm64") == "tfsmith/python:bookworm"
    assert packages_base_for("tfsmith/python:bookworm-amd64") == "tfsmith/python:bookworm"
    assert packages_base_for("tfsmith/python:bookworm") == "tfsmith/python:bookworm"
    assert packages_base_for("python:3.11-slim-bookworm") == "python:3.11-slim-bookworm"
    assert packages_base_for("registry.example/tfsmith/python:bookworm-arm64") == (
        "registry.example/tfsmith/python:bookworm-arm64")
    plan = plan_build(V3, BuildOptions(base_image="tfsmith/python:bookworm-arm64"))
    assert "FROM --platform=$BUILDPLATFORM tfsmith/python:bookworm AS packages" in render_dockerfile(plan)
    assert plan.manifest()["build"]["packages_base"] == "tfsmith/python:bookworm"


def test_a_cpu_only_wheel_is_refused_for_a_cuda_image() -> None:
    from builder.errors import IncompatibleError

    wheel = Path("tensorflow_cpu-2.21.0-cp312-cp312-manylinux_2_27_x86_64.whl")
    with pytest.raises(IncompatibleError, match="CPU-only"):
        plan_build(CUDA, BuildOptions(wheel=wheel, wheel_sha256="0" * 64))


def test_label_values_are_escaped_for_docker() -> None:
    plan = plan_build(V3, BuildOptions(labels=(("com.example.note", 'say "hi" $HOME \\ `x`'),)))
    text = render_dockerfile(plan)
    assert 'com.example.note="say \\"hi\\" \\$HOME \\\\ `x`"' in text


def test_templates_fail_on_undefined_names() -> None:
    with pytest.raises(jinja2.UndefinedError):
        environment().from_string("{{ plan.no_such_field }}").render(plan=plan_build(V3))


def test_render_context_writes_a_complete_deterministic_context(tmp_path: Path) -> None:
    plan = plan_build(CUDA)
    out = render_context(plan, tmp_path / "ctx")
    names = sorted(p.name for p in out.iterdir())
    assert names == [".dockerignore", "Dockerfile", "manifest.json", "spec.json", "tfsmith-guard", "tfsmith.bazelrc"]
    assert json.loads((out / "manifest.json").read_text()) == plan.manifest()
    assert json.loads((out / "spec.json").read_text())["spec_digest"] == plan.spec_digest
    assert (out / "tfsmith-guard").read_bytes() == GUARD_SOURCE.read_bytes()
    assert os.access(out / "tfsmith-guard", os.X_OK)
    first = {p.name: p.read_bytes() for p in out.iterdir()}
    render_context(plan, out)  # replacing our own context is fine, and gives the same bytes
    assert {p.name: p.read_bytes() for p in out.iterdir()} == first
    assert [p.name for p in tmp_path.iterdir()] == ["ctx"]  # no temp folders left behind


def test_render_context_copies_the_prebuilt_wheel(tmp_path: Path) -> None:
    wheel = tmp_path / "tensorflow-2.21.0-cp312-cp312-manylinux_2_27_x86_64.whl"
    wheel.write_bytes(b"not really a wheel")
    out = render_context(plan_build(V3, BuildOptions(wheel=wheel, wheel_sha256="0" * 64)), tmp_path / "ctx")
    assert (out / "wheels" / wheel.name).read_bytes() == b"not really a wheel"
    assert not (out / "tfsmith.bazelrc").exists()


def test_a_folder_that_is_not_a_context_is_never_clobbered(tmp_path: Path) -> None:
    precious = tmp_path / "home"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    with pytest.raises(InputError, match="not a tfsmith build context"):
        render_context(plan_build(V3), precious)
    assert [p.name for p in precious.iterdir()] == ["notes.txt"]
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(InputError, match="not a folder"):
        render_context(plan_build(V3), a_file)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "home"]


def test_a_failed_render_leaves_nothing_behind(tmp_path: Path) -> None:
    missing = tmp_path / "gone" / "tensorflow-2.21.0-cp312-cp312-manylinux_2_27_x86_64.whl"
    plan = plan_build(V3, BuildOptions(wheel=missing, wheel_sha256="0" * 64))
    with pytest.raises(InputError, match="wheel not found"):
        render_context(plan, tmp_path / "ctx")
    assert list(tmp_path.iterdir()) == []


def test_render_set_replaces_the_whole_canonical_folder(tmp_path: Path) -> None:
    plans = canonical_plans()
    assert [name for name, _ in plans] == [
        "x86-64-v3-cpu",
        "x86-64-v4-cpu",
        "sapphirerapids-cpu",
        "neoverse_v1-cpu",
        "x86-64-v3-cu12.5-cc80-cc90-ptx90",
    ]
    out = tmp_path / "dockerfiles"
    render_set(plans[:2], out)
    render_set(plans, out)
    assert sorted(p.name for p in out.iterdir()) == sorted(["README.md", *(name for name, _ in plans)])
    assert all(is_context(out / name) for name, _ in plans)
    (out / "stray.txt").write_text("hand-made")
    with pytest.raises(InputError, match="stray.txt"):
        render_set(plans, out)


def test_canonical_plans_do_not_depend_on_this_host() -> None:
    plans: list[tuple[str, BuildPlan]] = canonical_plans()
    for _, plan in plans:
        assert plan.resources.machine.startswith("reference")
        assert plan.target.host_copts in (("-march=x86-64-v2", "-mtune=generic"), ("-march=armv8-a", "-mtune=generic"))
