"""Host facts: what a machine is, as frozen data with a stable JSON form.

`tfsmith detect --json > host.json` writes `HostFacts.to_dict()`; `--facts host.json` (and `tfsmith target
--against host.json`) reads it back with `HostFacts.from_dict()`, so a fleet machine can be described once
and targeted from anywhere. The JSON shape (schema "tfsmith.host-facts/1"):

    {
      "schema": "tfsmith.host-facts/1",
      "cpu": {
        "arch": "x86_64" | "aarch64" | ...,
        "vendor": "GenuineIntel" | "AuthenticAMD" | "ARM" | ...,
        "model_name": "AMD EPYC" | "" ,
        "microarchitecture": "zen3",              # newest archspec target whose compiled code these flags run
        "level": "x86-64-v3" | "armv8.2-a" | null,# x86-64 psABI level, or the ARM architecture version
        "features": ["abm", "aes", ...],          # raw /proc/cpuinfo flags, sorted
        "cpu_part": "0xd40" | "",                 # ARM only
        "logical_cpus": 2,                        # processors on the machine (or in the dump)
        "usable_cpus": 2,                         # honours affinity and cgroup v1/v2 CPU quotas
        "total_memory_bytes": 25769803776 | null, # MemTotal
        "usable_memory_bytes": 25769803776 | null # min(MemTotal, cgroup memory limit); null if unknown
      },
      "gpu": {
        "status": "ok" | "no-driver" | "no-gpu" | "driver-mismatch" | "old-driver" | "no-nvidia-smi" | "error",
        "detail": "one human sentence ('' when ok)",
        "source": "nvml" | "nvidia-smi" | "recorded" | "none",
        "driver_version": "550.54.15" | null,
        "cuda_driver_version": "12.4" | null,     # newest CUDA this driver can run
        "devices": [{"index": 0, "uuid": "GPU-...", "name": "NVIDIA A100-SXM4-80GB",
                     "compute_capability": "8.0" | null, "memory_total_mib": 81920 | null,
                     "mig_mode": "Enabled" | "Disabled" | null}]
      }
    }

Keys are only ever added (readers ignore unknown keys); a change of meaning bumps the schema number.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from builder.errors import InputError

SCHEMA = "tfsmith.host-facts/1"

GPU_STATUSES = ("ok", "no-driver", "no-gpu", "driver-mismatch", "old-driver", "no-nvidia-smi", "error")


@dataclass(frozen=True)
class CpuFacts:
    """The CPU side of a host. `features` are the RAW flags (/proc/cpuinfo spelling), not a target's."""

    arch: str
    vendor: str
    model_name: str
    microarchitecture: str
    level: str | None
    features: frozenset[str]
    cpu_part: str = ""
    logical_cpus: int = 1
    usable_cpus: int = 1
    total_memory_bytes: int | None = None
    usable_memory_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "arch": self.arch,
            "vendor": self.vendor,
            "model_name": self.model_name,
            "microarchitecture": self.microarchitecture,
            "level": self.level,
            "features": sorted(self.features),
            "cpu_part": self.cpu_part,
            "logical_cpus": self.logical_cpus,
            "usable_cpus": self.usable_cpus,
            "total_memory_bytes": self.total_memory_bytes,
            "usable_memory_bytes": self.usable_memory_bytes,
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> CpuFacts:
        return cls(
            arch=str(raw["arch"]),
            vendor=str(raw.get("vendor", "")),
            model_name=str(raw.get("model_name", "")),
            microarchitecture=str(raw.get("microarchitecture", raw["arch"])),
            level=raw.get("level"),
            features=frozenset(str(flag) for flag in raw.get("features", ())),
            cpu_part=str(raw.get("cpu_part", "")),
            logical_cpus=int(raw.get("logical_cpus", 1)),
            usable_cpus=int(raw.get("usable_cpus", raw.get("logical_cpus", 1))),
            total_memory_bytes=_opt_int(raw.get("total_memory_bytes")),
            usable_memory_bytes=_opt_int(raw.get("usable_memory_bytes")),
        )


@dataclass(frozen=True)
class GpuFacts:
    """One NVIDIA GPU. `compute_capability` is "8.0"-style, None when the driver cannot report it."""

    index: int
    uuid: str
    name: str
    compute_capability: str | None
    memory_total_mib: int | None = None
    mig_mode: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "uuid": self.uuid,
            "name": self.name,
            "compute_capability": self.compute_capability,
            "memory_total_mib": self.memory_total_mib,
            "mig_mode": self.mig_mode,
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> GpuFacts:
        return cls(
            index=int(raw["index"]),
            uuid=str(raw.get("uuid", "")),
            name=str(raw.get("name", "")),
            compute_capability=raw.get("compute_capability"),
            memory_total_mib=_opt_int(raw.get("memory_total_mib")),
            mig_mode=raw.get("mig_mode"),
        )


@dataclass(frozen=True)
class GpuReport:
    """Everything GPU detection found, including why it found nothing."""

    status: str
    detail: str = ""
    source: str = "none"
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    devices: tuple[GpuFacts, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "detail": self.detail,
            "source": self.source,
            "driver_version": self.driver_version,
            "cuda_driver_version": self.cuda_driver_version,
            "devices": [gpu.to_dict() for gpu in self.devices],
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> GpuReport:
        return cls(
            status=str(raw.get("status", "error")),
            detail=str(raw.get("detail", "")),
            source=str(raw.get("source", "none")),
            driver_version=raw.get("driver_version"),
            cuda_driver_version=raw.get("cuda_driver_version"),
            devices=tuple(GpuFacts.from_dict(gpu) for gpu in raw.get("devices", ())),
        )


@dataclass(frozen=True)
class HostFacts:
    """A machine: its CPU and what GPU detection found. `gpus` and `gpu_status` are shortcuts."""

    cpu: CpuFacts
    gpu: GpuReport = field(default_factory=lambda: GpuReport(status="no-driver", detail="not probed"))

    @property
    def gpus(self) -> tuple[GpuFacts, ...]:
        return self.gpu.devices

    @property
    def gpu_status(self) -> str:
        return self.gpu.status

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "cpu": self.cpu.to_dict(), "gpu": self.gpu.to_dict()}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> HostFacts:
        """Read `to_dict()` output back; a wrong schema or missing keys are an InputError."""
        if not isinstance(raw, dict) or raw.get("schema") != SCHEMA:
            raise InputError(f"not a tfsmith host-facts file (expected schema {SCHEMA!r}; write one with `tfsmith detect --json`)")
        try:
            return cls(cpu=CpuFacts.from_dict(raw["cpu"]), gpu=GpuReport.from_dict(raw.get("gpu", {})))
        except (KeyError, TypeError, ValueError) as error:
            raise InputError(f"host-facts file is incomplete or malformed: {error}") from None


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)
