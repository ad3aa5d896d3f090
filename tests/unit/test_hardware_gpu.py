"""GPU detection: a fake NVML raising the real pynvml error classes, and recorded nvidia-smi outputs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from builder.hardware.facts import GpuReport
from builder.hardware.gpu import detect_gpus, parse_smi_csv, report_from_nvml, report_from_smi

GPU = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"


class FakeNvml:
    """The slice of pynvml that detection calls, with pynvml's own error classes; GPUs as (name, cc, mig)."""

    NVMLError = pynvml.NVMLError
    NVMLError_LibraryNotFound = pynvml.NVMLError_LibraryNotFound
    NVMLError_DriverNotLoaded = pynvml.NVMLError_DriverNotLoaded
    NVMLError_LibRmVersionMismatch = pynvml.NVMLError_LibRmVersionMismatch

    def __init__(self, gpus: list[tuple[str, tuple[int, int], int | None]] = (), init_error: Exception | None = None,
                 driver: str = "550.54.15", cuda: int | None = 12040) -> None:
        self.gpus = list(gpus)
        self.init_error = init_error
        self.driver = driver
        self.cuda = cuda
        self.shutdown = False

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.init_error

    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        if self.cuda is None:
            raise pynvml.NVMLError_FunctionNotFound()
        return self.cuda

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:
        return self.gpus[handle][1]

    def nvmlDeviceGetMigMode(self, handle: int) -> tuple[int, int]:
        mig = self.gpus[handle][2]
        if mig is None:
            raise pynvml.NVMLError_NotSupported()
        return mig, mig

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-{handle:08d}-0000-0000-0000-000000000000"

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return self.gpus[handle][0].encode()  # older pynvml returns bytes

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return SimpleNamespace(total=80 * 1024**3)


def test_nvml_mixed_gpus() -> None:
    nvml = FakeNvml([("NVIDIA A100-SXM4-80GB", (8, 0), 0), ("NVIDIA H100 80GB HBM3", (9, 0), 1), ("Tesla T4", (7, 5), None)])
    report = report_from_nvml(nvml)
    assert report is not None and report.status == "ok" and report.source == "nvml"
    assert [g.compute_capability for g in report.devices] == ["8.0", "9.0", "7.5"]
    assert [g.mig_mode for g in report.devices] == ["Disabled", "Enabled", None]
    assert report.devices[0].name == "NVIDIA A100-SXM4-80GB" and report.devices[0].memory_total_mib == 81920
    assert (report.driver_version, report.cuda_driver_version) == ("550.54.15", "12.4")
    assert nvml.shutdown


def test_nvml_cuda_version_falls_back_to_driver_branch() -> None:
    report = report_from_nvml(FakeNvml([("Tesla T4", (7, 5), None)], driver="570.86.10", cuda=None))
    assert report is not None and report.cuda_driver_version == "12.8"


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (pynvml.NVMLError_DriverNotLoaded(), "no-driver"),
        (pynvml.NVMLError_LibRmVersionMismatch(), "driver-mismatch"),
        (pynvml.NVMLError_NoPermission(), "error"),
    ],
)
def test_nvml_init_failures_become_statuses(error: Exception, status: str) -> None:
    report = report_from_nvml(FakeNvml(init_error=error))
    assert report is not None and report.status == status and report.detail


def test_nvml_missing_library_defers_to_nvidia_smi() -> None:
    assert report_from_nvml(FakeNvml(init_error=pynvml.NVMLError_LibraryNotFound())) is None


def test_nvml_driver_without_gpus() -> None:
    report = report_from_nvml(FakeNvml([]))
    assert report is not None and report.status == "no-gpu" and report.driver_version == "550.54.15"


def test_real_pynvml_on_a_machine_without_driver_or_with_one() -> None:
    """The real library: here (no driver) NVML reports LibraryNotFound -> None; on a GPU host a report."""
    report = report_from_nvml(pynvml)
    assert report is None or report.status in ("ok", "no-gpu", "no-driver", "driver-mismatch", "error")


