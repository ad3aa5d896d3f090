"""Resolve a BuildTarget from a name (or "host") plus CUDA capabilities, refusing what cannot work.

Public API (other stages call these):
- `resolve_target(name="host", *, cuda_cc=None, facts=None, tf_version="2.21.0", python="3.12",
  build_machine=None) -> BuildTarget`
    name: "host" (the newest named archspec target whose code-generating features this host has, plus
          `-m` flags for code-generating features it has beyond that target, with a server part's tuning
          on a server part; never -march=native),
          "x86-64-v2|v3|v4" (also "x86_64_v3"), "x86-64", "aarch64", or any archspec microarchitecture of the
          x86_64/aarch64 families ("haswell", "icelake", "sapphirerapids", "zen4", "neoverse_v1", ...).
    cuda_cc: None or "none" (CPU-only), "auto" (every distinct capability of the host's GPUs), or a list such
          as "8.0,9.0" / "80,90" / "sm_80,sm_90". The newest is also embedded as PTX. (What a build does when
          the user asked nothing is `choose_cuda`'s decision, made before this is called.)
    facts: the host for "host" and "auto" (default: detect this machine). Only these two probe the host:
          resolving a named target without "auto" is pure (no /proc/cpuinfo, NVML or nvidia-smi).
    build_machine: the machine that runs bazel, for host_copts (default: the fixed reference build machine
          of the target's architecture, `builder.hardware.reference`, never this host: the build machine
          is a fact of the build plan, and whoever plans a build here passes this machine's facts).
          host_copts are always the build machine's own best generic level (e.g. -march=x86-64-v3
          -mtune=generic), never the target's: bazel runs the tools it compiles during the build, and a
          newer target would crash them.
  Raises InputError for unknown names (with the closest valid names) and bad values, IncompatibleError for
  combinations that cannot work (a CPU name the toolchain's clang cannot target, Blackwell with TF 2.21's
  CUDA 12.5 / clang 18, capabilities below what CUDA supports, Python outside TF's range).
- `choose_cuda(name, cuda_cc, facts, tf_version) -> CudaChoice`: which GPUs an image is built for when the
  user asked nothing, a list, `auto` or `none` (the one decision build, optimize and package follow: see
  its docstring); pure over the facts it is given.
- `can_run(target, facts) -> tuple[str, ...]`: features the machine lacks (empty: an image for `target` runs).
- `target_names() -> tuple[str, ...]`: every accepted name; `check_target_name(name)` refuses others.

A target's `features` are those its flags let the compiler emit (`builder.hardware.codegen`, from the table
builder/data/cpu_features.json): the guard, `check` and node affinity require exactly these, never the hints
and intrinsic-only features (waitpkg, AMX, dgh, ...) that archspec also lists and hypervisors hide.
"""

from __future__ import annotations

import difflib
from functools import lru_cache

from archspec.cpu import TARGETS, Microarchitecture, UnsupportedMicroarchitecture

from builder import compat
from builder.errors import IncompatibleError, InputError
from builder.guard import canonical_features, missing_features, parse_capability
from builder.hardware.codegen import code_features, feature_option, hint_features, is_server_part, server_flags
from builder.hardware.facts import HostFacts
from builder.hardware.reference import reference_build_facts
from builder.target_types import BuildTarget, CudaChoice, CudaSpec

FAMILIES = ("x86_64", "aarch64")  # what TensorFlow builds for


def canonical_name(archspec_name: str) -> str:
    """archspec name -> tfsmith name: generic x86 levels use the psABI spelling (x86-64-v3), others stay."""
    return archspec_name.replace("_", "-") if archspec_name.startswith("x86_64") else archspec_name


def archspec_name(name: str) -> str:
    """tfsmith/user spelling -> archspec key ("x86-64-v3" -> "x86_64_v3")."""
    lowered = name.strip().lower()
    return lowered.replace("-", "_") if lowered.startswith("x86-64") or lowered.startswith("x86_64") else lowered


@lru_cache(maxsize=1)
def target_names() -> tuple[str, ...]:
    """Every name resolve_target accepts (canonical spelling), "host" first."""
    names = sorted(canonical_name(n) for n, t in TARGETS.items() if t.family.name in FAMILIES)
    return ("host", *names)


