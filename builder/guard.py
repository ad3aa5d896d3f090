#!/usr/bin/env python3
"""tfsmith preflight guard: refuse to start an image on a machine that cannot run its code.

A TensorFlow build compiled for a newer CPU than the one it lands on dies with a bare "Illegal
instruction" (TensorFlow's own startup check only knows ~17 features). This file runs first in every
image tfsmith renders and compares the image's target against this machine:

    tfsmith-guard --target x86-64-v3 --features avx,avx2,fma,... [--cuda-cc 8.0,9.0 --ptx 9.0] -- CMD ...

- every feature present (and, for CUDA targets, every visible GPU runnable): exit 0 silently, or exec CMD
  (as the container's first process, PID 1, it runs CMD as a child instead and exits as it exits: see
  `supervise`);
- a feature missing: ONE line on stderr naming the target and the missing features, exit 3;
- a CUDA target that cannot use a GPU here — no NVIDIA device in the container (`/dev/nvidia*`: the
  NVIDIA Container Toolkit adds them only with `--gpus`), no driver library, or TensorFlow's CUDA 12
  libraries (the `tensorflow[and-cuda]` extra: `nvidia-*-cu12` distributions; another CUDA's wheels of the
  same libraries do not count) not installed — one warning line saying TensorFlow will run on the CPU
  only, then go on; with `--require-gpu` (or TFSMITH_IMAGE_REQUIRE_GPU=1) that is a refusal (exit 3);
- a visible GPU that none of the compiled capabilities (nor the PTX) can run on: exit 3.
Usage errors exit 2. Every option can also come from the environment (TFSMITH_IMAGE_TARGET,
TFSMITH_IMAGE_FEATURES, TFSMITH_IMAGE_CUDA_CC, TFSMITH_IMAGE_PTX, TFSMITH_IMAGE_REQUIRE_GPU) so a Dockerfile
can bake them in with ENV. The `TFSMITH_IMAGE_` prefix keeps them apart from tfsmith's own settings
(`TFSMITH_TARGET` & co.), so running tfsmith inside an image never picks up the image's target.

Why pure standard library, one file: it is copied as-is into slim runtime images that have neither tfsmith
nor archspec, and it must start in a few tens of milliseconds (no third-party imports; NVML through
ctypes, nvidia-smi only as a fallback). `builder.targets` imports `canonical_features` from here so the
feature spelling the guard checks is exactly the spelling targets are resolved with.

Feature spelling is Linux /proc/cpuinfo's (what archspec uses too): `avx2`, `avx512_vnni`, `amx_tile`,
`asimd`, `sve`, `asimddp`. On arm64 the features come from the kernel's hwcaps in the auxiliary vector
(/proc/self/auxv), the same bits /proc/cpuinfo's `Features` line prints: under QEMU user mode (an arm64
image on an x86 host) /proc/cpuinfo is the x86 host's, while the hwcaps describe the emulated CPU. Aliases users may type or other tools print are folded in: `pni` -> `sse3`,
`lzcnt` -> `abm`, `dotprod` -> `asimddp`, `neon` -> `asimd`, ...
"""

from __future__ import annotations

import os
import struct
import sys
from collections.abc import Iterable, Sequence

# Alternative spelling -> the canonical /proc/cpuinfo (archspec) spelling.
FEATURE_ALIASES: dict[str, str] = {
    "pni": "sse3",  # /proc/cpuinfo calls SSE3 "pni" (Prescott New Instructions)
    "lzcnt": "abm",  # LZCNT shows as "abm" on x86 (AMD's name for LZCNT+POPCNT)
    "sse4.1": "sse4_1",
    "sse4.2": "sse4_2",
    "sse41": "sse4_1",
    "sse42": "sse4_2",
    "sha": "sha_ni",
    "bmi": "bmi1",
    "lahf": "lahf_lm",
    "avx512vnni": "avx512_vnni",
    "avx512bf16": "avx512_bf16",
    "avx512fp16": "avx512_fp16",
    "avxvnni": "avx_vnni",
    "amx-tile": "amx_tile",
    "amx-int8": "amx_int8",
    "amx-bf16": "amx_bf16",
    "neon": "asimd",
    "dotprod": "asimddp",
    "fp16": "fphp",
}

