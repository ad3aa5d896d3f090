"""NVIDIA GPU facts: NVML first (nvidia-ml-py's `pynvml`), `nvidia-smi` CSV as the fallback.

Every way this goes wrong on real machines becomes a status in the report, never a traceback:
no driver (`no-driver`), a driver but no GPU (`no-gpu`), a kernel module and user library of different
versions after an upgrade without reboot (`driver-mismatch`), an old R470-era driver whose nvidia-smi
rejects the `compute_cap` field (`old-driver`), NVML missing and no nvidia-smi binary (`no-nvidia-smi`).

The decision logic is pure: `report_from_nvml(nvml)` takes the pynvml module (or a fake with the same
functions that raises the real pynvml error classes) and `report_from_smi(run)` takes a function that runs
nvidia-smi, so both are tested with recorded behaviour and no GPU.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from builder.compat import cuda_for_driver
from builder.hardware.facts import GpuFacts, GpuReport

SMI_FIELDS = ("index", "uuid", "name", "compute_cap", "memory.total", "driver_version", "mig.mode.current")
SMI_FIELDS_OLD = tuple(field for field in SMI_FIELDS if field != "compute_cap")

# A runner gets nvidia-smi's arguments and returns (exit code, stdout + stderr); FileNotFoundError when absent.
SmiRunner = Callable[[list[str]], tuple[int, str]]

MISMATCH_HELP = "the NVIDIA kernel module and user-space library differ (driver upgraded without reboot): reboot or reload the nvidia module"
NO_DRIVER_HELP = "no NVIDIA driver is loaded (install the driver, or run the container with --gpus all)"


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def report_from_nvml(nvml: ModuleType | Any) -> GpuReport | None:
    """Report through NVML; None when NVML's library is absent (then the caller tries nvidia-smi)."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError_LibraryNotFound:
        return None
    except nvml.NVMLError_DriverNotLoaded:
        return GpuReport(status="no-driver", detail=NO_DRIVER_HELP, source="nvml")
    except nvml.NVMLError_LibRmVersionMismatch:
        return GpuReport(status="driver-mismatch", detail=MISMATCH_HELP, source="nvml")
    except nvml.NVMLError as error:
        return GpuReport(status="error", detail=f"NVML could not start: {error}", source="nvml")
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        cuda = None
        try:
            raw = int(nvml.nvmlSystemGetCudaDriverVersion())
            cuda = f"{raw // 1000}.{raw % 1000 // 10}"
        except nvml.NVMLError:
            cuda = cuda_for_driver(driver)
        devices = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
            try:
                current, _pending = nvml.nvmlDeviceGetMigMode(handle)
                mig: str | None = "Enabled" if current else "Disabled"
            except nvml.NVMLError:  # NotSupported on GPUs without MIG
                mig = None
            devices.append(
                GpuFacts(
                    index=index,
                    uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                    name=_text(nvml.nvmlDeviceGetName(handle)),
                    compute_capability=f"{major}.{minor}",
                    memory_total_mib=int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // (1024 * 1024),
                    mig_mode=mig,
                )
            )
    except nvml.NVMLError as error:
        return GpuReport(status="error", detail=f"NVML query failed: {error}", source="nvml")
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass
    if not devices:
        return GpuReport(status="no-gpu", detail="the NVIDIA driver is loaded but sees no GPU", source="nvml",
                         driver_version=driver, cuda_driver_version=cuda)
    return GpuReport(status="ok", source="nvml", driver_version=driver, cuda_driver_version=cuda, devices=tuple(devices))


def classify_smi_failure(output: str) -> GpuReport | None:
    """Status for nvidia-smi output that is an error message rather than CSV rows; None when it is CSV."""
    lowered = output.lower()
    if "version mismatch" in lowered:
        return GpuReport(status="driver-mismatch", detail=MISMATCH_HELP, source="nvidia-smi")
    if "couldn't communicate with the nvidia driver" in lowered or "driver not loaded" in lowered:
        return GpuReport(status="no-driver", detail=NO_DRIVER_HELP, source="nvidia-smi")
    if "no devices were found" in lowered:
        return GpuReport(status="no-gpu", detail="the NVIDIA driver is loaded but sees no GPU", source="nvidia-smi")
    if "compute_cap" in lowered and "not a valid field" in lowered:
        return GpuReport(
            status="old-driver",
            detail="this driver's nvidia-smi cannot report compute capability (pre-R510); upgrade it or pass --cuda-cc",
            source="nvidia-smi",
        )
    return None


def _opt(value: str) -> str | None:
    value = value.strip()
    return None if not value or value.startswith("[") or value.lower() in ("n/a", "[n/a]") else value


