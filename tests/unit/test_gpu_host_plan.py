"""A GPU host, replayed from recordings of a live one (tests/fixtures/gpu/h100-emerald-rapids: one H100, capability
9.0, driver 580.159.04 / CUDA 13.0, an Emerald Rapids CPU): detect from its nvidia-smi CSVs and from a fake NVML
that answers what that host's NVML answered, then the one CUDA decision every stage follows: `target`, `check`,
the build plan, optimize's target facts and the package plan. No GPU, no Docker: the engine is the fake one.

What each case expects is read from the recordings (facts.json, the CSVs, the cpuinfo), not written twice.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pynvml
import pytest

from builder import guard
from builder.build.from_settings import resolve_settings
from builder.build.run import Builder
from builder.build.settings import BuildConfig, load_config
from builder.engine.fake import FakeEngine
from builder.errors import IncompatibleError
from builder.hardware import detect_host, load_facts
from builder.hardware.facts import GpuReport, HostFacts
from builder.hardware.gpu import parse_smi_csv, report_from_nvml
from builder.targets import choose_cuda, resolve_target

H100 = Path(__file__).resolve().parents[1] / "fixtures" / "gpu" / "h100-emerald-rapids"
GPU = H100.parent
RECORDED = json.loads((H100 / "facts.json").read_text())
WHEEL = "tensorflow-2.21.0-cp312-cp312-manylinux_2_27_x86_64.whl"


@pytest.fixture(scope="module")
def host() -> HostFacts:
    """The H100 host as its own `tfsmith detect --json` recorded it."""
    return load_facts(H100 / "facts.json")


def _recorded_gpu() -> dict[str, Any]:
    return RECORDED["gpu"]["devices"][0]


# --- detect ---------------------------------------------------------------------------------------------
class RecordedNvml:
    """NVML as the H100 host answered it (values from its facts.json), with pynvml's own error classes."""

    NVMLError = pynvml.NVMLError
    NVMLError_LibraryNotFound = pynvml.NVMLError_LibraryNotFound
    NVMLError_DriverNotLoaded = pynvml.NVMLError_DriverNotLoaded
    NVMLError_LibRmVersionMismatch = pynvml.NVMLError_LibRmVersionMismatch

    def __init__(self) -> None:
        self.gpu = _recorded_gpu()
        self.shut = False

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlSystemGetDriverVersion(self) -> str:
        return RECORDED["gpu"]["driver_version"]

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        major, minor = RECORDED["gpu"]["cuda_driver_version"].split(".")
        return int(major) * 1000 + int(minor) * 10  # NVML's encoding: 13000 for 13.0

    def nvmlDeviceGetCount(self) -> int:
        return len(RECORDED["gpu"]["devices"])

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:
        major, minor = self.gpu["compute_capability"].split(".")
        return int(major), int(minor)

    def nvmlDeviceGetMigMode(self, handle: int) -> tuple[int, int]:
        enabled = int(self.gpu["mig_mode"] == "Enabled")
        return enabled, enabled

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return self.gpu["uuid"]

    def nvmlDeviceGetName(self, handle: int) -> str:
        return self.gpu["name"]

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        from types import SimpleNamespace

        return SimpleNamespace(total=self.gpu["memory_total_mib"] * 1024 * 1024)


def test_detect_through_nvml_gives_what_the_host_recorded() -> None:
    nvml = RecordedNvml()
    report = report_from_nvml(nvml)
    assert report is not None and nvml.shut
    assert report.to_dict() == RECORDED["gpu"]


@pytest.mark.parametrize("csv", ["smi.csv", "smi-nounits.csv"])
def test_detect_from_both_recorded_csv_forms_agrees_with_nvml(csv: str) -> None:
    report = parse_smi_csv((H100 / csv).read_text(), source="recorded")
    assert report.status == "ok" and report.source == "recorded"
    assert [gpu.to_dict() for gpu in report.devices] == RECORDED["gpu"]["devices"]
    assert report.driver_version == RECORDED["gpu"]["driver_version"]
    # nvidia-smi's CSV has no CUDA column: the driver branch (580) says which CUDA it runs
    assert report.cuda_driver_version == RECORDED["gpu"]["cuda_driver_version"]


