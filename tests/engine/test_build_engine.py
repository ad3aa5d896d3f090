"""The Docker engine for real: BuildKit mounts, stage cache, exports, failures, and `tfsmith build` end to end.

Runtime images are built from a tiny stand-in TensorFlow wheel (a real wheel, installed by pip, no
dependencies, no network) so the whole file stays around a minute; test_runtime_stage.py builds the rendered
runtime stage from the real PyPI TensorFlow wheel (labels, baked spec, CPU guard). Images and containers are
named `tfsmith-test-build-*`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from builder.build.run import Builder
from builder.build.settings import load_config
from builder.engine.base import BuildFailed, BuildRequest, EngineUnavailable, ImageNotFound
from builder.engine.buildlog import StepTracker
from builder.engine.docker import DockerEngine
from tests.engine.standin import make_standin_wheel
from tests.tf_image import another_tf_image_for

REPO = Path(__file__).resolve().parents[2]
TFSMITH = REPO / ".venv" / "bin" / "tfsmith"
PREFIX = "tfsmith-test-build"
CA = Path("/etc/ssl/certs/ca-certificates.crt")


# --- helpers ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def engine(docker_engine: None) -> Iterator[DockerEngine]:
    """The engine under test; afterwards every tag this file made (all contain PREFIX) is removed."""
    engine = DockerEngine()
    yield engine
    _remove_tags(engine)


def _remove_tags(engine: DockerEngine) -> None:
    for image in engine.list_images():
        for tag in image.tags:
            if PREFIX in tag:
                engine.remove_image(tag)


def _context(tmp_path: Path, dockerfile: str, **files: str) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "Dockerfile").write_text(dockerfile, encoding="utf-8")
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


# --- the engine: BuildKit features our Dockerfiles rely on ------------------------------------------------
STAGED = """\
ARG BASE=tfsmith/python:bookworm
FROM ${BASE} AS build
RUN --mount=type=cache,id=tfsmith-test-build-cache,target=/cache,sharing=locked \\
    --mount=type=secret,id=ca_bundle,required=true \\
    test -s /run/secrets/ca_bundle \\
 && echo run >> /cache/runs && wc -l < /cache/runs > /runs-seen \\
 && mkdir -p /out && echo wheel-bytes > /out/tensorflow_cpu-0.0.0-py3-none-any.whl