# Canonical spelling -> what people call it, for messages ("asimddp (dotprod)").
FEATURE_LABELS: dict[str, str] = {"asimddp": "dotprod", "abm": "lzcnt", "asimd": "neon"}

EXIT_CANNOT_RUN = 3
EXIT_USAGE = 2

# The guard's environment variables. No tfsmith setting (builder.build.settings) is named TFSMITH_IMAGE_*;
# tests/unit/test_config.py checks it.
ENV_PREFIX = "TFSMITH_IMAGE_"
ENV: dict[str, str] = {
    name: ENV_PREFIX + name.upper() for name in ("target", "features", "cuda_cc", "ptx", "require_gpu")
}


def canonical_feature(name: str) -> str:
    """One feature name in the canonical /proc/cpuinfo spelling."""
    lowered = name.strip().lower()
    return FEATURE_ALIASES.get(lowered, lowered)


def canonical_features(flags: Iterable[str]) -> frozenset[str]:
    """Flags as a machine reports them, plus their canonical spellings and what they imply.

    `ssse3` implies `sse3` (archspec adds it the same way), so a target listing `sse3` matches a
    /proc/cpuinfo that only says `pni`/`ssse3`.
    """
    raw = {flag.strip().lower() for flag in flags if flag.strip()}
    result = raw | {FEATURE_ALIASES.get(flag, flag) for flag in raw}
    if "ssse3" in result:
        result.add("sse3")
    return frozenset(result)


def label(feature: str) -> str:
    """`asimddp (dotprod)` for features better known by another name, else the name itself."""
    other = FEATURE_LABELS.get(feature)
    return f"{feature} ({other})" if other else feature


def missing_features(required: Iterable[str], host_flags: Iterable[str]) -> tuple[str, ...]:
    """Required features (canonical spelling) that the host lacks, sorted; empty means it can run."""
    have = canonical_features(host_flags)
    return tuple(sorted({canonical_feature(f) for f in required if f.strip()} - have))


def parse_cpuinfo(text: str) -> dict[str, str]:
    """Key/value pairs of the first processor stanza of a /proc/cpuinfo dump."""
    data: dict[str, str] = {}
    for line in text.splitlines():
        key, separator, value = line.partition(":")
        if separator != ":":
            if data:
                break
            continue
        data.setdefault(key.strip(), value.strip())
    return data


def cpuinfo_flags(data: dict[str, str]) -> frozenset[str]:
    """Raw feature flags: the `flags` line on x86, the `Features` line on ARM."""
    return frozenset((data.get("flags") or data.get("Features") or "").split())


def read_cpu_flags(path: str = "/proc/cpuinfo") -> frozenset[str]:
    """Raw feature flags of this machine (or of a recorded dump)."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        return cpuinfo_flags(parse_cpuinfo(handle.read()))


# arm64 hwcap bits in order, named as /proc/cpuinfo names them (Linux arch/arm64/include/uapi/asm/hwcap.h).
ARM64_HWCAP = tuple(
    """fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop sha3
    sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs sb paca pacg gcs""".split()
)
ARM64_HWCAP2 = tuple(
    """dcpodp sve2 sveaes svepmull svebitperm svesha3 svesm4 flagm2 frint svei8mm svef32mm svef64mm svebf16 i8mm
    bf16 dgh rng bti mte ecv afp rpres mte3 sme smei16i64 smef64f64 smei8i32 smef16f32 smeb16f32 smef32f32
    smefa64 wfxt ebf16 sveebf16 cssc rprfm sve2p1 sme2 sme2p1 smei16i32 smebi32i32 smeb16b16 smef16f16 mops hbc
    sveb16b16 lrcpc3 lse128""".split()
)
AT_HWCAP, AT_HWCAP2 = 16, 26


def hwcap_names(hwcap: int, hwcap2: int = 0) -> frozenset[str]:
    """The feature names of arm64 AT_HWCAP / AT_HWCAP2 bit masks."""
    return frozenset(
        [name for bit, name in enumerate(ARM64_HWCAP) if hwcap >> bit & 1]
        + [name for bit, name in enumerate(ARM64_HWCAP2) if hwcap2 >> bit & 1]
    )


def read_hwcaps(path: str = "/proc/self/auxv") -> frozenset[str] | None:
    """arm64 features from this process's auxiliary vector; None when it cannot be read or has no hwcaps."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    usable = len(data) - len(data) % 16
    entries = dict(struct.iter_unpack("=QQ", data[:usable]))
    if AT_HWCAP not in entries:
        return None
    return hwcap_names(entries[AT_HWCAP], entries.get(AT_HWCAP2, 0))


