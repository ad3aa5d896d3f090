"""What a machine is: CPU (flags, archspec name, psABI level, usable CPUs/memory) and NVIDIA GPUs.

Public API:
- `detect_host(cpuinfo=None, gpu_csv=None) -> HostFacts`: the live machine when both are None; a recorded
  /proc/cpuinfo dump and/or a recorded `nvidia-smi --query-gpu=... --format=csv,noheader` output otherwise
  (a recorded cpuinfo without a GPU file means "no GPU facts": status no-driver, detail "not recorded").
- `load_facts(path) -> HostFacts`: read back `tfsmith detect --json` output.
- `HostFacts`, `CpuFacts`, `GpuFacts`, `GpuReport` (builder.hardware.facts).
"""

from __future__ import annotations

import json
from pathlib import Path

from builder.errors import InputError
from builder.hardware.facts import CpuFacts, GpuFacts, GpuReport, HostFacts

__all__ = ["CpuFacts", "GpuFacts", "GpuReport", "HostFacts", "detect_host", "load_facts"]


def detect_host(cpuinfo: Path | None = None, gpu_csv: Path | None = None) -> HostFacts:
    """Facts of this machine, or of recorded inputs (see the module docstring)."""
    from builder.hardware.cpu import detect_cpu
    from builder.hardware.gpu import detect_gpus

    cpu = detect_cpu(cpuinfo)
    if gpu_csv is None and cpuinfo is not None:
        gpu = GpuReport(status="no-driver", detail="no GPU facts recorded (pass --gpu-facts)", source="none")
    else:
        gpu = detect_gpus(gpu_csv)
    return HostFacts(cpu=cpu, gpu=gpu)


def load_facts(path: Path) -> HostFacts:
    """HostFacts from a `tfsmith detect --json` file; unreadable or foreign files are an InputError."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise InputError(f"cannot read host facts {path}: {error.strerror}") from None
    except json.JSONDecodeError as error:
        raise InputError(f"{path} is not JSON ({error.msg} at line {error.lineno})") from None
    return HostFacts.from_dict(raw)
