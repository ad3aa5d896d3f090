"""Decisions of `tfsmith build` over the fake engine: cache hits, tags, pushes, fail-fast, --only, failures.

Host facts come from a recorded /proc/cpuinfo (archspec's fixtures); the engine is the in-memory fake. What
Docker itself does is tested in tests/engine with the real engine.
"""

from __future__ import annotations

from pathlib import Path

import archspec
import pytest

from builder.build.run import Builder, SourceUnreachable, estimate_hours, push_ref, wheel_facts
from builder.build.settings import load_config
from builder.engine.base import BuildFailed
from builder.engine.fake import FakeEngine
from builder.errors import InputError

CPUINFO = Path(archspec.__file__).parent / "json" / "tests" / "targets" / "linux-rhel7-skylake_avx512"
WHEEL_NAME = "tensorflow_cpu-2.21.0-cp311-cp311-manylinux_2_27_x86_64.whl"


def _facts():  # noqa: ANN202 - HostFacts
    from builder.hardware import detect_host

    return detect_host(cpuinfo=CPUINFO)


@pytest.fixture()
def wheel(tmp_path: Path) -> Path:
    path = tmp_path / "dist" / WHEEL_NAME
    path.parent.mkdir()
    path.write_bytes(b"not really a wheel, but its bytes decide the spec digest")
    return path


def _builder(tmp_path: Path, engine: FakeEngine, said: list[str], probe=lambda host: None, **flags) -> Builder:  # noqa: ANN001
    flags.setdefault("state_dir", str(tmp_path / "state"))
    flags.setdefault("ca_bundle", "none")
    config = load_config(flags, env={}, cwd=tmp_path)
    return Builder(config, engine, say=said.append, detect=_facts, probe=probe)


def test_second_build_of_the_same_spec_does_no_work_and_says_so(tmp_path: Path, wheel: Path) -> None:
    engine, said = FakeEngine(), []
    first = _builder(tmp_path, engine, said, wheel=str(wheel), target="x86-64-v3").run()
    second = _builder(tmp_path, engine, said, wheel=str(wheel), target="x86-64-v3").run()
    assert first.built and not second.built
    assert len(engine.builds) == 1
    assert first.image.id == second.image.id
    assert any(line.startswith("up to date:") and "nothing to build" in line for line in said)


def test_wheel_build_is_runtime_only_with_labels_and_python_from_the_wheel(tmp_path: Path, wheel: Path) -> None:
    engine = FakeEngine()
    outcome = _builder(tmp_path, engine, [], wheel=str(wheel), target="x86-64-v3").run()
    (request,) = engine.builds
    assert request.target == "runtime"
    assert outcome.image_ref == "tfsmith/tensorflow:tf2.21.0-py3.11-x86-64-v3-cpu"
    assert request.labels["io.tfsmith.spec-digest"] == outcome.spec_digest
    assert (request.context / "wheels" / WHEEL_NAME).is_file()
    assert outcome.image.labels["io.tfsmith.target"] == "x86-64-v3"


def test_a_different_wheel_is_a_different_spec(tmp_path: Path, wheel: Path) -> None:
    engine = FakeEngine()
    first = _builder(tmp_path, engine, [], wheel=str(wheel), target="x86-64-v3").run()
    wheel.write_bytes(b"another build of the same version")
    second = _builder(tmp_path, engine, [], wheel=str(wheel), target="x86-64-v3").run()
    assert first.spec_digest != second.spec_digest and second.built


def test_extra_tags_and_push_to_registry(tmp_path: Path, wheel: Path) -> None:
    engine, said = FakeEngine(), []
    outcome = _builder(
        tmp_path, engine, said, wheel=str(wheel), target="x86-64-v3", tags="team/tf:prod", push="127.0.0.1:5000"
    ).run()
    assert outcome.tags == (outcome.image_ref, "team/tf:prod")
    assert engine.pushes == [f"127.0.0.1:5000/{outcome.image_ref}", "127.0.0.1:5000/team/tf:prod"]
    assert [ref for ref, _ in outcome.pushed] == engine.pushes
    assert all(digest.startswith("sha256:") for _, digest in outcome.pushed)
    assert set(engine.pushes) <= set(engine.inspect(outcome.image.id).tags)


