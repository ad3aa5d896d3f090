"""The reference build machine: fixed facts of a conservative machine of each architecture, never this host.

Where no real build machine is at hand (resolving a named target for `package`, `optimize`, `deploy`,
`target`, `check`; the canonical Dockerfiles), this is the build machine: a generic CPU (x86-64-v2, or plain
armv8-a) with 16 cores and 64 GiB. Host-tool flags planned for it (`-march=x86-64-v2 -mtune=generic`) suit
any build machine of that family, so output made with it is the same on every machine. A build that runs
here is planned with this machine's own detected facts instead, where the build is planned.
"""

from __future__ import annotations

from archspec.cpu import TARGETS

from builder.errors import InputError
from builder.hardware.facts import CpuFacts, HostFacts

NAME = "reference: 16 cores, 64 GiB"
CPUS = 16
MEMORY_BYTES = 64 * 1024**3

#: archspec generic target and psABI/Arm level of the reference machine of each architecture.
GENERIC = {"x86_64": ("x86_64_v2", "x86-64-v2"), "aarch64": ("aarch64", "armv8-a")}


def reference_build_facts(arch: str) -> HostFacts:
    """Host facts of the reference build machine for `arch` ("x86_64" or "aarch64"); fixed data."""
    if arch not in GENERIC:
        raise InputError(f"no reference build machine for architecture {arch!r}")
    archspec_name, level = GENERIC[arch]
    generic = TARGETS[archspec_name]
    return HostFacts(
        cpu=CpuFacts(
            arch=arch,
            vendor="generic",
            model_name=NAME,
            microarchitecture=generic.name,
            level=level,
            features=frozenset(generic.features),
            logical_cpus=CPUS,
            usable_cpus=CPUS,
            total_memory_bytes=MEMORY_BYTES,
            usable_memory_bytes=MEMORY_BYTES,
        )
    )
