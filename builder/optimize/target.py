"""The target optimize works for: this host's CPU flags and the GPUs its TensorFlow image is built for
(measured here, or by rule where that image serves on tensor cores), or a named build target (chosen by rule,
since it cannot be timed here).

The GPUs are not simply "what detect finds": they are the image's, decided by `builder.targets.choose_cuda`
from the same settings `tfsmith build` reads (`--cuda-cc` > TFSMITH_CUDA_CC > tfsmith.toml > the default).
A GPU host whose image is CPU-only (`--cuda-cc none`, a driver too old for TensorFlow's CUDA) gets a CPU
artifact, measured; one whose image is built for its tensor cores gets the SavedModel on TensorFlow, by rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.optimize import recipe as recipes
from builder.optimize.recipe import Recipe

INTERESTING_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni",
                     "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16", "asimd", "asimddp",
                     "asimdhp", "i8mm", "bf16", "sve", "sve2")


@dataclass(frozen=True)
class TargetFacts:
    """What optimize chooses for. `gpu_capabilities` are those the target's TensorFlow image is built for
    (empty: a CPU-only image), and `gpu_why` says why, in one sentence the report repeats."""

    name: str
    arch: str
    features: frozenset[str]
    gpu_capabilities: tuple[str, ...]
    is_host: bool = True
    gpu_why: str = ""
    gpu_rule: str = ""  # builder.target_types.CudaChoice.rule: which branch decided the GPUs


def _detect() -> Any:
    """This machine's HostFacts; its /proc/cpuinfo reading alone when the whole detection fails."""
    import platform

    from builder.hardware.cpu import cpu_facts_from_text
    from builder.hardware.facts import GpuReport, HostFacts

    try:
        from builder.hardware import detect_host

        return detect_host()
    except Exception:  # detection is best effort here: the kernel's own flag list is enough to choose
        try:
            text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""
        cpu = cpu_facts_from_text(text, default_arch=platform.machine())
        return HostFacts(cpu=cpu, gpu=GpuReport(status="error", detail="GPU detection failed"))


def host_facts(host: Any | None = None) -> TargetFacts:
    """This machine's CPU flags and every GPU detect finds (what the host IS, for the report's `host`; what
    optimize chooses for is `target_facts`)."""
    host = host if host is not None else _detect()
    ccs = tuple(d.compute_capability for d in host.gpu.devices if d.compute_capability)
    return TargetFacts(f"host ({host.cpu.microarchitecture})", host.cpu.arch, frozenset(host.cpu.features), ccs)


def target_facts(name: str | None, cuda_cc: str | None = None, *, host: Any | None = None,
                 settings: Any | None = None) -> TargetFacts:
    """Facts of the target optimize chooses for: this host (with the GPUs its image is built for) when the
    settings name `host` (the default), else the named build target.

    `settings`: a BuildConfig already read (default: read as `tfsmith build` reads it, `name` and `cuda_cc`
    being the flags). `host`: this machine's HostFacts (default: detected). A facts file in the settings
    (`facts`, TFSMITH_FACTS) is what `host` means, as for `tfsmith build`: then `host` is that machine,
    chosen for by rule, since it is not the one optimize runs on.
    """
    from builder.build.plan import DEFAULT_TF_VERSION
    from builder.targets import choose_cuda, resolve_target

    if settings is None:
        from builder.build.settings import load_config

        settings = load_config({"target": name, "cuda_cc": cuda_cc})
    tf_version = settings.tf_version or DEFAULT_TF_VERSION
    here = True
    if settings.facts is not None:
        from builder.hardware import load_facts

        host, here = load_facts(settings.facts), False
    if settings.target.strip().lower() == "host":
        host = host if host is not None else _detect()
        choice = choose_cuda("host", settings.cuda_cc, host, tf_version)
        where = "" if here else f", described by {settings.facts}"
        return TargetFacts(f"host ({host.cpu.microarchitecture}{where})", host.cpu.arch,
                           frozenset(host.cpu.features), choice.capabilities, here, choice.why, choice.rule)
    if (settings.cuda_cc or "").strip().lower() == "auto" and host is None:
        host = _detect()
    choice = choose_cuda(settings.target, settings.cuda_cc, host, tf_version)
    resolved = resolve_target(settings.target, cuda_cc=choice.cuda_cc, facts=host, tf_version=tf_version)
    ccs = tuple(resolved.cuda.capabilities) if resolved.cuda else ()
    return TargetFacts(resolved.name, resolved.arch, frozenset(resolved.features), ccs, is_host=False,
                       gpu_why=choice.why, gpu_rule=choice.rule)


def measures_here(recipe: Recipe, facts: TargetFacts) -> bool:
    """auto on this host measures every candidate; a host whose image serves on tensor cores chooses the
    SavedModel by rule (a CPU measurement here cannot judge the GPU)."""
    return recipe.name == "auto" and facts.is_host and not recipes.tensor_core_gpus(facts.gpu_capabilities)


def rule_reason(facts: TargetFacts) -> str:
    """Why optimize chooses by rule for these facts, in the words the report uses."""
    tensor_cores = recipes.tensor_core_gpus(facts.gpu_capabilities)
    if tensor_cores:
        whose = "this host's" if facts.is_host else f"{facts.name}'s"
        return (f"by rule: {whose} TensorFlow image is built for GPU capability {', '.join(tensor_cores)} "
                f"(tensor cores; {facts.gpu_why}), where the SavedModel on TensorFlow serves on the GPU, which "
                "timing on this CPU cannot judge")
    if facts.is_host:
        return "by rule for this host: the recipe names the artifact"
    return f"by rule: {facts.name} is not this host, so it could not be measured here"


#: CudaChoice rules under which a host HAS GPUs its CPU-only image does not use.
GPUS_UNUSED = ("cpu-asked", "driver-too-old", "gpu-unsupported")


def measured_note(facts: TargetFacts) -> str:
    """What a measured choice adds when the host's GPUs are left out of its image (else "")."""
    if facts.is_host and facts.gpu_rule in GPUS_UNUSED:
        return f"; the TensorFlow image is CPU-only, so the CPU was measured ({facts.gpu_why})"
    return ""
