"""`tfsmith detect | target | check` and the standalone guard, run as a user runs them (subprocesses)."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
TFSMITH = Path(sys.executable).parent / "tfsmith"
SPR_GUEST = FIXTURES / "cpuinfo" / "xeon-spr-guest-amx-hidden"
OLD = FIXTURES / "cpuinfo" / "old-xeon-e5-2670-sandybridge"


def tfsmith(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(TFSMITH), *args], capture_output=True, text=True, timeout=60, cwd=REPO)


def test_detect_live_json_matches_proc_cpuinfo(tmp_path: Path) -> None:
    result = tfsmith("detect", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["schema"] == "tfsmith.host-facts/1"
    assert data["cpu"]["arch"] == platform.machine()
    cpuinfo = Path("/proc/cpuinfo").read_text()
    line = next(ln for ln in cpuinfo.splitlines() if ln.startswith(("flags", "Features")))
    assert set(data["cpu"]["features"]) == set(line.split(":", 1)[1].split())
    assert 1 <= data["cpu"]["usable_cpus"] <= data["cpu"]["logical_cpus"]
    assert data["gpu"]["status"] in ("ok", "no-driver", "no-gpu", "driver-mismatch", "old-driver", "no-nvidia-smi", "error")
    # fed back, the same facts come out
    saved = tmp_path / "host.json"
    saved.write_text(result.stdout)
    again = tfsmith("detect", "--json", "--facts", str(saved))
    assert again.returncode == 0 and json.loads(again.stdout) == data


def test_detect_table_live() -> None:
    result = tfsmith("detect")
    assert result.returncode == 0, result.stderr
    assert "microarchitecture" in result.stdout and "GPU status" in result.stdout


def test_detect_recorded_avx512_guest_shows_avx512_not_amx() -> None:
    result = tfsmith("detect", "--cpuinfo", str(SPR_GUEST), "--gpu-facts", str(FIXTURES / "gpu" / "mixed-a100-h100.csv"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    present = next(i for i, ln in enumerate(lines) if ln.startswith("TF features"))
    absent = next(i for i, ln in enumerate(lines) if ln.startswith("absent"))
    present_text = " ".join(lines[present:absent])
    assert "avx512f" in present_text and "avx512_fp16" in present_text and "amx" not in present_text
    assert "amx_tile" in " ".join(lines[absent : absent + 3])
    assert "sapphirerapids" in result.stdout and "x86-64-v4" in result.stdout  # AMX is intrinsic-only
    assert "H100" in result.stdout and "9.0" in result.stdout


def test_target_prints_flags_capabilities_and_tag() -> None:
    result = tfsmith("target", "x86-64-v3", "--cuda-cc", "8.0,9.0")
    assert result.returncode == 0, result.stderr
    assert "-march=x86-64-v3" in result.stdout
    assert "sm_80,sm_90,compute_90" in result.stdout
    assert "x86-64-v3-cu12.5-cc80-cc90-ptx90" in result.stdout
    as_json = json.loads(tfsmith("target", "x86-64-v3", "--cuda-cc", "8.0,9.0", "--json").stdout)
    assert as_json["cuda"]["hermetic_capabilities"] == "sm_80,sm_90,compute_90"
    assert as_json["copts"] == ["-march=x86-64-v3", "-mtune=generic"]
    assert as_json["tag"] == "x86-64-v3-cu12.5-cc80-cc90-ptx90"


def test_target_auto_from_recorded_gpus(tmp_path: Path) -> None:
    facts = tfsmith("detect", "--json", "--cpuinfo", str(SPR_GUEST), "--gpu-facts", str(FIXTURES / "gpu" / "mixed-a100-h100.csv"))
    path = tmp_path / "gpu-host.json"
    path.write_text(facts.stdout)
    result = tfsmith("target", "host", "--cuda-cc", "auto", "--facts", str(path), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["tag"] == "sapphirerapids-cu12.5-cc80-cc90-ptx90"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("target", "skylake_avx"), "did you mean skylake_avx512"),
        (("target", "x86-64-v3", "--cuda-cc", "10.0"), "Blackwell"),
        (("target", "x86-64-v3", "--python", "3.9"), "3.10-3.13"),
        (("detect", "--facts", "/nonexistent.json"), "cannot read"),
    ],
)
def test_user_errors_are_one_line(args: tuple[str, ...], needle: str) -> None:
    result = tfsmith(*args)
    assert result.returncode == 2
    assert result.stderr.startswith("tfsmith: error: ") and result.stderr.count("\n") == 1
    assert needle in result.stderr and "Traceback" not in result.stderr


def test_target_against_another_machine(tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    path.write_text(tfsmith("detect", "--json", "--cpuinfo", str(OLD)).stdout)
    result = tfsmith("target", "haswell", "--against", str(path), "--json")
    assert result.returncode == 3
    against = json.loads(result.stdout)["against"]
    assert against["runs"] is False and {"avx2", "fma"} <= set(against["missing"])
    assert tfsmith("target", "sandybridge", "--against", str(path)).returncode == 0


@pytest.mark.parametrize(
    "dump", ["xeon-spr-guest-amx-hidden", "xeon-spr-vm-amx-hints-hidden", "gcp-c3-xeon-spr-no-vpmu-pdcm-hidden"]
)
def test_check_accepts_a_sapphire_rapids_guest_hiding_hints(dump: str) -> None:
    result = tfsmith("check", "--target", "sapphirerapids", "--cpuinfo", str(FIXTURES / "cpuinfo" / dump))
    assert result.returncode == 0 and result.stdout == "" and result.stderr == ""


def test_check_refuses_a_machine_lacking_what_the_code_needs_and_names_it(tmp_path: Path) -> None:
    text = (FIXTURES / "cpuinfo" / "xeon-spr-vm-amx-hints-hidden").read_text()
    no_fp16 = tmp_path / "cpuinfo"
    no_fp16.write_text(text.replace(" avx512_fp16", ""))
    assert "avx512_fp16" in text and "avx512_fp16" not in no_fp16.read_text()
    result = tfsmith("check", "--target", "sapphirerapids", "--cpuinfo", str(no_fp16))
    assert result.returncode == 3
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "lacks avx512_fp16." in result.stderr and "'sapphirerapids'" in result.stderr


def test_check_neoverse_v1_does_not_ask_for_dgh() -> None:
    result = tfsmith("check", "--target", "neoverse_v1", "--cpuinfo", str(FIXTURES / "cpuinfo" / "neoverse-v1-vm-dgh-hidden"))
    assert result.returncode == 0 and result.stderr == ""


@pytest.mark.skipif(platform.machine() != "x86_64", reason="baseline x86-64 check only means something on x86")
def test_check_live_baseline_passes() -> None:
    result = tfsmith("check", "--target", "x86-64")
    assert result.returncode == 0 and result.stderr == ""


def test_guard_runs_alone_without_site_packages(tmp_path: Path) -> None:
    """Copied alone and run with -S -I (no site-packages, no tfsmith, no archspec), as in a slim image."""
    lone = tmp_path / "tfsmith-guard"
    lone.write_text((REPO / "builder" / "guard.py").read_text())
    base = [sys.executable, "-S", "-I", str(lone), "--target", "haswell", "--features", "avx2,fma,lzcnt"]
    refused = subprocess.run([*base, "--cpuinfo", str(OLD)], capture_output=True, text=True, timeout=30)
    assert refused.returncode == 3 and "avx2" in refused.stderr and "abm (lzcnt)" in refused.stderr
    ran = subprocess.run(
        [*base, "--cpuinfo", str(FIXTURES / "cpuinfo" / "this-vm-amd-epyc-zen3"), "--", sys.executable, "-c", "print('ran')"],
        capture_output=True, text=True, timeout=30,
    )
    assert ran.returncode == 0 and ran.stdout == "ran\n" and ran.stderr == ""


def test_detect_starts_without_the_cli_stack() -> None:
    """`tfsmith detect` runs without importing Typer/Click (about half of its start-up time)."""
    code = (
        "import sys; sys.argv = ['tfsmith', 'detect', '--json']; from builder.cli import main; main(); "
        "heavy = sorted(m for m in ('typer', 'click', 'jinja2', 'docker', 'yaml') if m in sys.modules); "
        "sys.stderr.write(f'loaded={heavy}')"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["schema"] == "tfsmith.host-facts/1"
    assert result.stderr.endswith("loaded=[]"), result.stderr


def test_detect_fast_path_and_typer_agree(tmp_path: Path) -> None:
    """The fast path knows exactly detect's options, and prints what the Typer command prints."""
    from typer.testing import CliRunner

    from builder.cli import app
    from builder.commands.detect import DETECT_OPTIONS, detect_fast_args

    command = next(c for c in app.registered_commands if c.name == "detect")
    import typer.main

    params = typer.main.get_command_from_info(command, pretty_exceptions_short=True, rich_markup_mode=None).params
    assert {opt for p in params for opt in p.opts} == set(DETECT_OPTIONS)
    args = ["--json", "--cpuinfo", str(SPR_GUEST)]
    assert detect_fast_args(args, DETECT_OPTIONS) == {"as_json": True, "cpuinfo": SPR_GUEST, "gpu_facts": None, "facts": None}
    assert detect_fast_args(["--help"], DETECT_OPTIONS) is None and detect_fast_args(["--cpuinfo"], DETECT_OPTIONS) is None
    fast = tfsmith("detect", *args)
    slow = CliRunner().invoke(app, ["detect", *args])
    assert fast.returncode == 0 and slow.exit_code == 0 and fast.stdout == slow.stdout