def host_cpu_flags(cpuinfo: str = "/proc/cpuinfo", machine: str | None = None) -> frozenset[str]:
    """This machine's CPU features: on arm64 the kernel's hwcaps (exact, and right under emulation, where
    /proc/cpuinfo is the host's), else /proc/cpuinfo's flags. OSError when neither can be read."""
    if (machine or os.uname().machine) == "aarch64":
        hwcaps = read_hwcaps()
        if hwcaps is not None:
            return hwcaps
    return read_cpu_flags(cpuinfo)


# ---------------------------------------------------------------------------------------------- GPUs
def parse_capability(text: str) -> tuple[int, int]:
    """`8.0`, `80`, `sm_80`, `compute_90` -> (8, 0)."""
    value = text.strip().lower()
    for prefix in ("sm_", "compute_"):
        if value.startswith(prefix):
            value = value[len(prefix) :]
    value = value.rstrip("af")  # sm_90a / sm_100f: arch-specific variants of the same capability
    if "." in value:
        major, minor = value.split(".", 1)
    elif value.isdigit() and len(value) >= 2:
        major, minor = value[:-1], value[-1]
    else:
        raise ValueError(f"not a CUDA compute capability: {text!r} (use e.g. 8.0 or sm_80)")
    if not (major.isdigit() and minor.isdigit()):
        raise ValueError(f"not a CUDA compute capability: {text!r} (use e.g. 8.0 or sm_80)")
    return int(major), int(minor)


def gpu_can_run(gpu: tuple[int, int], capabilities: Sequence[tuple[int, int]], ptx: tuple[int, int] | None) -> bool:
    """Whether a GPU of capability `gpu` can run code built for `capabilities` (+ PTX for `ptx`).

    Machine code (sm_XY) runs on the same major version with an equal or newer minor; PTX (compute_XY) is
    compiled by the driver for any GPU at least that new.
    """
    if any(cap[0] == gpu[0] and cap[1] <= gpu[1] for cap in capabilities):
        return True
    return ptx is not None and ptx <= gpu


def _nvml_capabilities() -> list[tuple[str, tuple[int, int]]] | None:
    """(name, capability) of every GPU via libnvidia-ml through ctypes; None when NVML is unusable."""
    import ctypes

    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    try:
        if lib.nvmlInit_v2() != 0:
            return None
        count = ctypes.c_uint(0)
        if lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return None
        gpus = []
        for index in range(count.value):
            handle = ctypes.c_void_p()
            if lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != 0:
                return None
            major, minor = ctypes.c_int(0), ctypes.c_int(0)
            if lib.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major), ctypes.byref(minor)) != 0:
                return None
            name = ctypes.create_string_buffer(96)
            lib.nvmlDeviceGetName(handle, name, 96)
            gpus.append((name.value.decode(errors="replace") or f"GPU {index}", (major.value, minor.value)))
        return gpus
    except AttributeError:  # a very old libnvidia-ml without the _v2 symbols
        return None
    finally:
        try:
            lib.nvmlShutdown()
        except AttributeError:
            pass


