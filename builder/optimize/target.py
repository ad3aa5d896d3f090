"""The target optimize works for: this host's CPU flags and GPUs (measured here), or a named build target
(chosen by rule, since it cannot be timed here)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


from builder.optimize import recipe as recipes
from builder.optimize.recipe import Recipe

INTERESTING_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni",
                     "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16", "asimd", "asimddp",
                     "asimdhp", "i8mm", "bf16", "sve", "sve2")


@dataclass(frozen=True)
class TargetFacts:
    name: str
    arch: str
    features: frozenset[str]
    gpu_capabilities: tuple[str, ...]
    is_host: bool = True


def host_facts() -> TargetFacts:
    """This machine's CPU flags and GPU capabilities (builder.hardware; its /proc/cpuinfo reading alone when
    the whole detection fails)."""
    import platform

    from builder.hardware.cpu import cpu_facts_from_text

    try:
        from builder.hardware import detect_host

        host = detect_host()
        ccs = tuple(d.compute_capability for d in host.gpu.devices if d.compute_capability)
        return TargetFacts(f"host ({host.cpu.microarchitecture})", host.cpu.arch, frozenset(host.cpu.features), ccs)
    except Exception:  # detection is best effort here: the kernel's own flag list is enough to choose
        try:
            text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""
        cpu = cpu_facts_from_text(text, default_arch=platform.machine())
        return TargetFacts("host", cpu.arch, cpu.features, ())


def target_facts(name: str | None, cuda_cc: str | None = None) -> TargetFacts:
    """Facts of a named build target (builder.targets.resolve_target), or of this host when no name is given."""
    if (not name or name.strip().lower() == "host") and not cuda_cc:
        return host_facts()
    from builder.targets import resolve_target

    target = resolve_target(name or "host", cuda_cc=cuda_cc)
    ccs = tuple(target.cuda.capabilities) if target.cuda else ()
    return TargetFacts(target.name, target.arch, frozenset(target.features), ccs, is_host=False)


def measures_here(recipe: Recipe, facts: TargetFacts) -> bool:
    """auto on this host measures every candidate; GPU hosts (tensor cores) choose the SavedModel by rule."""
    return recipe.name == "auto" and facts.is_host and not recipes.tensor_core_gpus(facts.gpu_capabilities)