def test_detect_from_the_recorded_cpuinfo_and_csv_is_the_recorded_host(host: HostFacts) -> None:
    facts = detect_host(cpuinfo=H100 / "cpuinfo", gpu_csv=H100 / "smi.csv")
    assert facts.cpu.microarchitecture == host.cpu.microarchitecture
    assert facts.cpu.features == host.cpu.features and facts.cpu.level == host.cpu.level
    assert facts.gpus == host.gpus


# --- target and check -----------------------------------------------------------------------------------
def test_target_host_builds_for_the_h100_unless_told_none(host: HostFacts) -> None:
    capability = _recorded_gpu()["compute_capability"]
    for asked in (None, "auto"):
        target, choice = resolve_settings(load_config({"target": "host", "cuda_cc": asked}, env={}, cwd=H100),
                                          facts=host)
        assert target.name == host.cpu.microarchitecture
        assert target.cuda is not None and target.cuda.capabilities == (capability,)
        assert target.cuda.hermetic_list == f"sm_{capability.replace('.', '')},compute_{capability.replace('.', '')}"
        assert choice.rule == ("host-gpus" if asked is None else "asked")
        assert choice.gpus == (f"{_recorded_gpu()['name']} ({capability})",)
    target, choice = resolve_settings(load_config({"target": "host", "cuda_cc": "none"}, env={}, cwd=H100), facts=host)
    assert target.cuda is None and choice.rule == "cpu-asked" and target.tag_token.endswith("-cpu")


def test_the_environment_and_the_config_file_opt_out_the_same_way(host: HostFacts, tmp_path: Path) -> None:
    by_env = load_config({"target": "host"}, env={"TFSMITH_CUDA_CC": "none"}, cwd=tmp_path)
    (tmp_path / "tfsmith.toml").write_text('[build]\ncuda_cc = "none"\n')
    by_file = load_config({"target": "host"}, env={}, cwd=tmp_path)
    for settings in (by_env, by_file):
        assert resolve_settings(settings, facts=host)[0].cuda is None
    # a flag still wins over the file
    flagged = load_config({"target": "host", "cuda_cc": "9.0"}, env={}, cwd=tmp_path)
    assert resolve_settings(flagged, facts=host)[0].cuda is not None


def test_check_passes_on_the_host_it_was_resolved_for_and_refuses_zen4() -> None:
    flags = guard.read_cpu_flags(str(H100 / "cpuinfo"))
    gpus = guard.parse_smi_capabilities((H100 / "smi-guard.csv").read_text())
    assert gpus == [(_recorded_gpu()["name"], guard.parse_capability(_recorded_gpu()["compute_capability"]))]
    facts = detect_host(cpuinfo=H100 / "cpuinfo", gpu_csv=H100 / "smi.csv")
    host = resolve_target("host", cuda_cc="auto", facts=facts)
    assert guard.cpu_problem(host.name, host.features, flags) is None
    assert host.cuda is not None
    caps = [guard.parse_capability(cc) for cc in host.cuda.capabilities]
    assert guard.gpu_problem(host.name, caps, guard.parse_capability(host.cuda.ptx), gpus, True) == (None, None)
    # older capability lists run on the H100 through their PTX, as `check` said there
    for listed in ("7.0,7.5", "8.0", "8.6", "9.0"):
        v3 = resolve_target("x86-64-v3", cuda_cc=listed)
        assert v3.cuda is not None and guard.cpu_problem(v3.name, v3.features, flags) is None
        caps = [guard.parse_capability(cc) for cc in v3.cuda.capabilities]
        assert guard.gpu_problem(v3.name, caps, guard.parse_capability(v3.cuda.ptx), gpus, True) == (None, None)
    zen4 = resolve_target("zen4")
    problem = guard.cpu_problem(zen4.name, zen4.features, flags)
    assert problem is not None and "sse4a" in problem