def parse_smi_csv(output: str, fields: tuple[str, ...] = SMI_FIELDS, source: str = "nvidia-smi") -> GpuReport:
    """GpuReport from `nvidia-smi --query-gpu=<fields> --format=csv,noheader[,nounits]` output.

    Tolerates a header line and unit suffixes ("81920 MiB"), and reads error messages as statuses.
    """
    failure = classify_smi_failure(output)
    if failure is not None:
        return GpuReport(status=failure.status, detail=failure.detail, source=source)
    devices: list[GpuFacts] = []
    driver = None
    for line in output.splitlines():
        cells = [cell.strip() for cell in line.split(",")]
        if not line.strip():
            continue
        if cells[0].lower() == "index":  # a header line says which fields follow
            fields = tuple(cell.split(" [")[0] for cell in cells)
            continue
        if fields == SMI_FIELDS and len(cells) == len(SMI_FIELDS) - 1:
            fields = _guess_short_fields(cells)
        if len(cells) < len(fields) or not cells[0].isdigit():
            return GpuReport(status="error", detail=f"unexpected nvidia-smi output: {line.strip()[:120]}", source=source)
        # A GPU name may contain commas: the cells after it are fixed, so take the name from the middle.
        extra = len(cells) - len(fields)
        name_at = fields.index("name")
        cells = [*cells[:name_at], ", ".join(cells[name_at : name_at + extra + 1]), *cells[name_at + extra + 1 :]]
        row = dict(zip(fields, cells))
        memory = _opt(row.get("memory.total", ""))
        driver = _opt(row.get("driver_version", "")) or driver
        devices.append(
            GpuFacts(
                index=int(row["index"]),
                uuid=row.get("uuid", ""),
                name=row.get("name", ""),
                compute_capability=_opt(row.get("compute_cap", "")),
                memory_total_mib=int(memory.split()[0]) if memory else None,
                mig_mode=_opt(row.get("mig.mode.current", "")),
            )
        )
    cuda = cuda_for_driver(driver) if driver else None
    if not devices:
        return GpuReport(status="no-gpu", detail="nvidia-smi lists no GPU", source=source)
    if "compute_cap" not in fields or any(gpu.compute_capability is None for gpu in devices):
        return GpuReport(
            status="old-driver",
            detail="this driver's nvidia-smi cannot report compute capability (pre-R510); upgrade it or pass --cuda-cc",
            source=source, driver_version=driver, cuda_driver_version=cuda, devices=tuple(devices),
        )
    return GpuReport(status="ok", source=source, driver_version=driver, cuda_driver_version=cuda, devices=tuple(devices))


def _guess_short_fields(cells: list[str]) -> tuple[str, ...]:
    """A recording one field short: either an old driver's (no compute_cap) or a query without MIG mode."""
    looks_like_cc = len(cells) > 3 and re.fullmatch(r"\d+\.\d+", cells[3]) is not None
    return SMI_FIELDS[:-1] if looks_like_cc else SMI_FIELDS_OLD


def smi_query(fields: tuple[str, ...]) -> list[str]:
    return [f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]


def report_from_smi(run: SmiRunner) -> GpuReport:
    """Report through nvidia-smi; retries without compute_cap for old drivers that reject that field."""
    try:
        code, output = run(smi_query(SMI_FIELDS))
    except FileNotFoundError:
        return GpuReport(status="no-nvidia-smi", detail="no NVML library and no nvidia-smi on PATH: no NVIDIA driver here", source="none")
    report = parse_smi_csv(output)
    if report.status == "old-driver" and not report.devices:
        code, output = run(smi_query(SMI_FIELDS_OLD))
        if code == 0:
            return parse_smi_csv(output, SMI_FIELDS_OLD)
        return report
    if code != 0 and report.status == "ok":
        return GpuReport(status="error", detail=f"nvidia-smi exited {code}", source="nvidia-smi")
    return report


def _run_smi(args: list[str]) -> tuple[int, str]:
    binary = shutil.which("nvidia-smi")
    if binary is None:
        raise FileNotFoundError("nvidia-smi")
    try:
        result = subprocess.run([binary, *args], capture_output=True, text=True, timeout=30, check=False)
    except subprocess.TimeoutExpired:
        return 124, "nvidia-smi timed out"
    return result.returncode, result.stdout + result.stderr


def detect_gpus(gpu_csv: Path | None = None, *, nvml: Any = None, run: SmiRunner | None = None) -> GpuReport:
    """GPU report of this machine, or of a recorded nvidia-smi CSV output when `gpu_csv` is given."""
    if gpu_csv is not None:
        try:
            text = Path(gpu_csv).read_text(encoding="utf-8", errors="replace")
        except OSError as error:
            from builder.errors import InputError

            raise InputError(f"cannot read GPU facts {gpu_csv}: {error.strerror}") from None
        return parse_smi_csv(text, source="recorded")
    if nvml is None:
        import pynvml as nvml  # nvidia-ml-py, a dependency; without NVML's library, nvidia-smi is tried next
    report = report_from_nvml(nvml)
    if report is not None:
        return report
    return report_from_smi(run or _run_smi)