def test_push_of_an_up_to_date_image_still_pushes(tmp_path: Path, wheel: Path) -> None:
    engine = FakeEngine()
    _builder(tmp_path, engine, [], wheel=str(wheel), target="x86-64-v3").run()
    outcome = _builder(tmp_path, engine, [], wheel=str(wheel), target="x86-64-v3", push="reg.local:5000/ml").run()
    assert not outcome.built and len(engine.pushes) == 1


def test_unreachable_source_fails_fast_naming_tf_source_and_wheel(tmp_path: Path) -> None:
    engine = FakeEngine()
    builder = _builder(tmp_path, engine, [], probe=lambda host: "Name or service not known", target="x86-64-v3")
    with pytest.raises(InputError, match=r"cannot reach github\.com.*--tf-source.*--wheel") as raised:
        builder.run()
    assert engine.builds == []
    # A distinct exit code lets `make build` fall back to a prebuilt wheel for this reason only.
    assert isinstance(raised.value, SourceUnreachable) and raised.value.exit_code == 4


def test_from_source_build_says_how_long_it_takes_here(tmp_path: Path) -> None:
    said: list[str] = []
    _builder(tmp_path, FakeEngine(), said, target="x86-64-v3", dry_run=True, jobs=2).run()
    (line,) = [line for line in said if line.startswith("source")]
    assert "14k compile actions" in line and "roughly 10 h here with 2 parallel jobs" in line


def test_estimate_scales_with_jobs_and_cuda_costs_more() -> None:
    assert estimate_hours("cpu", 2) == 2 * estimate_hours("cpu", 4)
    assert estimate_hours("cuda", 8) > estimate_hours("cpu", 8)


def test_only_id_builds_that_matrix_entry(tmp_path: Path) -> None:
    engine = FakeEngine()
    outcome = _builder(tmp_path, engine, [], dry_run=True).run(only="x86-64-v4-cuda-8.0_9.0")
    assert outcome.dry_run and engine.builds == []
    assert outcome.image_ref.endswith("-x86-64-v4-cu12.5-cc80-cc90-ptx90")


def test_only_rejects_a_malformed_id(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a matrix id"):
        _builder(tmp_path, FakeEngine(), [], dry_run=True).run(only="x86-64-v4")


def test_failed_build_shows_the_failing_steps_last_lines(tmp_path: Path) -> None:
    engine, said = FakeEngine(fail_target="runtime"), []
    with pytest.raises(BuildFailed) as caught:
        _builder(tmp_path, engine, said, target="x86-64-v3").run()
    assert "  | boom" in said
    assert caught.value.log_path is not None and caught.value.log_path.name.endswith(".log")


def test_export_wheel_from_a_source_build(tmp_path: Path) -> None:
    engine = FakeEngine(exports={"tensorflow_cpu-2.21.0-cp312-cp312-linux_x86_64.whl": b"wheel"})
    dest = tmp_path / "wheelhouse"
    outcome = _builder(tmp_path, engine, [], target="x86-64-v3", export_wheel=str(dest)).run()
    assert [r.target for r in engine.builds] == ["runtime", "wheel"]
    assert engine.builds[1].output_dir is not None
    assert outcome.exported_wheel == dest / "tensorflow_cpu-2.21.0-cp312-cp312-linux_x86_64.whl"
    assert outcome.exported_wheel.read_bytes() == b"wheel"
    assert [p.name for p in dest.iterdir()] == [outcome.exported_wheel.name]  # no temp dirs left behind


def test_export_wheel_of_a_wheel_build_copies_the_wheel(tmp_path: Path, wheel: Path) -> None:
    outcome = _builder(tmp_path, FakeEngine(), [], wheel=str(wheel), target="x86-64-v3",
                       export_wheel=str(tmp_path / "out")).run()
    assert outcome.exported_wheel is not None and outcome.exported_wheel.read_bytes() == wheel.read_bytes()


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("tensorflow_cpu-2.21.0-cp311-cp311-manylinux_2_27_x86_64.whl", ("2.21.0", "3.11")),
        ("tensorflow-2.20.0-cp313-cp313-manylinux_2_27_aarch64.whl", ("2.20.0", "3.13")),
    ],
)
def test_wheel_facts_from_file_name(name: str, expected: tuple[str, str]) -> None:
    assert wheel_facts(Path(name)) == expected