def test_named_targets_never_ask_this_hosts_gpus(tmp_path: Path) -> None:
    """`target NAME` and `check --target NAME` (CPU) read no GPU: an nvidia-smi on PATH that leaves a mark when
    run is never run, and NVML is not loaded (its library path points at nothing)."""
    import os

    mark = tmp_path / "nvidia-smi-ran"
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(f"#!/bin/sh\ntouch {mark}\nexit 9\n")
    smi.chmod(0o755)
    env = {**os.environ, "PATH": f"{smi.parent}:{os.environ['PATH']}", "LD_LIBRARY_PATH": str(tmp_path)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(TFSMITH), *args], capture_output=True, text=True, timeout=60, cwd=REPO, env=env)

    named = run("target", "neoverse_v1", "--cuda-cc", "8.0", "--json")
    assert named.returncode == 0, named.stderr
    assert json.loads(named.stdout)["host_copts"] == ["-march=armv8-a", "-mtune=generic"]  # not this x86 host's
    assert run("check", "--target", "x86-64", "--cpuinfo", str(SPR_GUEST)).returncode == 0
    assert not mark.exists()
    live = run("detect", "--json")  # the same fake is found when the host is asked for: the test can fail
    assert live.returncode == 0, live.stderr
    if json.loads(live.stdout)["gpu"]["source"] != "nvml":
        assert mark.exists()


@pytest.mark.parametrize(
    ("code", "status", "says"),
    [("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", 139, "died of signal 11 (SIGSEGV)"),
     ("raise SystemExit(7)", 7, "")],
)
def test_the_guard_as_a_containers_first_process_exits_as_its_command_did(code: str, status: int, says: str) -> None:
    """As PID 1 the guard runs the server as a child (a PID 1 that re-raises its fatal signal would hang):
    its exit status is the child's, and a death by signal is named."""
    script = f"import sys; from builder import guard; sys.exit(guard.supervise([sys.executable, '-c', {code!r}]))"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.returncode == status
    assert (says in result.stderr) if says else result.stderr == ""
