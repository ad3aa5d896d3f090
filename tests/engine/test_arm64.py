"""arm64 images on the real engine: built for linux/arm64, run under QEMU, and refused by the guard on CPUs
that lack their target's features.

Kept small on purpose (everything arm64 runs emulated, several times slower): the images are the local
arm64 base plus the preflight guard (pure standard-library Python) with the exact environment a rendered
image bakes in, no TensorFlow. QEMU's `QEMU_CPU` picks the emulated CPU, and the guard reads that CPU's
hwcaps from the auxiliary vector. What each emulated CPU offers is read from a container of the same image,
never assumed: the QEMU on a machine decides which hwcaps it reports.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from builder import guard
from builder.build.plan import BuildPlan, reference_build_facts
from builder.build.settings import BuildConfig
from builder.engine.base import BuildRequest, EngineError
from builder.engine.docker import DockerEngine
from builder.build.from_settings import plan_from_settings
from tests.engine.standin import make_standin_wheel

PREFIX = "tfsmith-test-arm64-guard"
TARGETS = ("neoverse_v1", "neoverse_n1")
PLATFORM = "linux/arm64"
HWCAPS = "from builder_guard import read_hwcaps; print(','.join(sorted(read_hwcaps() or ())))"


@pytest.fixture(scope="module")
def engine(docker_engine: None) -> DockerEngine:
    return DockerEngine()


def _plan(target: str) -> BuildPlan:
    settings = BuildConfig(target=target, tf_version="2.21.0", python="3.11")
    return plan_from_settings(settings, host=reference_build_facts("x86_64"))


@pytest.fixture(scope="module")
def guarded(
    engine: DockerEngine, arm64_base_image: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, tuple[BuildPlan, str]]]:
    """target -> (plan, tag): the arm64 base, the guard as a rendered image installs it, the target's guard
    environment, the guard as entrypoint. Built for linux/arm64 through `BuildRequest.platform`."""
    built: dict[str, tuple[BuildPlan, str]] = {}
    try:
        for target in TARGETS:
            plan = _plan(target)
            context = tmp_path_factory.mktemp(f"ctx-{target}")
            shutil.copy(guard.__file__, context / "tfsmith-guard")
            (context / "tfsmith-guard").chmod(0o755)  # as render writes it
            shutil.copy(guard.__file__, context / "builder_guard.py")  # importable, to read hwcaps in tests
            env = " ".join(f"{name}={value}" for name, value in sorted(plan.target.guard_env.items()))
            (context / "Dockerfile").write_text(
                f"FROM {arm64_base_image}\n"
                "COPY tfsmith-guard /usr/local/bin/tfsmith-guard\n"
                "COPY builder_guard.py /opt/probe/builder_guard.py\n"
                f"ENV PYTHONPATH=/opt/probe {env}\n"
                'ENTRYPOINT ["/usr/local/bin/tfsmith-guard", "--"]\n'
                "CMD [\"python3\", \"-c\", \"print('started')\"]\n",
                encoding="utf-8",
            )
            tag = f"{PREFIX}:{target}"
            built[target] = (plan, tag)
            image = engine.build(BuildRequest(context=context, tags=(tag,), platform=plan.platform,
                                              log_file=context / "build.log"))
            assert image is not None and image.architecture == "arm64" and image.platform == PLATFORM
        yield built
    finally:
        for _, tag in built.values():
            engine.remove_image(tag)


def _run(
    engine: DockerEngine, tag: str, cpu: str, entrypoint: list[str] | None = None, command: list[str] | None = None
) -> tuple[int, str, str]:
    with engine.start(tag, command, entrypoint=entrypoint, env={"QEMU_CPU": cpu}, platform=PLATFORM) as container:
        code = container.wait(180)
        return code, container.logs(stderr=False), container.logs(stdout=False)


def _hwcaps(engine: DockerEngine, tag: str, cpu: str) -> frozenset[str]:
    code, out, err = _run(engine, tag, cpu, entrypoint=["python3", "-c", HWCAPS])  # past the guard
    assert code == 0, err
    return frozenset(out.strip().split(","))


def test_the_arm64_base_runs_python_as_aarch64(engine: DockerEngine, arm64_base_image: str) -> None:
    image = engine.inspect(arm64_base_image)
    assert image.architecture == "arm64"
    code, output = engine.run(arm64_base_image, ["python3", "-c", "import platform; print(platform.machine())"],
                              platform=PLATFORM, timeout=180)
    assert (code, output.strip()) == (0, "aarch64")


def test_an_arm64_image_is_not_started_as_amd64(engine: DockerEngine, arm64_base_image: str) -> None:
    with pytest.raises(EngineError, match=r"is a linux/arm64 image, not linux/amd64"):
        engine.start(arm64_base_image, ["true"], platform="linux/amd64")


def test_neoverse_v1_refuses_a_cortex_a53(engine: DockerEngine, guarded: dict[str, tuple[BuildPlan, str]]) -> None:
    plan, tag = guarded["neoverse_v1"]
    a53 = _hwcaps(engine, tag, "cortex-a53")
    assert "sve" not in a53 and "asimddp" not in a53 and "asimd" in a53  # an ARMv8.0 core, as emulated
    code, out, err = _run(engine, tag, "cortex-a53")
    assert code == guard.EXIT_CANNOT_RUN
    assert "started" not in out
    message = err.strip()
    assert len(message.splitlines()) == 1, message
    assert message.startswith("tfsmith-guard: this CPU cannot run code built for target 'neoverse_v1'")
    assert "sve" in message and "asimddp (dotprod)" in message
    assert all(guard.label(f) in message for f in guard.missing_features(plan.target.features, a53))


@pytest.mark.parametrize("cpu", ["max", "neoverse-n1"])
def test_neoverse_n1_starts_on_a_cpu_with_its_features(
    engine: DockerEngine, guarded: dict[str, tuple[BuildPlan, str]], cpu: str
) -> None:
    plan, tag = guarded["neoverse_n1"]
    assert guard.missing_features(plan.target.features, _hwcaps(engine, tag, cpu)) == ()
    code, out, err = _run(engine, tag, cpu)
    assert (code, out.strip()) == (0, "started"), err
    assert "tfsmith-guard" not in err


@pytest.mark.parametrize("cpu", ["neoverse-v1", "max"])
def test_neoverse_v1_starts_on_an_emulated_cpu_with_its_code_features(
    engine: DockerEngine, guarded: dict[str, tuple[BuildPlan, str]], cpu: str
) -> None:
    """The set-up's QEMU (10.0) emulates a Neoverse V1 and reports every feature neoverse_v1's code needs
    (dit and uscat too, unlike bookworm's 7.2); dgh, a hint it never reports, is not asked for."""
    plan, tag = guarded["neoverse_v1"]
    reported = _hwcaps(engine, tag, cpu)
    assert {"sve", "asimddp", "i8mm", "bf16", "svebf16", "svei8mm"} <= reported
    assert "dgh" not in plan.target.features and "dgh" in plan.target.hints
    assert guard.missing_features(plan.target.features, reported) == ()
    code, out, err = _run(engine, tag, cpu)
    assert (code, out.strip()) == (0, "started"), err
    assert "tfsmith-guard" not in err


def test_a_command_that_crashes_under_emulation_ends_the_container_with_the_reason(
    engine: DockerEngine, guarded: dict[str, tuple[BuildPlan, str]]
) -> None:
    """QEMU re-raises an emulated segmentation fault on itself; as PID 1 that signal would be ignored and the
    container would hang. The guard, PID 1, runs the command as a child: the container exits 139 and says why."""
    _, tag = guarded["neoverse_n1"]
    code, _, err = _run(engine, tag, "max", command=["python3", "-c", "import os; os.kill(os.getpid(), 11)"])
    assert code == 139, err
    assert "died of signal 11 (SIGSEGV)" in err


def test_engine_up_for_arm64_finds_the_base_it_made(arm64_base_image: str, tmp_path: Path) -> None:
    tfsmith = Path(sys.executable).with_name("tfsmith")
    done = subprocess.run([str(tfsmith), "engine-up", "--arch", "arm64"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == f"engine up; base image {arm64_base_image} present"


@pytest.fixture(scope="module")
def cli_built(
    engine: DockerEngine, arm64_base_image: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[subprocess.CompletedProcess[str], str]]:
    """`tfsmith build --target neoverse_v1 --wheel <aarch64 wheel>` as a user runs it on this machine: the
    runtime stage for linux/arm64 (emulated on x86) from a dependency-free stand-in of the aarch64 wheel."""
    work = tmp_path_factory.mktemp("cli-arm64")
    wheel = make_standin_wheel(work / "dist", note=f"arm64-{work.name}", platform="manylinux_2_27_aarch64")
    repository = f"{PREFIX}-cli/tensorflow"
    done = subprocess.run(
        [str(Path(sys.executable).with_name("tfsmith")), "build", "--target", "neoverse_v1", "--python", "3.11",
         "--base-image", arm64_base_image, "--wheel", str(wheel), "--ca-bundle", "none",
         "--repository", repository, "--state-dir", str(work / "state")],
        cwd=work, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    ref = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    yield done, ref
    if ref:
        engine.remove_image(ref)


def test_cli_builds_neoverse_v1_for_linux_arm64_from_an_aarch64_wheel(
    engine: DockerEngine, cli_built: tuple[subprocess.CompletedProcess[str], str]
) -> None:
    done, ref = cli_built
    assert done.returncode == 0, done.stderr[-2000:]
    assert ref == f"{PREFIX}-cli/tensorflow:tf2.21.0-py3.11-neoverse_v1-cpu"
    assert "platform linux/arm64" in done.stderr
    # pip ran in the packages stage, on this machine's platform; the arm64 stage ran no pip (only its checks)
    (log,) = [line.split(None, 1)[1] for line in done.stderr.splitlines() if line.startswith("log ")]
    stage_step = re.compile(r"#\d+ \[(packages|runtime) \d+/\d+\]")
    steps = [line for line in Path(log).read_text().splitlines() if stage_step.match(line)]
    assert any("[packages" in s and "pip install" in s and "manylinux2014_aarch64" in s for s in steps), steps
    assert not any("[runtime" in step and "pip" in step for step in steps), steps
    image = engine.inspect(ref)
    assert image.platform == PLATFORM
    assert image.labels["io.tfsmith.target"] == "neoverse_v1"
    assert "from prebuilt wheel tensorflow_cpu-2.21.0-cp311-cp311-manylinux_2_27_aarch64.whl" in (
        image.labels["org.opencontainers.image.description"]
    )
    code, out, err = _run(engine, ref, "max", entrypoint=["python", "-c", "import tensorflow, platform; "
                                                                      "print(platform.machine(), tensorflow.__version__)"])
    assert (code, out.strip()) == (0, "aarch64 2.21.0"), err
    code, out, err = _run(engine, ref, "cortex-a53")
    assert code == guard.EXIT_CANNOT_RUN and len(err.strip().splitlines()) == 1
    assert "'neoverse_v1'" in err and "sve" in err and "asimddp (dotprod)" in err