# --- the CUDA decision's other branches -----------------------------------------------------------------
def _with_gpu(host: HostFacts, **changes: Any) -> HostFacts:
    return replace(host, gpu=replace(host.gpu, **changes))


def test_a_driver_too_old_for_tensorflows_cuda_builds_cpu_only_and_says_why(host: HostFacts) -> None:
    old = _with_gpu(host, driver_version="470.223.02", cuda_driver_version="11.4")
    choice = choose_cuda("host", None, old)
    assert choice.cuda_cc is None and choice.rule == "driver-too-old"
    assert choice.lines[0].startswith("GPUs    1 found: NVIDIA H100") and "470.223.02" in choice.lines[0]
    assert "11.4" in choice.lines[1] and "12.5.1" in choice.lines[1] and "driver 525 or newer" in choice.lines[1]
    assert "--cuda-cc 9.0" in choice.lines[1]  # how to build for the GPU anyway
    # the driver's CUDA from its branch when it did not report one (nvidia-smi's CSV never does)
    assert choose_cuda("host", None, _with_gpu(old, cuda_driver_version=None)).rule == "driver-too-old"
    with pytest.raises(IncompatibleError, match="--cuda-cc auto: driver 470.223.02 runs CUDA up to 11.4"):
        choose_cuda("host", "auto", old)
    assert choose_cuda("host", "9.0", old).cuda_cc == "9.0"  # a list builds for other machines: as asked


def test_an_older_cuda_12_driver_runs_tensorflows_cuda_by_minor_version_compatibility(host: HostFacts) -> None:
    r550 = _with_gpu(host, driver_version="550.54.15", cuda_driver_version="12.4")
    choice = choose_cuda("host", None, r550)
    assert choice.cuda_cc == "9.0" and choice.rule == "host-gpus"
    assert "minor version compatibility" in choice.lines[1]
    assert "minor version" not in choose_cuda("host", None, host).lines[1]  # CUDA 13.0 runs 12.5 outright


def test_gpus_this_tensorflow_cannot_compile_for_build_cpu_only_by_default() -> None:
    blackwell = detect_host(cpuinfo=H100 / "cpuinfo", gpu_csv=GPU / "b200-blackwell.csv")
    choice = choose_cuda("host", None, blackwell)
    assert choice.cuda_cc is None and choice.rule == "gpu-unsupported" and "10.0" in choice.why
    with pytest.raises(IncompatibleError, match="10.0"):
        choose_cuda("host", "auto", blackwell)


def test_no_gpu_and_named_targets_stay_cpu_only(host: HostFacts) -> None:
    cpu_only = replace(host, gpu=GpuReport(status="no-nvidia-smi", detail="no NVML library and no nvidia-smi"))
    choice = choose_cuda("host", None, cpu_only)
    assert choice.cuda_cc is None and choice.rule == "no-gpu" and choice.lines[0].startswith("GPUs    none found")
    named = choose_cuda("x86-64-v3", None, host)
    assert named.cuda_cc is None and named.rule == "named-target" and "--cuda-cc auto|LIST" in named.lines[-1]
    assert choose_cuda("x86-64-v3", None, None).lines == ()  # nothing probed, nothing to say


# --- the build plan -------------------------------------------------------------------------------------
def _builder(tmp_path: Path, said: list[str], engine: FakeEngine, **flags: Any) -> Builder:
    flags.setdefault("state_dir", str(tmp_path / "state"))
    flags.setdefault("ca_bundle", "none")
    flags.setdefault("facts", str(H100 / "facts.json"))
    return Builder(load_config(flags, env={}, cwd=tmp_path), engine, say=said.append,
                   detect=lambda: load_facts(H100 / "facts.json"))


