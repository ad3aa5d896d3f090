"""TensorFlow <-> toolchain compatibility, read from data (builder/data/compat.json), never hard-coded here.

One row per TensorFlow minor version (2.18-2.21): the Python range it supports, the clang and bazel its
official builds use, the hermetic CUDA/cuDNN defaults, TF's own default capability list and the bazel
`--config` names its .bazelrc defines (so later stages never pass a config that does not exist, such as
`opt` or `avx2_linux`). Two smaller tables say which GPU capabilities a CUDA version and a clang version can
compile for, and which CUDA a driver branch supports. tests/unit/test_compat.py keeps the tables
consistent with each other.

Public API: `lookup(tf_version) -> CompatRow`, `SUPPORTED_TF_VERSIONS`, `cuda_limits(cuda_version)`,
`clang_max_capability(clang_version)`, `cuda_for_driver(driver_version)`, `driver_runs(cuda_driver, cuda)`,
`min_driver_for(cuda_version)`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from builder.errors import InputError


def version_tuple(version: str) -> tuple[int, ...]:
    """"3.12" -> (3, 12); "12.5.1" -> (12, 5, 1); non-numeric parts are an InputError."""
    try:
        return tuple(int(part) for part in version.strip().split("."))
    except ValueError:
        raise InputError(f"not a version number: {version!r}") from None


def minor_of(version: str) -> str:
    """"2.21.0" -> "2.21"."""
    return ".".join(version.strip().split(".")[:2])


@dataclass(frozen=True)
class CompatRow:
    """What one TensorFlow minor version builds with."""

    tf_version: str  # "2.21"
    python_min: str
    python_max: str
    clang: str
    bazel: str
    cuda: str  # hermetic CUDA default, e.g. "12.5.1"
    cudnn: str
    default_capabilities: tuple[str, ...]  # TF's own HERMETIC_CUDA_COMPUTE_CAPABILITIES default
    bazel_configs: tuple[str, ...]  # --config names that exist in this version's .bazelrc

    @property
    def python_versions(self) -> tuple[str, ...]:
        """Every supported Python minor version, oldest first: ("3.10", "3.11", "3.12", "3.13")."""
        low, high = version_tuple(self.python_min), version_tuple(self.python_max)
        return tuple(f"{low[0]}.{minor}" for minor in range(low[1], high[1] + 1))

    def supports_python(self, python: str) -> bool:
        return minor_of(python) in self.python_versions

    def has_config(self, name: str) -> bool:
        return name in self.bazel_configs


@dataclass(frozen=True)
class CudaLimits:
    """GPU capabilities one CUDA version compiles for, and the oldest driver branch that runs it."""

    cuda: str  # "12.5"
    min_capability: str
    max_capability: str
    min_driver: str


@lru_cache(maxsize=1)
def _data() -> dict[str, Any]:
    with resources.files("builder").joinpath("data/compat.json").open(encoding="utf-8") as handle:
        return json.load(handle)


def _row(tf: str, raw: dict[str, Any]) -> CompatRow:
    return CompatRow(
        tf_version=tf,
        python_min=raw["python"][0],
        python_max=raw["python"][1],
        clang=raw["clang"],
        bazel=raw["bazel"],
        cuda=raw["cuda"],
        cudnn=raw["cudnn"],
        default_capabilities=tuple(raw["default_capabilities"]),
        bazel_configs=tuple(raw["bazel_configs"]),
    )


SUPPORTED_TF_VERSIONS: tuple[str, ...] = tuple(sorted(_data()["tensorflow"], key=version_tuple))


def lookup(tf_version: str) -> CompatRow:
    """The row for a TensorFlow version ("2.21", "2.21.0", "2.21.1" all give the 2.21 row)."""
    key = minor_of(tf_version)
    raw = _data()["tensorflow"].get(key)
    if raw is None:
        raise InputError(
            f"TensorFlow {tf_version} is not supported; supported: {', '.join(SUPPORTED_TF_VERSIONS)}"
        )
    return _row(key, raw)


def cuda_limits(cuda_version: str) -> CudaLimits:
    """Capability range of a CUDA version ("12.5.1" -> the 12.5 row)."""
    key = minor_of(cuda_version)
    raw = _data()["cuda"].get(key)
    if raw is None:
        raise InputError(f"no capability table for CUDA {cuda_version}; known: {', '.join(_data()['cuda'])}")
    return CudaLimits(key, raw["min_capability"], raw["max_capability"], raw["min_driver"])


def clang_max_capability(clang_version: str) -> str:
    """Newest GPU capability a clang major version can compile CUDA for ("18.1.8" -> "9.0")."""
    major = clang_version.split(".")[0]
    table = _data()["clang_max_capability"]
    if major in table:
        return table[major]
    known = max(table, key=int)
    return table[known] if int(major) > int(known) else min(table.values(), key=version_tuple)


def cuda_for_driver(driver_version: str) -> str | None:
    """Newest CUDA a driver supports, from its branch ("550.54.15" -> "12.4"); None when older than known."""
    try:
        branch = int(driver_version.split(".")[0])
    except ValueError:
        return None
    for minimum, cuda in _data()["driver_cuda"]:
        if branch >= int(minimum):
            return cuda
    return None


def driver_runs(cuda_driver: str | None, cuda_version: str) -> bool | None:
    """Whether a driver that supports CUDA up to `cuda_driver` ("13.0", what NVML and nvidia-smi report) runs
    code built with `cuda_version` ("12.5.1"); None when the driver's CUDA is unknown.

    CUDA's minor version compatibility: a driver of the same major CUDA (R525+ for CUDA 12) runs machine code
    built with a newer 12.x toolkit, so the major decides. (PTX from the newer toolkit does need a driver of
    that minor to JIT it; a build for the host's own GPUs carries machine code for each of them.) Newer
    drivers run older CUDA."""
    if not cuda_driver:
        return None
    try:
        return version_tuple(cuda_driver)[0] >= version_tuple(cuda_version)[0]
    except InputError:
        return None


def min_driver_for(cuda_version: str) -> str | None:
    """The oldest driver branch that runs `cuda_version` by minor version compatibility ("12.5.1" -> "525":
    the first branch of CUDA 12), from the driver table; None when the table has no branch of that major."""
    major = version_tuple(cuda_version)[0]
    branches = [int(branch) for branch, cuda in _data()["driver_cuda"] if version_tuple(cuda)[0] == major]
    return str(min(branches)) if branches else None