def _unknown(name: str) -> InputError:
    close = difflib.get_close_matches(name.lower(), target_names(), n=4, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return InputError(f"unknown target {name!r}{hint} (`tfsmith target --list` shows them all)")


def check_target_name(name: str) -> str:
    """`name` when `resolve_target` accepts it, else the InputError naming the closest valid names.
    For callers that only carry a name forward (the CI matrix) and must refuse a typo where it is typed."""
    if name != "host":
        _microarchitecture(name)
    return name


def _microarchitecture(name: str) -> Microarchitecture:
    key = archspec_name(name)
    target = TARGETS.get(key) or TARGETS.get(key.replace("-", "_"))  # skylake-avx512 -> skylake_avx512
    if target is None:
        raise _unknown(name)
    if target.family.name not in FAMILIES:
        raise InputError(f"target {name!r} is a {target.family.name} CPU; TensorFlow builds target x86_64 or aarch64")
    return target


def _flags(target: Microarchitecture, clang: str) -> tuple[str, ...]:
    """archspec's optimization flags for the toolchain's clang, split; IncompatibleError when too old."""
    try:
        return tuple(target.optimization_flags("clang", clang).split())
    except UnsupportedMicroarchitecture as error:
        raise IncompatibleError(
            f"clang {clang} (the toolchain of this TensorFlow version) cannot target {canonical_name(target.name)}: "
            f"{error}; pick an older target such as {canonical_name(_fallback_for(target, clang))}"
        ) from None


def _fallback_for(target: Microarchitecture, clang: str) -> str:
    for parent in sorted(target.ancestors, key=lambda t: len(t.ancestors), reverse=True):
        try:
            parent.optimization_flags("clang", clang)
            return parent.name
        except UnsupportedMicroarchitecture:
            continue
    return target.family.name


def _best_generic(facts: HostFacts) -> Microarchitecture:
    """The build machine's own safe level: the newest generic target its flags cover."""
    arch = facts.cpu.arch
    if arch not in TARGETS:
        raise InputError(f"build machine architecture {arch!r} is not supported")
    have = canonical_features(facts.cpu.features)
    generic = [
        t for t in TARGETS.values()
        if t.vendor == "generic" and t.family.name == arch and code_features(t) <= have
        and (arch != "aarch64" or t.name == "aarch64")  # archspec lists no hwcaps for armv8.x generics
    ]
    return max(generic, key=lambda t: (len(t.ancestors), len(t.features)), default=TARGETS[arch])


def host_copts(build_machine: HostFacts, clang: str) -> tuple[str, ...]:
    """Flags for tools bazel builds and runs on the build machine (its best generic level)."""
    return tuple(_best_generic(build_machine).optimization_flags("clang", clang).split())


def _host_target(facts: HostFacts, clang: str) -> Microarchitecture:
    """Newest named target whose code-generating features the host has AND that this clang can target
    (zen5 -> zen4 on clang 18)."""
    from builder.hardware.cpu import ranked_targets

    if facts.cpu.arch not in FAMILIES:
        raise IncompatibleError(f"host CPU is {facts.cpu.arch}; TensorFlow builds target x86_64 or aarch64")
    ranked = ranked_targets(facts.cpu.arch, facts.cpu.vendor, facts.cpu.features, facts.cpu.cpu_part)
    named = [t for t in ranked if t.vendor != "generic"]
    # When clang cannot target the best match (neoverse_v3ae, zen5 on clang 18), its named ancestors
    # (neoverse_v2, zen4) come before falling back to a generic level: the host has their features too.
    ancestors = sorted(
        {a for t in named for a in t.ancestors if a.vendor != "generic" and a not in named},
        key=lambda t: (-len(t.ancestors), -len(t.features), t.name),  # name: a stable tie-break
    )
    have = canonical_features(facts.cpu.features)
    ancestors = [a for a in ancestors if code_features(a) <= have]
    for candidate in [*named, *ancestors, *(t for t in ranked if t.vendor == "generic")]:
        try:
            candidate.optimization_flags("clang", clang)
            return candidate
        except UnsupportedMicroarchitecture:
            continue
    raise IncompatibleError(f"no named target fits host CPU {facts.cpu.microarchitecture} ({facts.cpu.arch})")


def host_extras(micro: Microarchitecture, facts: HostFacts) -> tuple[str, ...]:
    """Code-generating x86 features this host has beyond `micro` that one compiler flag enables, sorted:
    a host named x86-64-v4 (or zen4) that also has AVX512-BF16 builds with `-mavx512bf16` too."""
    if micro.family.name != "x86_64":
        return ()
    have = canonical_features(facts.cpu.features)
    return tuple(sorted(f for f in have - code_features(micro) if feature_option(f) is not None))


def _host_copts(micro: Microarchitecture, facts: HostFacts, copts: tuple[str, ...], extras: tuple[str, ...]) -> tuple[str, ...]:
    """The host target's flags: a server spelling of the tuning on a server part, then one flag per extra."""
    if facts.cpu.vendor == "GenuineIntel" and is_server_part(facts.cpu.model_name):
        copts = server_flags(copts)
    options = [feature_option(f) for f in extras]
    return (*copts, *(option for option in options if option))


def parse_capabilities(value: str) -> tuple[str, ...]:
    """"8.0,9.0" / "80 90" / "sm_80,sm_90" -> ("8.0", "9.0"): distinct, oldest first."""
    parts = [part for part in value.replace(" ", ",").split(",") if part]
    if not parts:
        raise InputError("empty --cuda-cc list (use e.g. 8.0,9.0 or auto)")
    try:
        caps = {parse_capability(part) for part in parts}
    except ValueError as error:
        raise InputError(str(error)) from None
    return tuple(f"{major}.{minor}" for major, minor in sorted(caps))


def _cap(value: str) -> tuple[int, int]:
    return parse_capability(value)


def cuda_spec(capabilities: tuple[str, ...], row: compat.CompatRow) -> CudaSpec:
    """CudaSpec for these capabilities with this TF version's hermetic CUDA; refuses what it cannot build."""
    limits = compat.cuda_limits(row.cuda)
    clang_max = compat.clang_max_capability(row.clang)
    too_old = [cc for cc in capabilities if _cap(cc) < _cap(limits.min_capability)]
    if too_old:
        raise IncompatibleError(
            f"CUDA {limits.cuda} (TensorFlow {row.tf_version}) cannot compile for capability {', '.join(too_old)} "
            f"(oldest supported: {limits.min_capability}); drop those GPUs from --cuda-cc or use an older TensorFlow"
        )
    ceiling = min(_cap(limits.max_capability), _cap(clang_max))
    too_new = [cc for cc in capabilities if _cap(cc) > ceiling]
    if too_new:
        blackwell = any(_cap(cc)[0] >= 10 for cc in too_new)
        why = " (Blackwell needs CUDA >= 12.8 and a newer clang)" if blackwell else ""
        raise IncompatibleError(
            f"TensorFlow {row.tf_version} builds with CUDA {limits.cuda} and clang {row.clang}, which cannot compile "
            f"for capability {', '.join(too_new)}{why}; build for {limits.max_capability} with PTX instead "
            f"(--cuda-cc {limits.max_capability}: the driver JIT-compiles it for newer GPUs) or wait for a TensorFlow "
            "release whose hermetic CUDA supports it"
        )
    return CudaSpec(version=row.cuda, cudnn=row.cudnn, capabilities=capabilities, ptx=capabilities[-1])


def _auto_capabilities(facts: HostFacts) -> tuple[str, ...]:
    caps = [gpu.compute_capability for gpu in facts.gpus if gpu.compute_capability]
    if not caps:
        detail = f" ({facts.gpu.detail})" if facts.gpu.detail else ""
        raise InputError(
            f"--cuda-cc auto found no GPU capability: GPU status is {facts.gpu_status}{detail}; "
            "pass the capabilities explicitly, e.g. --cuda-cc 8.0,9.0"
        )
    return parse_capabilities(",".join(caps))


def resolve_target(
    name: str = "host",
    *,
    cuda_cc: str | None = None,
    facts: HostFacts | None = None,
    tf_version: str = "2.21.0",
    python: str = "3.12",
    build_machine: HostFacts | None = None,
) -> BuildTarget:
    """The BuildTarget for a name (see the module docstring for every argument and error)."""
    row = compat.lookup(tf_version)
    compat.version_tuple(python)
    if not row.supports_python(python):
        raise IncompatibleError(
            f"TensorFlow {row.tf_version} supports Python {row.python_min}-{row.python_max}, not {python}; "
            f"use --python {row.python_versions[-1]}"
        )
    if cuda_cc is not None and cuda_cc.strip().lower() == "none":
        cuda_cc = None
    needs_host = name.strip().lower() == "host" or (cuda_cc or "").strip().lower() == "auto"
    if needs_host and facts is None:
        from builder.hardware import detect_host

        facts = detect_host()
    extras: tuple[str, ...] = ()
    if name.strip().lower() == "host":
        assert facts is not None
        micro = _host_target(facts, row.clang)
        extras = host_extras(micro, facts)
        copts = _host_copts(micro, facts, _flags(micro, row.clang), extras)
    else:
        micro = _microarchitecture(name)
        copts = _flags(micro, row.clang)
    if build_machine is None:
        build_machine = reference_build_facts(micro.family.name)
    cuda = None
    if cuda_cc is not None and cuda_cc.strip():
        if cuda_cc.strip().lower() == "auto":
            assert facts is not None
            capabilities = _auto_capabilities(facts)
        else:
            capabilities = parse_capabilities(cuda_cc)
        cuda = cuda_spec(capabilities, row)
    return BuildTarget(
        name=canonical_name(micro.name),
        arch=micro.family.name,
        features=code_features(micro) | frozenset(extras),
        hints=hint_features(micro),
        extras=extras,
        copts=copts,
        host_copts=host_copts(build_machine, row.clang),
        cuda=cuda,
        tf_version=tf_version,
        python=python,
        compiler="clang",
        compiler_version=row.clang,
    )


#: How the user turns the GPU build off, said wherever tfsmith decides for the GPUs itself.
CPU_ONLY_HINT = "--cuda-cc none (make build CUDA_CC=none)"


def gpus_found(facts: HostFacts) -> tuple[str, ...]:
    """The host's GPUs as people name them: ("NVIDIA H100 80GB HBM3 (9.0)",)."""
    return tuple(f"{gpu.name or f'GPU {gpu.index}'} ({gpu.compute_capability or 'capability unknown'})"
                 for gpu in facts.gpus)


def _gpus_line(facts: HostFacts) -> str:
    """The first line a build prints about GPUs: which were found (and the driver), or why none was."""
    gpu = facts.gpu
    if not gpu.devices:
        detail = f": {gpu.detail}" if gpu.detail else ""
        return f"GPUs    none found ({gpu.status}{detail})"
    names = gpus_found(facts)
    driver = ""
    if gpu.driver_version:
        driver = f"; driver {gpu.driver_version}" + (f" (CUDA {gpu.cuda_driver_version})" if gpu.cuda_driver_version else "")
    return f"GPUs    {len(names)} found: {', '.join(names)}{driver}"


def _driver_cuda(facts: HostFacts) -> str | None:
    """The newest CUDA the host's driver runs: as the driver reports it, else from its branch."""
    gpu = facts.gpu
    return gpu.cuda_driver_version or (compat.cuda_for_driver(gpu.driver_version) if gpu.driver_version else None)


def _too_old(facts: HostFacts, row: compat.CompatRow) -> str | None:
    """Why the host's driver cannot run this TensorFlow's CUDA, or None when it can (or cannot be told)."""
    driver_cuda = _driver_cuda(facts)
    if compat.driver_runs(driver_cuda, row.cuda) is not False:
        return None
    major = row.cuda.split(".")[0]
    return (f"driver {facts.gpu.driver_version or '?'} runs CUDA up to {driver_cuda}, older than the CUDA "
            f"{row.cuda} TensorFlow {row.tf_version} is built with (CUDA {major} needs driver "
            f"{compat.min_driver_for(row.cuda) or '?'} or newer)")


def _minor_compat(facts: HostFacts, row: compat.CompatRow) -> str:
    """A remark when the driver runs this CUDA only by minor version compatibility (an older 12.x), else ""."""
    driver_cuda = _driver_cuda(facts)
    if not driver_cuda or compat.version_tuple(driver_cuda)[:2] >= compat.version_tuple(row.cuda)[:2]:
        return ""
    return f" (driver CUDA {driver_cuda}: runs CUDA {row.cuda} by CUDA's minor version compatibility)"


def _built_for(spec: CudaSpec) -> str:
    caps = ", ".join(spec.capabilities)
    return f"capability {caps} ({spec.hermetic_list}) with CUDA {spec.version} / cuDNN {spec.cudnn}"


def choose_cuda(name: str, cuda_cc: str | None, facts: HostFacts | None, tf_version: str = "2.21.0") -> CudaChoice:
    """Which GPUs the image for target `name` is built for: the one decision every stage follows.

    - `cuda_cc` "none": CPU-only, as asked, whatever GPUs the host has.
    - a capability list: those, as asked (an image for other machines: this host's driver is not consulted).
    - "auto": this host's GPUs; no GPU capability, a driver too old for this TensorFlow's CUDA, or a GPU it
      cannot compile for are refused with the reason (the user asked for these GPUs explicitly).
    - nothing asked, target `host`: the host's GPUs when it has some that this TensorFlow can build for and
      whose driver runs its CUDA; otherwise CPU-only, saying why (an image built for a CUDA the driver cannot
      run would not start on the very host it was made for).
    - nothing asked, a named target: CPU-only (a named target never probes this host for GPUs).
    `facts` is the host "host" and "auto" mean (None: not known; only named targets and lists need none).
    """
    row = compat.lookup(tf_version)
    asked = (cuda_cc or "").strip().lower()
    is_host = name.strip().lower() == "host"
    gpus = gpus_found(facts) if facts is not None else ()
    found = (_gpus_line(facts),) if facts is not None and (is_host or facts.gpus or asked == "auto") else ()
    if asked == "none":
        unused = "; the GPUs above are not used" if gpus else ""
        return CudaChoice(None, "cpu-asked", "CPU-only, as asked (cuda_cc none)", gpus,
                          (*found, f"CUDA    none: a CPU-only image, as asked (cuda_cc none){unused}"))
    if asked == "auto":
        if facts is None:
            raise InputError("--cuda-cc auto needs this host's facts (detect them, or pass --facts FILE)")
        capabilities = _auto_capabilities(facts)
        too_old = _too_old(facts, row)
        if too_old is not None:
            raise IncompatibleError(
                f"--cuda-cc auto: {too_old}; upgrade the driver, build for the GPUs anyway with --cuda-cc "
                f"{','.join(capabilities)} (for machines with a newer driver), or build CPU-only with --cuda-cc none"
            )
        spec = cuda_spec(capabilities, row)
        return CudaChoice(",".join(capabilities), "asked", f"CUDA for this host's GPUs ({', '.join(gpus)}), as asked "
                          "(cuda_cc auto)", gpus, (*found, f"CUDA    {_built_for(spec)}, as asked (cuda_cc auto)"))
    if asked:
        capabilities = parse_capabilities(asked)
        spec = cuda_spec(capabilities, row)
        return CudaChoice(",".join(capabilities), "asked", f"CUDA for capability {', '.join(capabilities)}, as asked",
                          gpus, (*found, f"CUDA    {_built_for(spec)}, as asked"))
    if not is_host:
        lines = (*found, f"CUDA    none: target {name} is a named CPU target; add --cuda-cc auto|LIST to build "
                         "for GPUs") if gpus else ()
        return CudaChoice(None, "named-target", f"CPU-only: target {name} was named without CUDA capabilities",
                          gpus, lines)
    assert facts is not None, "choose_cuda: target host needs the host's facts"
    capabilities = tuple(gpu.compute_capability for gpu in facts.gpus if gpu.compute_capability)
    if facts.gpu_status != "ok" or not capabilities:
        if facts.gpus:  # GPUs listed, but their capability (or the driver) could not be read
            why = f"CPU-only: the GPUs' capabilities could not be read ({facts.gpu.detail or facts.gpu_status})"
            line = "CUDA    none: a CPU-only image; pass --cuda-cc LIST to build for these GPUs"
        else:
            why = f"CPU-only: no NVIDIA GPU found ({facts.gpu.detail or facts.gpu_status})"
            line = "CUDA    none: a CPU-only image"
        return CudaChoice(None, "no-gpu", why, gpus, (*found, line))
    capabilities = parse_capabilities(",".join(capabilities))
    too_old = _too_old(facts, row)
    if too_old is not None:
        return CudaChoice(None, "driver-too-old", f"CPU-only: {too_old}", gpus, (
            *found, f"CUDA    none: a CPU-only image: {too_old}, so a CUDA image could not use the GPUs here; "
                    f"upgrade the driver, or build for them anyway with --cuda-cc {','.join(capabilities)}"))
    try:
        spec = cuda_spec(capabilities, row)
    except IncompatibleError as error:
        return CudaChoice(None, "gpu-unsupported", f"CPU-only: {error}", gpus,
                          (*found, f"CUDA    none: a CPU-only image: {error}"))
    unknown = _minor_compat(facts, row) if _driver_cuda(facts) else \
        f" (the driver's CUDA version is unknown: check it runs CUDA {row.cuda})"
    return CudaChoice(",".join(capabilities), "host-gpus",
                      f"CUDA {spec.version} for this host's {', '.join(gpus)}", gpus,
                      (*found, f"CUDA    {_built_for(spec)}, for the GPUs found{unknown}; CPU-only instead: "
                               f"{CPU_ONLY_HINT}"))


def can_run(target: BuildTarget, facts: HostFacts) -> tuple[str, ...]:
    """Features `target` needs that the machine described by `facts` lacks (empty: it can run).

    A machine of another architecture lacks everything: the answer is ("arch:<target arch>",).
    """
    if target.arch != facts.cpu.arch:
        return (f"arch:{target.arch}",)
    return missing_features(target.features, facts.cpu.features)