# ------------------------------------------------------------------------------------------ nvidia-smi
def _smi(*answers: tuple[int, str]) -> Callable[[list[str]], tuple[int, str]]:
    calls: list[list[str]] = []
    queue = list(answers)

    def run(args: list[str]) -> tuple[int, str]:
        calls.append(args)
        return queue.pop(0)

    run.calls = calls  # type: ignore[attr-defined]
    return run


def test_smi_mixed_a100_h100() -> None:
    report = parse_smi_csv((GPU / "mixed-a100-h100.csv").read_text())
    assert report.status == "ok"
    assert [(g.index, g.name, g.compute_capability, g.mig_mode) for g in report.devices] == [
        (0, "NVIDIA A100-SXM4-80GB", "8.0", "Disabled"),
        (1, "NVIDIA H100 80GB HBM3", "9.0", "Enabled"),
    ]
    assert report.devices[1].uuid.startswith("GPU-2b7e9c41")
    assert (report.driver_version, report.cuda_driver_version) == ("550.54.15", "12.4")


def test_smi_header_units_and_na() -> None:
    report = parse_smi_csv((GPU / "t4-header-units.csv").read_text())
    assert report.status == "ok"
    (t4,) = report.devices
    assert (t4.compute_capability, t4.memory_total_mib, t4.mig_mode) == ("7.5", 15360, None)


def test_smi_name_with_comma() -> None:
    report = parse_smi_csv("0, GPU-1, NVIDIA RTX A6000, Ada, Generation, 8.9, 49140, 550.1, [N/A]\n")
    assert report.devices[0].name == "NVIDIA RTX A6000, Ada, Generation"
    assert report.devices[0].compute_capability == "8.9"


@pytest.mark.parametrize(
    ("fixture", "status"),
    [
        ("driver-library-mismatch.txt", "driver-mismatch"),
        ("no-driver.txt", "no-driver"),
        ("no-devices.txt", "no-gpu"),
        ("r470-compute-cap-rejected.txt", "old-driver"),
    ],
)
def test_smi_failure_messages(fixture: str, status: str) -> None:
    report = parse_smi_csv((GPU / fixture).read_text())
    assert report.status == status and report.detail and report.devices == ()


def test_smi_old_driver_retries_without_compute_cap() -> None:
    run = _smi((2, (GPU / "r470-compute-cap-rejected.txt").read_text()), (0, (GPU / "r470-without-compute-cap.csv").read_text()))
    report = report_from_smi(run)
    assert report.status == "old-driver"
    assert [(g.name, g.compute_capability) for g in report.devices] == [("Tesla V100-SXM2-16GB", None)]
    assert report.cuda_driver_version == "11.4"
    assert "compute_cap" in run.calls[0][0] and "compute_cap" not in run.calls[1][0]  # type: ignore[attr-defined]


def test_smi_mismatch_through_runner() -> None:
    report = report_from_smi(_smi((18, (GPU / "driver-library-mismatch.txt").read_text())))
    assert report.status == "driver-mismatch" and "reboot" in report.detail


def test_smi_missing_binary() -> None:
    def run(args: list[str]) -> tuple[int, str]:
        raise FileNotFoundError("nvidia-smi")

    report = report_from_smi(run)
    assert report.status == "no-nvidia-smi" and report.devices == ()


def test_smi_garbage_is_an_error_status() -> None:
    report = parse_smi_csv("something unexpected\n")
    assert report.status == "error" and "unexpected" in report.detail


def test_detect_gpus_prefers_nvml_then_smi() -> None:
    nvml = FakeNvml([("NVIDIA H100 80GB HBM3", (9, 0), 0)])
    assert detect_gpus(nvml=nvml, run=_smi()).source == "nvml"
    no_lib = FakeNvml(init_error=pynvml.NVMLError_LibraryNotFound())
    report = detect_gpus(nvml=no_lib, run=_smi((0, (GPU / "mixed-a100-h100.csv").read_text())))
    assert report.source == "nvidia-smi" and len(report.devices) == 2


def test_detect_gpus_from_recorded_file() -> None:
    report = detect_gpus(GPU / "b200-blackwell.csv")
    assert isinstance(report, GpuReport) and report.source == "recorded"
    assert report.devices[0].compute_capability == "10.0" and report.cuda_driver_version == "12.8"
