"""The preflight guard: pure decisions, the single-file/stdlib promise, and its command line."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from builder import guard

CPUINFO = Path(__file__).resolve().parents[1] / "fixtures" / "cpuinfo"
GUARD_FILE = Path(guard.__file__)


def test_guard_imports_only_the_standard_library() -> None:
    tree = ast.parse(GUARD_FILE.read_text())
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "relative import in a file copied alone into images"
            modules.add((node.module or "").split(".")[0])
    assert modules and modules <= set(sys.stdlib_module_names) | {"__future__"}, modules - set(sys.stdlib_module_names)


def test_cpuinfo_spellings_are_folded() -> None:
    flags = guard.read_cpu_flags(str(CPUINFO / "this-vm-amd-epyc-zen3"))
    assert "pni" in flags and "sse3" not in flags
    have = guard.canonical_features(flags)
    assert {"sse3", "abm", "pni"} <= have
    assert guard.missing_features(["sse3", "lzcnt", "avx2", "SSE4.2"], flags) == ()
    assert guard.missing_features(["dotprod", "neon", "sve"], guard.read_cpu_flags(str(CPUINFO / "aws-graviton3-neoverse-v1-sve"))) == ()
    assert guard.missing_features(["sve2", "asimd"], ["asimd", "sve"]) == ("sve2",)


def test_cpu_problem_names_target_and_every_missing_feature() -> None:
    flags = guard.read_cpu_flags(str(CPUINFO / "xeon-spr-guest-amx-hidden"))
    message = guard.cpu_problem("sapphirerapids", ["avx512f", "amx_tile", "amx_int8", "amx_bf16"], flags)
    assert message is not None and "\n" not in message
    assert "'sapphirerapids'" in message and "amx_bf16, amx_int8, amx_tile" in message
    assert "avx512f" not in message
    assert guard.cpu_problem("icelake", ["avx512f", "avx512_vnni"], flags) is None
    assert "asimddp (dotprod)" in (guard.cpu_problem("neoverse_n1", ["asimddp"], ["asimd"]) or "")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("8.0", (8, 0)), ("80", (8, 0)), ("sm_86", (8, 6)), ("compute_90", (9, 0)), ("sm_90a", (9, 0)), ("10.0", (10, 0)), ("sm_120", (12, 0))],
)
def test_parse_capability(text: str, expected: tuple[int, int]) -> None:
    assert guard.parse_capability(text) == expected


@pytest.mark.parametrize("text", ["", "8", "x.y", "sm_"])
def test_parse_capability_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        guard.parse_capability(text)


def test_gpu_can_run_rules() -> None:
    built = [(8, 0), (9, 0)]
    assert guard.gpu_can_run((8, 0), built, (9, 0))
    assert guard.gpu_can_run((8, 6), built, (9, 0))  # same major, newer minor runs sm_80
    assert guard.gpu_can_run((8, 9), built, (9, 0))
    assert guard.gpu_can_run((10, 0), built, (9, 0))  # PTX 9.0 is JIT-compiled on Blackwell
    assert not guard.gpu_can_run((7, 5), built, (9, 0))  # older than every sm and the PTX
    assert not guard.gpu_can_run((10, 0), built, None)  # no PTX, no matching major
    assert not guard.gpu_can_run((8, 6), [(8, 9)], None)


def test_gpu_problem_outcomes() -> None:
    caps, ptx = [(8, 0), (9, 0)], (9, 0)
    assert guard.gpu_problem("t", caps, ptx, [("H100", (9, 0))], False) == (None, None)
    error, warning = guard.gpu_problem("t", caps, ptx, [("A100", (8, 0)), ("T4", (7, 5))], False)
    assert error is not None and "T4 (7.5)" in error and "A100" not in error and warning is None
    error, warning = guard.gpu_problem("t", caps, ptx, [], False)
    assert error is None and warning is not None and "no NVIDIA GPU is visible" in warning and "CPU only" in warning
    error, warning = guard.gpu_problem("t", caps, ptx, None, True)
    assert error is not None and "--gpus all" in error and warning is None


def test_main_exits_zero_silently_when_it_can_run(capsys: pytest.CaptureFixture[str]) -> None:
    code = guard.main(["--target", "x86-64-v3", "--features", "avx,avx2,fma,sse3,abm", "--cpuinfo", str(CPUINFO / "this-vm-amd-epyc-zen3")])
    assert code == 0 and capsys.readouterr().err == ""


def test_main_refuses_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = guard.main(["--target", "haswell", "--features", "avx2,fma,movbe", "--cpuinfo", str(CPUINFO / "old-xeon-e5-2670-sandybridge")])
    err = capsys.readouterr().err
    assert code == guard.EXIT_CANNOT_RUN
    assert err.count("\n") == 1 and "'haswell'" in err and "avx2, fma, movbe" in err


def test_main_reads_environment(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TFSMITH_IMAGE_TARGET", "sapphirerapids")
    monkeypatch.setenv("TFSMITH_IMAGE_FEATURES", "avx512f,amx_tile")
    code = guard.main(["--cpuinfo", str(CPUINFO / "xeon-spr-guest-amx-hidden")])
    assert code == guard.EXIT_CANNOT_RUN and "amx_tile" in capsys.readouterr().err


def test_main_cuda_without_gpu_warns_or_fails(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(guard, "missing_cuda_packages", lambda: [])
    monkeypatch.setattr(guard, "visible_gpus", lambda: None)
    args = ["--target", "x86-64-v3", "--features", "avx2", "--cuda-cc", "8.0,9.0", "--cpuinfo", str(CPUINFO / "this-vm-amd-epyc-zen3")]
    assert guard.main(args) == 0
    assert "warning" in capsys.readouterr().err
    assert guard.main([*args, "--require-gpu"]) == guard.EXIT_CANNOT_RUN
    monkeypatch.setattr(guard, "visible_gpus", lambda: [("Tesla T4", (7, 5))])
    assert guard.main(args) == guard.EXIT_CANNOT_RUN
    assert "Tesla T4 (7.5)" in capsys.readouterr().err


def test_main_usage_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert guard.main(["--cuda-cc", "eight"]) == guard.EXIT_USAGE
    assert guard.main(["--cpuinfo", str(tmp_path / "none")]) == guard.EXIT_USAGE
    assert "cannot read" in capsys.readouterr().err


def test_main_execs_the_command_after_double_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    monkeypatch.setattr(guard.os, "execvp", lambda prog, argv: seen.append(list(argv)))
    code = guard.main(["--features", "sse2", "--cpuinfo", str(CPUINFO / "this-vm-amd-epyc-zen3"), "--", "python3", "-c", "pass"])
    assert code == 0 and seen == [["python3", "-c", "pass"]]


def test_parse_args_forms_and_errors() -> None:
    options, require_gpu, command = guard.parse_args(["--target=zen4", "--features", "avx2", "--require-gpu", "--", "x", "--target"], {})
    assert (options["target"], options["features"], require_gpu, command) == ("zen4", "avx2", True, ["x", "--target"])
    options, require_gpu, command = guard.parse_args([], {"TFSMITH_IMAGE_CUDA_CC": "8.0", "TFSMITH_IMAGE_REQUIRE_GPU": "1"})
    assert (options["cuda_cc"], require_gpu, command) == ("8.0", True, [])
    with pytest.raises(ValueError, match="unknown option"):
        guard.parse_args(["--bogus"], {})
    with pytest.raises(ValueError, match="needs a value"):
        guard.parse_args(["--features"], {})
    with pytest.raises(SystemExit):
        guard.parse_args(["--help"], {})


def test_guard_environment_is_its_own_namespace() -> None:
    """The image's variables never read as tfsmith settings: the old TFSMITH_TARGET is ignored here."""
    assert all(name.startswith("TFSMITH_IMAGE_") for name in guard.ENV.values())
    options, require_gpu, _ = guard.parse_args([], {"TFSMITH_TARGET": "zen4", "TFSMITH_REQUIRE_GPU": "1"})
    assert options["target"] == "this image's target" and require_gpu is False