def _smi_capabilities() -> list[tuple[str, tuple[int, int]]] | None:
    """(name, capability) of every GPU via nvidia-smi; None when it is missing or fails."""
    import shutil
    import subprocess

    binary = shutil.which("nvidia-smi")
    if binary is None:
        return None
    try:
        result = subprocess.run(
            [binary, "--query-gpu=name,compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if result.returncode != 0:
        return None
    return parse_smi_capabilities(result.stdout)


def parse_smi_capabilities(text: str) -> list[tuple[str, tuple[int, int]]] | None:
    """(name, capability) per line of `nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader`; None
    when a line is not that (a name may hold commas: the capability is the last cell)."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, _, cap = line.rpartition(",")
        try:
            gpus.append((name.strip(), parse_capability(cap)))
        except ValueError:
            return None
    return gpus


def nvidia_device_nodes(dev: str = "/dev") -> list[str]:
    """The GPU device nodes (`nvidia0`, `nvidia1`, ...) present: a container sees them only when started
    with GPUs (`--gpus`, or the device plugin on Kubernetes). Listing /dev costs microseconds."""
    try:
        names = os.listdir(dev)
    except OSError:
        return []
    return sorted(name for name in names if name.startswith("nvidia") and name[len("nvidia") :].isdigit())


def visible_gpus(dev: str = "/dev") -> list[tuple[str, tuple[int, int]]] | None:
    """Every visible NVIDIA GPU as (name, capability); [] when none; None when it cannot be told.

    No GPU device node means no GPU, decided without loading any library; otherwise NVML is asked, then
    nvidia-smi."""
    if not nvidia_device_nodes(dev):
        return []
    gpus = _nvml_capabilities()
    if gpus is None:
        gpus = _smi_capabilities()
    return gpus


# TensorFlow's CUDA 12 libraries, by pip distribution: what its `and-cuda` extra installs and its GPU start-up
# loads (cuDNN, cuBLAS/cuBLASLt, the CUDA runtime, cuFFT, cuSOLVER, cuSPARSE). By distribution, not import
# name: CUDA 13 wheels (PyTorch's `nvidia-cudnn-cu13`, the suffix-less `nvidia-cublas` 13.x) provide the same
# import names (`nvidia.cudnn`, `nvidia.cublas`), and TensorFlow's CUDA 12 cannot load their libraries.
CUDA_DISTRIBUTIONS = (
    "nvidia-cudnn-cu12",
    "nvidia-cublas-cu12",
    "nvidia-cuda-runtime-cu12",
    "nvidia-cufft-cu12",
    "nvidia-cusolver-cu12",
    "nvidia-cusparse-cu12",
)


def _installed(name: str, path: Sequence[str] | None) -> bool:
    import importlib.metadata

    found = importlib.metadata.distributions(name=name, **({"path": list(path)} if path is not None else {}))
    return next(iter(found), None) is not None


def missing_cuda_packages(path: Sequence[str] | None = None) -> list[str]:
    """TensorFlow's CUDA 12 distributions this Python lacks (none: all installed), each naming what stands in
    its place when another CUDA's build of the library is installed: "nvidia-cudnn-cu12 (nvidia-cudnn-cu13
    installed: another CUDA's)".

    Looked up by distribution with importlib.metadata (no import of TensorFlow; a few milliseconds for these
    names, and only CUDA images ask); a system-wide CUDA install without the pip packages counts as missing,
    which is what TensorFlow's own loader sees first. `path`: where to look (default: sys.path)."""
    missing = []
    for name in CUDA_DISTRIBUTIONS:
        if _installed(name, path):
            continue
        stem = name[: -len("-cu12")]  # nvidia-cudnn
        others = [other for other in (f"{stem}-cu13", stem, f"{stem}-cu11") if _installed(other, path)]
        missing.append(name + (f" ({', '.join(others)} installed: another CUDA's)" if others else ""))
    return missing


def cuda_install_hint(missing: Sequence[str]) -> str:
    """How to install what `missing_cuda_packages` found missing: TensorFlow's own extra (it pins the versions
    it was tested with) for the TensorFlow installed here, or the distributions by name."""
    import importlib.metadata

    try:
        version = importlib.metadata.version("tensorflow")
        extra = f"pip install 'tensorflow[and-cuda]=={version}'"
    except importlib.metadata.PackageNotFoundError:
        extra = "install TensorFlow as tensorflow[and-cuda]"
    names = " ".join(item.split(" ", 1)[0] for item in missing)
    return f"{extra} (or pip install {names})"


# ------------------------------------------------------------------------------------------- decision
def cpu_problem(target: str, features: Iterable[str], host_flags: Iterable[str]) -> str | None:
    """The one-line refusal when this CPU lacks target features, else None."""
    missing = missing_features(features, host_flags)
    if not missing:
        return None
    return (
        f"this CPU cannot run code built for target '{target}': it lacks "
        f"{', '.join(label(f) for f in missing)}. Use an image built for this machine "
        f"(`tfsmith target host`) or for an older target."
    )


def gpu_problem(
    target: str,
    capabilities: Sequence[tuple[int, int]],
    ptx: tuple[int, int] | None,
    gpus: list[tuple[str, tuple[int, int]]] | None,
    require_gpu: bool,
    missing_libraries: Sequence[str] = (),
) -> tuple[str | None, str | None]:
    """(error, warning) for the GPU side of a CUDA target; both None when everything can run.

    Not being able to use a GPU at all is a warning (TensorFlow falls back to the CPU), or the error when
    `require_gpu`; a GPU the build cannot run on is always an error."""
    built = ",".join(f"{major}.{minor}" for major, minor in capabilities)
    if ptx is not None:
        built += f" (+PTX {ptx[0]}.{ptx[1]})"
    message = None
    if missing_libraries:
        message = (
            f"target '{target}' is built for CUDA 12 but TensorFlow's CUDA 12 libraries are missing: "
            f"{', '.join(missing_libraries)}; install them: {cuda_install_hint(missing_libraries)}"
        )
    elif not gpus:
        why = (
            "no NVIDIA GPU is visible (no /dev/nvidia* device)"
            if gpus == []
            else "no NVIDIA driver is visible (NVML and nvidia-smi unavailable)"
        )
        message = (
            f"target '{target}' is built for CUDA capabilities {built} but {why}; "
            "run the container with --gpus all (NVIDIA Container Toolkit)"
        )
    if message is not None:
        if require_gpu:
            return message + ".", None
        opt_in = f"--require-gpu or {ENV['require_gpu']}=1 refuses instead"
        return None, message + f"; TensorFlow will run on the CPU only ({opt_in})."
    unfit = [f"{name} ({cap[0]}.{cap[1]})" for name, cap in gpus if not gpu_can_run(cap, capabilities, ptx)]
    if unfit:
        return (
            f"GPU {', '.join(unfit)} cannot run target '{target}', built for CUDA capabilities {built}; "
            "build an image with this GPU's capability (`tfsmith target ... --cuda-cc auto`).",
            None,
        )
    return None, None


def _split(value: str | None) -> list[str]:
    return [part for part in (value or "").replace(" ", ",").split(",") if part]


USAGE = (
    "usage: tfsmith-guard [--target NAME] [--features F1,F2,...] [--cuda-cc 8.0,9.0] [--ptx 9.0]\n"
    "                     [--require-gpu] [--cpuinfo FILE] [-- CMD ...]\n"
    "Exit 0 (or exec CMD) when this machine can run the target; 3 naming what is missing; 2 on bad usage.\n"
    f"Options default to {ENV['target']}, {ENV['features']}, {ENV['cuda_cc']}, {ENV['ptx']}, "
    f"{ENV['require_gpu']}=1.\n"
)
_VALUE_OPTIONS = {"--target": "target", "--features": "features", "--cuda-cc": "cuda_cc", "--ptx": "ptx", "--cpuinfo": "cpuinfo"}


def parse_args(argv: Sequence[str], env: dict[str, str] | os._Environ[str]) -> tuple[dict[str, str], bool, list[str]]:
    """(options, require_gpu, command). A hand-rolled parser: argparse alone costs ~10 ms at every start."""
    options = {
        "target": env.get(ENV["target"], "this image's target"),
        "features": env.get(ENV["features"], ""),
        "cuda_cc": env.get(ENV["cuda_cc"], ""),
        "ptx": env.get(ENV["ptx"], ""),
        "cpuinfo": "",  # "": this machine (hwcaps on arm64, /proc/cpuinfo elsewhere)
    }
    require_gpu = env.get(ENV["require_gpu"], "") == "1"
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg == "--":
            return options, require_gpu, args
        if arg in ("-h", "--help"):
            raise SystemExit(USAGE)
        if arg == "--require-gpu":
            require_gpu = True
            continue
        name, equals, value = arg.partition("=")
        if name not in _VALUE_OPTIONS:
            raise ValueError(f"unknown option {arg!r}")
        if not equals:
            if not args:
                raise ValueError(f"{name} needs a value")
            value = args.pop(0)
        options[_VALUE_OPTIONS[name]] = value
    return options, require_gpu, []


def main(argv: Sequence[str] | None = None) -> int:
    """Check this machine against the target; exec the command after `--` when it can run."""
    try:
        options, require_gpu, command = parse_args(sys.argv[1:] if argv is None else argv, os.environ)
        capabilities = [parse_capability(cap) for cap in _split(options["cuda_cc"])]
        ptx = parse_capability(options["ptx"]) if options["ptx"] else (max(capabilities) if capabilities else None)
    except ValueError as error:
        sys.stderr.write(f"tfsmith-guard: {error}\n{USAGE}")
        return EXIT_USAGE
    try:
        host_flags = read_cpu_flags(options["cpuinfo"]) if options["cpuinfo"] else host_cpu_flags()
    except OSError as error:
        sys.stderr.write(f"tfsmith-guard: cannot read {options['cpuinfo'] or '/proc/cpuinfo'}: {error.strerror}\n")
        return EXIT_USAGE
    target = options["target"]
    problem = cpu_problem(target, _split(options["features"]), host_flags)
    if problem is None and capabilities:
        problem, warning = gpu_problem(
            target, capabilities, ptx, visible_gpus(), require_gpu, missing_cuda_packages()
        )
        if warning:
            sys.stderr.write(f"tfsmith-guard: warning: {warning}\n")
    if problem is not None:
        sys.stderr.write(f"tfsmith-guard: {problem}\n")
        return EXIT_CANNOT_RUN
    if command:
        try:
            if os.getpid() != 1:
                os.execvp(command[0], command)
            return supervise(command)
        except OSError as error:
            sys.stderr.write(f"tfsmith-guard: cannot run {command[0]}: {error.strerror}\n")
            return 127
    return 0


# Signals a container's init passes on to the command (docker stop sends SIGTERM, a terminal SIGINT).
FORWARDED = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")


def supervise(command: Sequence[str]) -> int:
    """Run `command` as a child, pass signals on, reap orphans, exit as it exited (128+N when killed by N).

    Why not exec it when this is the container's first process (PID 1): the kernel ignores a signal PID 1
    sends itself with the default action, and a program that dies by re-raising its fatal signal (QEMU user
    mode on an emulated segmentation fault: "uncaught target signal 11") then hangs for ever, so the
    container stays up, unhealthy and silent, instead of exiting. As a child it dies, and this says why.
    """
    import signal

    child = os.posix_spawnp(command[0], list(command), os.environ)

    def forward(number: int, _frame: object) -> None:
        try:
            os.kill(child, number)
        except ProcessLookupError:
            pass

    for name in FORWARDED:
        signal.signal(getattr(signal, name), forward)
    while True:
        pid, status = os.waitpid(-1, 0)  # reaps orphans the command leaves too
        if pid == child:
            break
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        if number not in {getattr(signal, name) for name in FORWARDED}:
            sys.stderr.write(f"tfsmith-guard: {command[0]} died of signal {number} ({signal.Signals(number).name})\n")
        return 128 + number
    return os.WEXITSTATUS(status)


if __name__ == "__main__":
    sys.exit(main())
