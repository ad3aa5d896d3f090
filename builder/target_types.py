"""The resolved build target: plain frozen data that every later stage reads.

`builder.targets` computes these (from host facts, a level like `x86-64-v3`, an archspec name, and CUDA
capabilities); render, build, optimize and package only read them. Kept in its own module so the
consumers depend on the shape, not on the resolution logic.
"""

from __future__ import annotations

from dataclasses import dataclass

from builder.guard import ENV


@dataclass(frozen=True)
class CudaSpec:
    """CUDA part of a target: hermetic toolkit versions and the GPU capabilities to compile for."""

    version: str  # hermetic CUDA, e.g. "12.5.1"
    cudnn: str  # hermetic cuDNN, e.g. "9.3.0"
    capabilities: tuple[str, ...]  # distinct, sorted, e.g. ("8.0", "9.0")
    ptx: str  # capability also embedded as PTX (the newest), e.g. "9.0"

    @property
    def hermetic_list(self) -> str:
        """Value for HERMETIC_CUDA_COMPUTE_CAPABILITIES: sm_XX per capability, compute_XX for the PTX one."""
        sms = [f"sm_{cc.replace('.', '')}" for cc in self.capabilities]
        return ",".join([*sms, f"compute_{self.ptx.replace('.', '')}"])

    @property
    def tag_token(self) -> str:
        """Image-tag part, e.g. "cu12.5-cc80-cc90-ptx90"."""
        major_minor = ".".join(self.version.split(".")[:2])
        ccs = "-".join(f"cc{cc.replace('.', '')}" for cc in self.capabilities)
        return f"cu{major_minor}-{ccs}-ptx{self.ptx.replace('.', '')}"


@dataclass(frozen=True)
class CudaChoice:
    """Which GPUs a TensorFlow image is built for, decided once (`builder.targets.choose_cuda`) from the user's
    `cuda_cc` setting and the host's GPUs: `tfsmith build`, `target`, `render`, `optimize` (its target facts)
    and `package` (its base image) all follow the same choice, so the image, the artifact chosen for it and
    the serving image built FROM it agree.

    `cuda_cc` is what `resolve_target` gets: a capability list ("9.0", "8.0,9.0") or None for a CPU-only
    image. `rule` names the branch that decided (stable words, for tests and reports):
    "asked" (a capability list or `auto` was given), "host-gpus" (target host, GPUs found, nothing asked),
    "cpu-asked" (`none`), "no-gpu", "driver-too-old", "gpu-unsupported" (a GPU this TensorFlow's CUDA or
    clang cannot compile for), "named-target" (a named CPU target without `cuda_cc`: never probes for GPUs).
    `gpus` are the GPUs found ("NVIDIA H100 80GB HBM3 (9.0)"), `why` one sentence for reports, `lines` what a
    build prints first (which GPUs were found, what the image is built for, how to opt out or in).
    """

    cuda_cc: str | None
    rule: str
    why: str
    gpus: tuple[str, ...] = ()
    lines: tuple[str, ...] = ()

    @property
    def capabilities(self) -> tuple[str, ...]:
        """The capabilities the image is built for ("9.0",); () for a CPU-only image."""
        return tuple(part for part in (self.cuda_cc or "").split(",") if part)


@dataclass(frozen=True)
class BuildTarget:
    """What one TensorFlow build is compiled for.

    `name` is the canonical target name (`x86-64-v3`, `icelake`, `neoverse_v1`, ...). `features` are the CPU
    feature flags (Linux /proc/cpuinfo spelling: `avx2`, `avx512_vnni`, `asimd`, `sve`, ...) the compiler may
    emit from `copts`, so a machine must have them to run the code; the preflight guard checks exactly these.
    `hints` are the features archspec lists for the microarchitecture that compilers never emit unasked
    (waitpkg, AMX, dgh, ...): shown, never required. `extras` are code-generating features a host target
    adds beyond its microarchitecture with one `-m` flag each (also in `features` and `copts`).
    `host_copts` are for the tools bazel runs during the build, on the build machine, and are never newer
    than that machine.
    """

    name: str
    arch: str  # "x86_64" or "aarch64"
    features: frozenset[str]
    copts: tuple[str, ...]  # target code, e.g. ("-march=haswell", "-mtune=haswell")
    host_copts: tuple[str, ...]  # build-machine tools, e.g. ("-march=x86-64-v2",)
    cuda: CudaSpec | None = None
    tf_version: str = "2.21.0"
    python: str = "3.12"
    compiler: str = "clang"
    compiler_version: str = "18.1.8"
    hints: frozenset[str] = frozenset()
    extras: tuple[str, ...] = ()

    @property
    def tag_token(self) -> str:
        """Image-tag token: `x86-64-v3-cpu`, `icelake-cu12.5-cc80-cc90-ptx90`, `zen4-avxvnni-cpu` (extras), ..."""
        name = self.name.replace("_", "-") if self.name.startswith("x86_64") else self.name
        name += "".join(f"-{extra.replace('_', '')}" for extra in self.extras)
        return f"{name}-{self.cuda.tag_token}" if self.cuda else f"{name}-cpu"

    @property
    def guard_env(self) -> dict[str, str]:
        """Environment for the preflight guard (builder/guard.py) baked into images built for this target.

        `ENV` these in the runtime image and run `tfsmith-guard -- CMD` as the entrypoint: it refuses to
        start, with one clear line, on a CPU lacking any of `features` (or a GPU none of the capabilities
        can run on). Feature spelling is /proc/cpuinfo's, exactly what the guard compares.
        """
        env = {ENV["target"]: self.name, ENV["features"]: ",".join(sorted(self.features))}
        if self.cuda:
            env[ENV["cuda_cc"]] = ",".join(self.cuda.capabilities)
            env[ENV["ptx"]] = self.cuda.ptx
        return env

