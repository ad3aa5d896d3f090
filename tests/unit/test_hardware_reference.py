"""The reference build machine: fixed generic facts per architecture, the same as the build plan's."""

from __future__ import annotations

import pytest

from builder.errors import InputError
from builder.hardware.reference import CPUS, MEMORY_BYTES, reference_build_facts
from builder.targets import host_copts


@pytest.mark.parametrize(("arch", "flags"), [("x86_64", ("-march=x86-64-v2", "-mtune=generic")),
                                             ("aarch64", ("-march=armv8-a", "-mtune=generic"))])
def test_a_conservative_generic_machine_of_each_family(arch: str, flags: tuple[str, ...]) -> None:
    facts = reference_build_facts(arch)
    assert facts.cpu.arch == arch and facts.cpu.vendor == "generic"
    assert facts.cpu.usable_cpus == CPUS and facts.cpu.usable_memory_bytes == MEMORY_BYTES
    assert host_copts(facts, "18.1.8") == flags
    assert reference_build_facts(arch) == facts  # fixed data: equal every time, on every machine


def test_the_build_plan_uses_the_same_machine() -> None:
    from builder.build.plan import REFERENCE_BUILD_MACHINE
    from builder.build.plan import reference_build_facts as plans

    for arch in ("x86_64", "aarch64"):
        assert plans(arch) == reference_build_facts(arch)
    assert (REFERENCE_BUILD_MACHINE.cpus, REFERENCE_BUILD_MACHINE.memory_bytes) == (CPUS, MEMORY_BYTES)


def test_other_architectures_have_none() -> None:
    with pytest.raises(InputError, match="no reference build machine for architecture 'ppc64le'"):
        reference_build_facts("ppc64le")