def test_build_dry_run_on_the_h100_plans_a_cuda_image_and_says_so_first(tmp_path: Path) -> None:
    said: list[str] = []
    outcome = _builder(tmp_path, said, FakeEngine(), target="host", dry_run=True).run()
    assert outcome.dry_run and outcome.image_ref.endswith("-sapphirerapids-cu12.5-cc90-ptx90")
    gpus, cuda, image = said[:3]
    assert gpus.startswith("GPUs    1 found: NVIDIA H100 80GB HBM3 (9.0)")
    assert cuda.startswith("CUDA    capability 9.0 (sm_90,compute_90)") and "--cuda-cc none" in cuda
    assert image == f"image   {outcome.image_ref}"
    assert any("~35k compile actions" in line for line in said)  # a CUDA wheel's cost, not a CPU one's


def test_build_dry_run_with_cuda_cc_none_plans_the_cpu_image(tmp_path: Path) -> None:
    said: list[str] = []
    outcome = _builder(tmp_path, said, FakeEngine(), target="host", dry_run=True, cuda_cc="none").run()
    assert outcome.image_ref.endswith("-sapphirerapids-cpu")
    assert said[1].startswith("CUDA    none: a CPU-only image, as asked")


# --- optimize's target facts and the package plan agree with the build ----------------------------------
def test_optimize_chooses_for_the_image_the_build_makes(host: HostFacts) -> None:
    from builder.optimize.recipe import auto_recipe
    from builder.optimize.target import measures_here, rule_reason, target_facts

    gpu = target_facts(None, host=host, settings=BuildConfig())
    plan, _ = resolve_settings(load_config({"target": "host"}, env={}, cwd=H100), facts=host)
    assert plan.cuda is not None and gpu.gpu_capabilities == plan.cuda.capabilities and gpu.is_host
    recipe, reasons = auto_recipe(gpu.features, gpu.gpu_capabilities, gpu.arch, gpu.name)
    assert recipe.choose == "saved_model" and not measures_here(recipe, gpu)
    assert "9.0" in rule_reason(gpu) and "tensor cores" in rule_reason(gpu)
    cpu = target_facts("host", "none", host=host, settings=BuildConfig(cuda_cc="none"))
    assert cpu.gpu_capabilities == () and cpu.gpu_rule == "cpu-asked"
    recipe, _ = auto_recipe(cpu.features, cpu.gpu_capabilities, cpu.arch, cpu.name)
    assert recipe.choose != "saved_model" and measures_here(recipe, cpu)