def test_no_device_node_means_no_gpu_without_loading_nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def nvml_must_not_load() -> None:
        raise AssertionError("NVML loaded although no /dev/nvidia* exists")

    monkeypatch.setattr(guard, "_nvml_capabilities", nvml_must_not_load)
    (tmp_path / "nvidiactl").touch()  # the control node alone (no nvidiaN) is not a GPU
    (tmp_path / "nvidia-uvm").touch()
    assert guard.nvidia_device_nodes(str(tmp_path)) == []
    assert guard.visible_gpus(str(tmp_path)) == []
    (tmp_path / "nvidia0").touch()
    monkeypatch.setattr(guard, "_nvml_capabilities", lambda: [("A100", (8, 0))])
    assert guard.nvidia_device_nodes(str(tmp_path)) == ["nvidia0"]
    assert guard.visible_gpus(str(tmp_path)) == [("A100", (8, 0))]


def test_cuda_image_without_its_cuda_libraries_says_so(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A CUDA image whose TensorFlow lacks the [and-cuda] libraries runs on the CPU: the guard says so
    plainly (even with a GPU attached), and refuses when a GPU is required."""
    monkeypatch.setattr(guard, "visible_gpus", lambda: [("H100", (9, 0))])
    monkeypatch.setattr(guard, "missing_cuda_packages", lambda: ["nvidia-cudnn-cu12"])
    args = ["--target", "x86-64-v3", "--features", "avx2", "--cuda-cc", "8.0,9.0", "--cpuinfo", str(CPUINFO / "this-vm-amd-epyc-zen3")]
    assert guard.main(args) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "warning" in err and "tensorflow[and-cuda]" in err and "CPU only" in err
    monkeypatch.setenv("TFSMITH_IMAGE_REQUIRE_GPU", "1")
    assert guard.main(args) == guard.EXIT_CANNOT_RUN
    assert "nvidia-cudnn-cu12" in capsys.readouterr().err
    monkeypatch.setattr(guard, "missing_cuda_packages", lambda: [])
    assert guard.main(args) == 0 and capsys.readouterr().err == ""


def _dist_info(site: Path, name: str, version: str) -> None:
    """An installed distribution as pip leaves it: `<name>-<version>.dist-info/METADATA`."""
    folder = site / f"{name.replace('-', '_')}-{version}.dist-info"
    folder.mkdir(parents=True)
    (folder / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_missing_cuda_packages_reads_the_python_environment_by_distribution(tmp_path: Path) -> None:
    # A site folder of our own, so the answer does not depend on what this test environment installed.
    site = [str(tmp_path)]
    assert guard.missing_cuda_packages(site) == list(guard.CUDA_DISTRIBUTIONS)
    for name in guard.CUDA_DISTRIBUTIONS:
        _dist_info(tmp_path, name, "12.5.0")
    assert guard.missing_cuda_packages(site) == []


# ------------------------------------------------------------------------------------ arm64 hwcaps
def _auxv(path: Path, entries: dict[int, int]) -> str:
    """An auxiliary vector as /proc/self/auxv holds it: (type, value) pairs, AT_NULL last."""
    import struct

    path.write_bytes(b"".join(struct.pack("=QQ", key, value) for key, value in [*entries.items(), (0, 0)]))
    return str(path)


def test_hwcaps_name_features_as_proc_cpuinfo_does() -> None:
    # What QEMU reports for an emulated Cortex-A53: plain ARMv8.0 with crypto, no dotprod, no SVE.
    assert guard.hwcap_names(0x8FB) == {"fp", "asimd", "aes", "pmull", "sha1", "sha2", "crc32", "cpuid"}
    assert guard.hwcap_names(1 << 22 | 1 << 20, 1 << 1) == {"sve", "asimddp", "sve2"}
    # A real Graviton3 prints exactly hwcap names on its Features line: every one of them is a known bit.
    graviton = guard.read_cpu_flags(str(CPUINFO / "aws-graviton3-neoverse-v1-sve"))
    assert graviton <= set(guard.ARM64_HWCAP) | set(guard.ARM64_HWCAP2)


def test_every_arm64_flag_nfd_labels_is_a_hwcap_the_guard_reads() -> None:
    from builder.deploy import nfd

    assert nfd.ARM64_CPUID <= set(guard.ARM64_HWCAP) | set(guard.ARM64_HWCAP2)


def test_the_auxiliary_vector_is_read_for_hwcaps(tmp_path: Path) -> None:
    path = _auxv(tmp_path / "auxv", {6: 4096, guard.AT_HWCAP: 0x8FB, guard.AT_HWCAP2: 1 << 1})
    assert guard.read_hwcaps(path) == guard.hwcap_names(0x8FB) | {"sve2"}
    assert guard.read_hwcaps(_auxv(tmp_path / "x86", {6: 4096})) is None  # no AT_HWCAP entry
    assert guard.read_hwcaps(str(tmp_path / "missing")) is None


def test_arm64_reads_hwcaps_not_the_emulating_hosts_cpuinfo(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Under QEMU user mode /proc/cpuinfo is the x86 host's; the auxiliary vector is the emulated CPU's."""
    path = _auxv(tmp_path / "auxv", {guard.AT_HWCAP: 0x8FB})
    reader = guard.read_hwcaps
    monkeypatch.setattr(guard, "read_hwcaps", lambda: reader(path))
    x86 = str(CPUINFO / "this-vm-amd-epyc-zen3")
    assert guard.host_cpu_flags(x86, machine="aarch64") == guard.hwcap_names(0x8FB)
    assert "avx2" in guard.host_cpu_flags(x86, machine="x86_64")
    monkeypatch.setattr(guard, "read_hwcaps", lambda: None)  # no auxv: fall back to /proc/cpuinfo
    assert "avx2" in guard.host_cpu_flags(x86, machine="aarch64")


def test_the_guards_exit_codes_are_the_ones_errors_lists() -> None:
    """The guard runs alone in images (stdlib only), so it repeats two codes; they must not drift apart."""
    from builder import errors, guard

    assert (guard.EXIT_USAGE, guard.EXIT_CANNOT_RUN) == (errors.EXIT_USAGE, errors.EXIT_CANNOT_RUN)