FROM scratch AS wheel
COPY --from=build /out/ /
FROM ${BASE} AS runtime
ARG RUNTIME_NOTE=one
RUN --mount=type=bind,from=wheel,target=/tmp/wheels cp /tmp/wheels/*.whl /opt/ && echo "${RUNTIME_NOTE}" > /note
"""


def test_stage_cache_reuses_the_wheel_when_only_the_runtime_changes(engine: DockerEngine, tmp_path: Path) -> None:
    unique = str(time.time_ns())  # fresh cache keys on every run: the first build must really build
    context = _context(tmp_path / "ctx", STAGED.replace("echo run", f"echo run-{unique}"))
    request = BuildRequest(
        context=context, tags=(f"{PREFIX}-staged:1",), target="runtime", secrets={"ca_bundle": CA},
        labels={"io.tfsmith.test": "staged"},
    )  # fmt: skip
    first = StepTracker()
    image = engine.build(dataclasses.replace(request, build_args={"RUNTIME_NOTE": f"one-{unique}"}), log=first.feed)
    assert image is not None and engine.run(image.id, ["cat", "/note"]) == (0, f"one-{unique}\n")
    assert {s.state for s in first.user_steps if "RUN" in s.title} == {"done"}
    second = StepTracker()
    changed = dataclasses.replace(request, build_args={"RUNTIME_NOTE": f"two-{unique}"})
    image2 = engine.build(changed, log=second.feed)
    assert image2 is not None and image2.id != image.id
    states = {step.title.split("]")[0] + "]": step.state for step in second.user_steps if "RUN" in step.title}
    assert states == {"[build 2/2]": "cached", "[runtime 2/2]": "done"}, states
    assert engine.run(image2.id, ["cat", "/note"]) == (0, f"two-{unique}\n")
    assert engine.inspect(f"{PREFIX}-staged:1").labels["io.tfsmith.test"] == "staged"
    assert engine.find({"io.tfsmith.test": "staged"}).id == image2.id  # the newest with the label


def test_output_exports_only_the_wheel_stage(engine: DockerEngine, tmp_path: Path) -> None:
    context = _context(tmp_path / "ctx", STAGED)
    out = tmp_path / "out"
    result = engine.build(
        BuildRequest(context=context, tags=(), target="wheel", secrets={"ca_bundle": CA}, output_dir=out)
    )
    assert result is None
    assert [p.name for p in out.iterdir()] == ["tensorflow_cpu-0.0.0-py3-none-any.whl"]


def test_cache_mount_persists_across_builds(engine: DockerEngine, tmp_path: Path) -> None:
    dockerfile = (
        "FROM tfsmith/python:bookworm\nARG N\n"
        "RUN --mount=type=cache,id=tfsmith-test-build-counter,target=/cache "
        'echo "$N" >> /cache/n && grep -c . /cache/n > /count\n'
    )
    context = _context(tmp_path / "ctx", dockerfile)
    counts = []
    for n in (f"{time.time_ns()}-a", f"{time.time_ns()}-b"):
        image = engine.build(BuildRequest(context=context, tags=(), build_args={"N": n}))
        assert image is not None
        counts.append(int(engine.run(image.id, ["cat", "/count"])[1]))
    assert counts[1] == counts[0] + 1


def test_named_build_context_works_on_this_cli(engine: DockerEngine, tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    unique = str(time.time_ns())
    (source / "WORKSPACE").write_text(f"tf source {unique}\n")
    context = _context(tmp_path / "ctx", f"FROM tfsmith/python:bookworm\nCOPY --from={PREFIX}-src . /src\n")
    image = engine.build(BuildRequest(context=context, tags=(), build_contexts={f"{PREFIX}-src": source}))
    assert image is not None
    assert engine.run(image.id, ["cat", "/src/WORKSPACE"]) == (0, f"tf source {unique}\n")


def test_failed_build_names_the_step_its_last_lines_and_the_log(engine: DockerEngine, tmp_path: Path) -> None:
    context = _context(
        tmp_path / "ctx", "FROM tfsmith/python:bookworm\nRUN echo first-line && echo compile error here && exit 7\n"
    )
    log = tmp_path / "full.log"
    with pytest.raises(BuildFailed) as caught:
        engine.build(BuildRequest(context=context, tags=(f"{PREFIX}-fail:1",), log_file=log))
    failure = caught.value
    assert "RUN echo first-line" in failure.step and "exit code: 7" in str(failure)
    assert failure.tail[-1] == "compile error here"
    assert failure.log_path == log and "compile error here" in log.read_text()
    assert str(log) in str(failure)


def test_missing_base_image_names_it_and_suggests_base_image(engine: DockerEngine, tmp_path: Path) -> None:
    context = _context(tmp_path / "ctx", "ARG BASE=tfsmith/python:bookworm\nFROM ${BASE}\nRUN true\n")
    with pytest.raises(ImageNotFound, match=r"tfsmith/not-here:1 is not present locally.*--base-image"):
        engine.build(BuildRequest(context=context, tags=(), build_args={"BASE": "tfsmith/not-here:1"}))


def test_no_engine_reachable_is_engine_unavailable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-such.sock")
    with pytest.raises(EngineUnavailable, match="no Docker engine answers.*engine up"):
        DockerEngine().inspect("tfsmith/python:bookworm")


# --- tfsmith build end to end (stand-in wheel) -------------------------------------------------------------
def _tfsmith(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(TFSMITH), *args], cwd=cwd, capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip


@pytest.fixture(scope="module")
def built(engine: DockerEngine, base_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """`tfsmith build --wheel STANDIN --target x86-64-v3` twice through the CLI, as a user runs it."""
    work = tmp_path_factory.mktemp("cli")
    note = f"standin-{time.time_ns()}"  # a new wheel each session: the first build must really build
    wheel = make_standin_wheel(work / "dist", note=note)
    args = ("build", "--wheel", str(wheel), "--target", "x86-64-v3", "--base-image", base_image,
            "--repository", f"{PREFIX}/tensorflow", "--tag", f"{PREFIX}-cli:{work.name}")  # fmt: skip
    with another_tf_image_for("x86-64-v3", "sapphirerapids"):  # stand-in TensorFlow images, labelled as real
        try:
            first = _tfsmith(*args, cwd=work)
            second = _tfsmith(*args, cwd=work)
            yield {"work": work, "note": note, "wheel": wheel, "args": args, "first": first, "second": second}
        finally:
            _remove_tags(engine)


def test_cli_build_makes_a_runnable_image_with_labels(built: dict, engine: DockerEngine) -> None:  # type: ignore[type-arg]
    first = built["first"]
    assert first.returncode == 0, first.stderr
    ref = first.stdout.strip()
    assert ref == f"{PREFIX}/tensorflow:tf2.21.0-py3.11-x86-64-v3-cpu"
    image = engine.inspect(f"{PREFIX}-cli:{built['work'].name}")
    manifest = json.loads(image.labels["io.tfsmith.manifest"])
    assert image.labels["io.tfsmith.target"] == "x86-64-v3"
    assert manifest["prebuilt_wheel"]["file"] == built["wheel"].name
    assert image.labels["org.opencontainers.image.version"] == "2.21.0"
    code, output = engine.run(image.id, ["python3", "-c", "import tensorflow as tf; print(tf.__version__, tf.NOTE)"])
    assert (code, output.strip()) == (0, f"2.21.0 {built['note']}")


def test_second_identical_build_does_no_work_and_says_so(built: dict, engine: DockerEngine) -> None:  # type: ignore[type-arg]
    first, second = built["first"], built["second"]
    assert second.returncode == 0, second.stderr
    assert "up to date:" in second.stderr and "nothing to build" in second.stderr
    assert "step" not in second.stderr and "built " not in second.stderr
    assert second.stdout == first.stdout
    logs = list((built["work"] / ".tfsmith" / "logs").glob("*.log"))
    assert len(logs) == 1  # only the first run built anything


def test_guard_passes_here_and_refuses_a_target_this_cpu_lacks(built: dict, engine: DockerEngine, base_image: str) -> None:  # type: ignore[type-arg]
    code, _ = engine.run(built["first"].stdout.strip(), ["python3", "-c", "print('ran')"])
    assert code == 0
    from builder.guard import label
    from builder.hardware import detect_host
    from builder.targets import can_run, resolve_target

    missing = can_run(resolve_target("sapphirerapids"), detect_host())  # from this host's own detection
    if not missing:
        pytest.skip("this CPU runs sapphirerapids code (the newest x86 target clang 18 knows): none here it cannot run")
    config = load_config({"wheel": str(built["wheel"]), "target": "sapphirerapids", "base_image": base_image,
                          "repository": f"{PREFIX}/tensorflow", "state_dir": str(built["work"] / ".tfsmith")},
                         env={}, cwd=built["work"])  # fmt: skip
    outcome = Builder(config, engine, say=lambda _: None).run()
    assert outcome.image is not None and outcome.image.labels["io.tfsmith.target"] == "sapphirerapids"
    code, output = engine.run(outcome.image.id, ["python3", "-c", "print('ran')"])
    assert code == 3 and "ran" not in output
    assert "sapphirerapids" in output and all(label(f) in output for f in missing)


def test_push_to_a_local_registry_and_pull_back(built: dict, engine: DockerEngine, registry: str) -> None:  # type: ignore[type-arg]
    pushed = _tfsmith(*built["args"], "--push", registry, cwd=built["work"])
    assert pushed.returncode == 0, pushed.stderr
    assert "up to date:" in pushed.stderr  # pushing needs no rebuild
    ref = f"{registry}/{pushed.stdout.strip()}"
    assert f"pushed  {ref}@sha256:" in pushed.stderr
    local_id = engine.inspect(ref).id
    engine.remove_image(ref)
    with pytest.raises(ImageNotFound):
        engine.inspect(ref)
    assert engine.pull(ref).id == local_id
    assert engine.inspect(ref).id == local_id


def test_dry_run_builds_nothing(built: dict) -> None:  # type: ignore[type-arg]
    result = _tfsmith(*built["args"], "--dry-run", cwd=built["work"])
    assert result.returncode == 0 and "stages  packages -> runtime" in result.stderr
    assert "up to date" not in result.stderr and result.stdout == ""


def test_engine_up_is_a_no_op_when_all_is_there(base_image: str, tmp_path: Path) -> None:
    result = _tfsmith("engine-up", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == f"engine up; base image {base_image} present"
    assert "starting dockerd" not in result.stdout


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