def test_not_a_tensorflow_wheel_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "numpy-2.0.0-cp311-cp311-linux_x86_64.whl"
    other.write_bytes(b"x")
    with pytest.raises(InputError, match="not a TensorFlow wheel"):
        _builder(tmp_path, FakeEngine(), [], wheel=str(other), target="x86-64-v3").run()


def test_wheel_and_python_disagreeing_is_refused(tmp_path: Path, wheel: Path) -> None:
    with pytest.raises(InputError, match="Python 3.11"):
        _builder(tmp_path, FakeEngine(), [], wheel=str(wheel), python="3.12", target="x86-64-v3").run()


def test_push_ref_keeps_registry_port_and_path() -> None:
    assert push_ref("127.0.0.1:5000/team/", "tfsmith/tensorflow:t") == "127.0.0.1:5000/team/tfsmith/tensorflow:t"


def test_an_arm_target_builds_for_linux_arm64_from_an_aarch64_wheel(tmp_path: Path) -> None:
    wheel = tmp_path / "dist" / "tensorflow-2.21.0-cp311-cp311-manylinux_2_17_aarch64.manylinux2014_aarch64.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"the aarch64 stock wheel")
    engine, said = FakeEngine(), []
    outcome = _builder(tmp_path, engine, said, wheel=str(wheel), target="neoverse_v1",
                       base_image="tfsmith/python:bookworm-arm64").run()
    (request,) = engine.builds
    assert request.platform == "linux/arm64"
    assert outcome.image.architecture == "arm64" and outcome.image.platform == "linux/arm64"
    assert "from prebuilt wheel" in request.labels["org.opencontainers.image.description"]  # labelled as stock
    assert any(line.startswith("platform linux/arm64") for line in said)


def test_a_base_of_another_cpu_family_alone_is_refused_before_building(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The packages stage runs on the build machine's platform from the runtime base's name: a local base that
    exists for arm64 only cannot serve it, and the build stops before the engine is asked, saying why. tfsmith's
    own arm64 base has its build-machine twin, so it passes."""
    from builder.engine import local
    from builder.engine.base import Image

    monkeypatch.setattr(local, "host_arch", lambda: "amd64")
    wheel = tmp_path / "dist" / "tensorflow-2.21.0-cp311-cp311-manylinux_2_17_aarch64.manylinux2014_aarch64.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"the aarch64 stock wheel")
    engine = FakeEngine(images={
        "sha256:a": Image(id="sha256:a", tags=("team/python:3.11-arm64",), architecture="arm64"),
        "sha256:b": Image(id="sha256:b", tags=("tfsmith/python:bookworm-arm64",), architecture="arm64"),
        "sha256:c": Image(id="sha256:c", tags=("tfsmith/python:bookworm",), architecture="amd64"),
    })
    with pytest.raises(InputError, match=r"base image team/python:3\.11-arm64 is a linux/arm64 image only.*linux/amd64"):
        _builder(tmp_path, engine, [], wheel=str(wheel), target="neoverse_v1", base_image="team/python:3.11-arm64").run()
    assert engine.builds == []
    _builder(tmp_path, engine, [], wheel=str(wheel), target="neoverse_v1", base_image="tfsmith/python:bookworm-arm64").run()
    assert [request.platform for request in engine.builds] == ["linux/arm64"]


def test_an_x86_wheel_is_refused_for_an_arm_target(tmp_path: Path, wheel: Path) -> None:
    from builder.errors import IncompatibleError

    with pytest.raises(IncompatibleError, match=r"is for manylinux_2_27_x86_64, the target is aarch64"):
        _builder(tmp_path, FakeEngine(), [], wheel=str(wheel), target="neoverse_v1").run()