def test_optimize_reads_the_same_settings_as_build(host: HostFacts, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from builder.optimize.target import target_facts

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TFSMITH_CUDA_CC", "none")
    assert target_facts(None, host=host).gpu_capabilities == ()
    assert target_facts(None, "auto", host=host).gpu_capabilities == ("9.0",)  # the flag wins
    # a facts file is what `host` means, as for build: that machine, chosen for by rule (not measured here)
    monkeypatch.delenv("TFSMITH_CUDA_CC")
    monkeypatch.setenv("TFSMITH_FACTS", str(H100 / "facts.json"))
    described = target_facts(None)
    assert described.gpu_capabilities == ("9.0",) and not described.is_host
    assert described.name.startswith(f"host ({host.cpu.microarchitecture}, described by ")


def test_the_reports_say_which_rule_or_measurement_chose(host: HostFacts) -> None:
    from builder.optimize.recipe import auto_recipe
    from builder.optimize.select import select_step
    from builder.optimize.target import target_facts
    from builder.report import Candidate
    from tests.report_fixture import make_report

    artifacts = make_report(chosen="saved_model", artifacts=[("saved_model", "saved_model"),
                                                             ("model_int8.tflite", "tflite_int8")]).artifacts
    measured = [Candidate("model_int8.tflite", "litert", 20.0, 300, 1000, ci_low_us=18.0, ci_high_us=22.0),
                Candidate("saved_model", "tensorflow", 400.0, 300, 9000, ci_low_us=380.0, ci_high_us=420.0)]
    gpu = target_facts(None, host=host, settings=BuildConfig())
    choice, _ = select_step(auto_recipe(gpu.features, gpu.gpu_capabilities)[0], gpu, list(artifacts), measured)
    assert (choice.artifact, choice.runtime) == ("saved_model", "tensorflow") and not choice.selection.measured
    assert choice.selection.how.startswith("by rule: this host's TensorFlow image is built for GPU capability 9.0")
    cpu = target_facts(None, "none", host=host, settings=BuildConfig(cuda_cc="none"))
    choice, _ = select_step(auto_recipe(cpu.features, ())[0], cpu, list(artifacts), measured)
    assert choice.artifact == "model_int8.tflite" and choice.selection.measured
    assert choice.selection.how.startswith("measured on this host") and "CPU-only, as asked" in choice.selection.how


def _built_images(tmp_path: Path, wheel_dir: Path, **flags: Any) -> FakeEngine:
    wheel = wheel_dir / flags.pop("wheel_name", WHEEL)
    wheel.parent.mkdir(parents=True, exist_ok=True)
    wheel.write_bytes(b"stands in for the wheel: its bytes decide the spec digest")
    engine = FakeEngine()
    for cuda_cc in (None, "none"):  # the CUDA image and the CPU one of the same host, side by side
        name = WHEEL if cuda_cc is None else WHEEL.replace("tensorflow-", "tensorflow_cpu-")
        (wheel_dir / name).write_bytes(wheel.read_bytes())
        _builder(tmp_path, [], engine, target="host", wheel=str(wheel_dir / name), cuda_cc=cuda_cc).run()
    for image in engine.list_images():
        engine.run_results[image.tags[0]] = (0, "3.12\n")
    return engine


def test_package_builds_from_the_image_the_build_made_for_the_same_choice(host: HostFacts, tmp_path: Path) -> None:
    from builder.packaging.kinds import TensorFlowKind
    from builder.packaging.plan import PackageOptions
    from builder.packaging.workflow import package_target

    engine = _built_images(tmp_path, tmp_path / "dist")
    cuda_target, choice = package_target("host", None, facts=host)
    assert choice is not None and choice.rule == "host-gpus"
    base = TensorFlowKind().base(PackageOptions(), cuda_target, engine)
    assert base.ref.endswith("-sapphirerapids-cu12.5-cc90-ptx90") and base.has_guard
    cpu_target, _ = package_target("host", "none", facts=host)
    assert TensorFlowKind().base(PackageOptions(), cpu_target, engine).ref.endswith("-sapphirerapids-cpu")


def test_package_follows_the_gpus_optimize_recorded(tmp_path: Path) -> None:
    from builder.model.artifact import Artifact
    from builder.packaging.workflow import recorded_cuda_cc
    from tests.report_fixture import make_report

    report = make_report(chosen="saved_model", artifacts=[("saved_model", "saved_model")])
    on_gpu = replace(report, target={"name": "host (sapphirerapids)", "is_host": True, "gpu_capabilities": ["9.0"]})
    on_cpu = replace(report, target={"name": "host (sapphirerapids)", "is_host": True, "gpu_capabilities": []})
    assert recorded_cuda_cc(Artifact(tmp_path / "saved_model", "m", on_gpu)) == "9.0"
    assert recorded_cuda_cc(Artifact(tmp_path / "saved_model", "m", on_cpu)) == "none"
    assert recorded_cuda_cc(Artifact(tmp_path / "saved_model", "m", replace(report, target={}))) is None


# --- package --smoke ------------------------------------------------------------------------------------
def _serve_plan(tmp_path: Path, kind: str, cuda_cc: str | None) -> Any:
    from builder.model.artifact import Artifact
    from builder.packaging.plan import BaseImage, PackageOptions, plan_package

    folder = tmp_path / f"{kind}-{cuda_cc}" / "saved_model"
    folder.mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(b"graph")
    target = resolve_target("sapphirerapids", cuda_cc=cuda_cc)
    return plan_package(Artifact(folder, "m"), PackageOptions(), kind=kind, base=BaseImage("tf:x"), target=target,
                        runtime="tensorflow" if kind == "tensorflow" else "litert")


def test_smoke_runs_a_cuda_image_on_the_gpus_only_where_the_engine_can(tmp_path: Path) -> None:
    from builder.packaging.plan import smoke_gpus

    cuda = _serve_plan(tmp_path, "tensorflow", "9.0")
    assert cuda.cuda
    on = smoke_gpus(FakeEngine(gpu_runtime=True), cuda)
    assert on.passed and on.env[guard.ENV["require_gpu"]] == "1"  # TensorFlow must see the GPU, or it fails
    off = smoke_gpus(FakeEngine(), cuda)
    assert not off.passed and not off.env
    assert off.line.startswith("smoke: the GPU path was not exercised (") and off.line.endswith("on the CPU")
    assert "\n" not in off.line
    assert smoke_gpus(FakeEngine(gpu_runtime=True), _serve_plan(tmp_path, "tensorflow", None)).passed is False
    litert = _serve_plan(tmp_path, "litert", "9.0")  # a LiteRT image has no CUDA TensorFlow, whatever the target
    assert not litert.cuda and smoke_gpus(FakeEngine(gpu_runtime=True), litert).line == ""


def test_the_fake_engine_refuses_gpus_it_cannot_pass_as_docker_does() -> None:
    from builder.engine.base import EngineError, Image

    engine = FakeEngine(images={"sha256:a": Image("sha256:a", ("img:1",))})
    with pytest.raises(EngineError, match="could not select device driver"):
        engine.start("img:1", gpus=True)
    engine.gpu_runtime = True
    with engine.start("img:1", gpus=True):
        assert engine.started[-1].gpus


def test_docker_info_says_whether_the_nvidia_runtime_is_there() -> None:
    from builder.engine.docker import gpu_runtime_missing

    plain = {"Runtimes": {"io.containerd.runc.v2": {"path": "runc"}, "runc": {"path": "runc"}}, "DefaultRuntime": "runc"}
    why = gpu_runtime_missing(plain)
    assert why is not None and "no NVIDIA runtime" in why and "io.containerd.runc.v2, runc" in why
    toolkit = {**plain, "Runtimes": {**plain["Runtimes"], "nvidia": {"path": "nvidia-container-runtime"}}}
    assert gpu_runtime_missing(toolkit) is None
    assert gpu_runtime_missing({"Runtimes": {}, "DefaultRuntime": "nvidia"}) is None


# --- the guard's CUDA libraries ---------------------------------------------------------------------------
def _dist_info(site: Path, name: str, version: str) -> None:
    """An installed distribution as pip leaves it: `<name>-<version>.dist-info/METADATA`."""
    folder = site / f"{name.replace('-', '_')}-{version}.dist-info"
    folder.mkdir(parents=True)
    (folder / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_a_cuda13_cudnn_is_not_tensorflows_cuda12_cudnn(tmp_path: Path) -> None:
    """PyTorch's CUDA 13 cuDNN in the same Python provides the import name nvidia.cudnn too: the guard looks
    at distributions, so TensorFlow's CUDA 12 cuDNN is still reported missing, with what stands in its place."""
    (tmp_path / "nvidia" / "cudnn").mkdir(parents=True)
    (tmp_path / "nvidia" / "cudnn" / "__init__.py").touch()
    _dist_info(tmp_path, "nvidia-cudnn-cu13", "9.13.0.50")
    for name in guard.CUDA_DISTRIBUTIONS[1:]:
        _dist_info(tmp_path, name, "12.5.0")
    missing = guard.missing_cuda_packages([str(tmp_path)])
    assert missing == ["nvidia-cudnn-cu12 (nvidia-cudnn-cu13 installed: another CUDA's)"]
    problem, warning = guard.gpu_problem("sapphirerapids", [(9, 0)], (9, 0), [("NVIDIA H100 80GB HBM3", (9, 0))],
                                         False, missing)
    assert problem is None and warning is not None and "\n" not in warning
    assert "nvidia-cudnn-cu12" in warning and "nvidia-cudnn-cu13" in warning
    assert "pip install" in warning and "tensorflow[and-cuda]" in warning  # how to install what is missing
    _dist_info(tmp_path, "nvidia-cudnn-cu12", "9.3.0.75")
    assert guard.missing_cuda_packages([str(tmp_path)]) == []
