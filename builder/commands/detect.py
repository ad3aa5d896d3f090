"""`tfsmith detect`, `target` and `check`: what this machine is, what a target resolves to, can it run here.

Thin: parse flags, call builder.hardware / builder.build (settings -> target) / builder.guard, print a rich
table or stable JSON. archspec, pynvml and rich are imported inside the command bodies so `tfsmith --help` and
the other commands never pay for them (`tfsmith detect` does not even import typer: see builder/cli.py).

`tfsmith detect --json` prints `HostFacts.to_dict()` (schema "tfsmith.host-facts/1", documented in
builder/hardware/facts.py); save it and feed it back with `--facts FILE` (detect, target) or
`--against FILE` (target: can an image for this target run on that machine?).
"""

# No `from __future__ import annotations`: `register` imports the shared options (builder/commands/options.py,
# which imports typer) locally, and Typer resolves string annotations against module globals only, so the
# command signatures must be evaluated where they are defined.
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import typer

# `tfsmith detect`'s options: flag -> (parameter of run_detect, is it a switch). The start-up fast path
# (builder/cli.py) parses with this list; a test holds it equal to the Typer command's options.
DETECT_OPTIONS: dict[str, tuple[str, bool]] = {
    "--json": ("as_json", True),
    "--cpuinfo": ("cpuinfo", False),
    "--gpu-facts": ("gpu_facts", False),
    "--facts": ("facts", False),
}


def _gib(value: int | None) -> str:
    return "unknown" if value is None else f"{value / 2**30:.1f} GiB"


def _facts(cpuinfo: Path | None, gpu_facts: Path | None, facts: Path | None) -> Any:
    from builder.errors import InputError
    from builder.hardware import detect_host, load_facts

    if facts is not None:
        if cpuinfo is not None or gpu_facts is not None:
            raise InputError("--facts replaces --cpuinfo/--gpu-facts; pass one or the other")
        return load_facts(facts)
    return detect_host(cpuinfo=cpuinfo, gpu_csv=gpu_facts)


def detect_fast_args(args: Sequence[str], options: dict[str, tuple[str, bool]]) -> dict[str, Any] | None:
    """run_detect's arguments when `args` are plain uses of detect's options, else None (Typer then
    parses them, so `--help`, typos and missing values get its usual messages)."""
    parsed: dict[str, Any] = {"as_json": False, "cpuinfo": None, "gpu_facts": None, "facts": None}
    rest = list(args)
    while rest:
        flag, equals, value = rest.pop(0).partition("=")
        if flag not in options:
            return None
        name, is_switch = options[flag]
        if is_switch:
            if equals:
                return None
            parsed[name] = True
            continue
        if not equals:
            if not rest or rest[0].startswith("-"):
                return None
            value = rest.pop(0)
        if not value:
            return None
        parsed[name] = Path(value)
    return parsed


def run_detect(as_json: bool, cpuinfo: Path | None, gpu_facts: Path | None, facts: Path | None) -> None:
    """`tfsmith detect`: this machine's (or recorded) facts as a table, or as JSON."""
    host = _facts(cpuinfo, gpu_facts, facts)
    if as_json:
        sys.stdout.write(json.dumps(host.to_dict(), indent=2, sort_keys=True) + "\n")
    else:
        _print_facts(host)


def _print_facts(host: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    from builder.guard import label
    from builder.hardware.cpu import tf_features

    cpu = host.cpu
    console = Console()
    table = Table(title="CPU", show_header=False, title_justify="left", box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("model", f"{cpu.model_name or '?'} ({cpu.vendor or '?'})")
    table.add_row("architecture", cpu.arch)
    table.add_row("microarchitecture", f"{cpu.microarchitecture} (archspec, by the features compilers emit)")
    table.add_row("level", cpu.level or "-")
    if cpu.total_memory_bytes is None:  # a recorded dump: counts and memory were not recorded
        table.add_row("CPUs", f"{cpu.logical_cpus} processor(s) in the dump; limits and memory not recorded")
    else:
        table.add_row("CPUs", f"{cpu.usable_cpus} usable of {cpu.logical_cpus} (affinity, cgroup quota)")
        table.add_row("memory", f"{_gib(cpu.usable_memory_bytes)} usable of {_gib(cpu.total_memory_bytes)}")
    marks = tf_features(cpu.arch, cpu.features)
    table.add_row("TF features", " ".join(label(f) for f, present in marks if present) or "-")
    table.add_row("absent", " ".join(label(f) for f, present in marks if not present) or "-")
    console.print(table)

    gpu = host.gpu
    if gpu.devices:
        gpus = Table(title=f"GPU ({gpu.source})", title_justify="left")
        for column in ("#", "name", "capability", "memory", "MIG", "UUID"):
            gpus.add_column(column)
        for device in gpu.devices:
            gpus.add_row(
                str(device.index),
                device.name,
                device.compute_capability or "?",
                f"{device.memory_total_mib} MiB" if device.memory_total_mib else "?",
                device.mig_mode or "-",
                device.uuid,
            )
        console.print(gpus)
        console.print(f"driver {gpu.driver_version or '?'}, supports CUDA up to {gpu.cuda_driver_version or '?'}")
    status = "ok" if gpu.status == "ok" else f"{gpu.status}: {gpu.detail}"
    console.print(f"[bold]GPU status[/bold] {status}", highlight=False)


def _target_dict(target: Any, cuda_choice: Any = None) -> dict[str, Any]:
    result = {
        "name": target.name,
        "arch": target.arch,
        "features": sorted(target.features),
        "hints": sorted(target.hints),
        "extras": list(target.extras),
        "copts": list(target.copts),
        "host_copts": list(target.host_copts),
        "cuda": None
        if target.cuda is None
        else {
            "version": target.cuda.version,
            "cudnn": target.cuda.cudnn,
            "capabilities": list(target.cuda.capabilities),
            "ptx": target.cuda.ptx,
            "hermetic_capabilities": target.cuda.hermetic_list,
        },
        "tf_version": target.tf_version,
        "python": target.python,
        "compiler": f"{target.compiler} {target.compiler_version}",
        "tag": target.tag_token,
    }
    if cuda_choice is not None:  # which GPUs it is built for and why (builder.targets.choose_cuda)
        result["cuda_choice"] = {"rule": cuda_choice.rule, "why": cuda_choice.why, "gpus": list(cuda_choice.gpus)}
    return result


def register(app: "typer.Typer") -> None:
    """Add `detect`, `target` and `check` to the tfsmith app."""
    import typer

    from builder.commands.options import CudaCcOption, TfVersionOption

    @app.command("detect")
    def detect(
        as_json: bool = typer.Option(False, "--json", help="Print stable JSON (schema tfsmith.host-facts/1)."),
        cpuinfo: Path = typer.Option(None, "--cpuinfo", help="A recorded /proc/cpuinfo instead of this machine's."),
        gpu_facts: Path = typer.Option(
            None, "--gpu-facts", help="A recorded `nvidia-smi --query-gpu=... --format=csv,noheader` output."
        ),
        facts: Path = typer.Option(None, "--facts", help="A saved `tfsmith detect --json` file."),
    ) -> None:
        """Show this machine's CPU (flags, archspec name, psABI level, usable CPUs/memory) and NVIDIA GPUs."""
        run_detect(as_json, cpuinfo, gpu_facts, facts)

    @app.command("target")
    def target(
        name: str = typer.Argument(
            None, help="host (default), x86-64-v2|v3|v4, or an archspec name (icelake, zen4, ...).", show_default=False
        ),
        cuda_cc: CudaCcOption = None,
        tf_version: TfVersionOption = None,
        python: str = typer.Option(None, "--python", help="Python minor version of the wheel (default 3.12)."),
        against: Path = typer.Option(None, "--against", help="Facts JSON of a machine: can the image run there?"),
        facts: str = typer.Option(None, "--facts", help="Facts JSON to resolve `host`/`auto` from (default: live)."),
        config: Path = typer.Option(None, "--config", help="Config file (default ./tfsmith.toml or pyproject)."),
        as_json: bool = typer.Option(False, "--json", help="Print the resolved target as JSON."),
        list_names: bool = typer.Option(False, "--list", help="List every accepted target name."),
    ) -> None:
        """Resolve a build target: compiler flags, host-tool flags, CUDA capabilities and the image tag."""
        from builder.build.from_settings import resolve_settings
        from builder.build.settings import load_config
        from builder.hardware import load_facts
        from builder.targets import can_run, target_names

        if list_names:
            sys.stdout.write("\n".join(target_names()) + "\n")
            return
        flags = {"target": name, "cuda_cc": cuda_cc, "tf_version": tf_version, "python": python, "facts": facts}
        resolved, cuda_choice = resolve_settings(load_config(flags, config_file=config))
        result = _target_dict(resolved, cuda_choice)
        missing: tuple[str, ...] | None = None
        if against is not None:
            other = load_facts(against)
            missing = can_run(resolved, other)
            result["against"] = {
                "machine": f"{other.cpu.model_name or other.cpu.microarchitecture}".strip(),
                "runs": not missing,
                "missing": list(missing),
            }
        if as_json:
            sys.stdout.write(json.dumps(result, indent=2, sort_keys=True) + "\n")
        else:
            _print_target(result)
        if missing:
            from builder.errors import EXIT_CANNOT_RUN

            raise typer.Exit(EXIT_CANNOT_RUN)

    @app.command("check")
    def check(
        # Not the shared TargetOption/CudaCcOption: these describe an image already built (required, no
        # `host` default; `auto` would mean this host's GPUs, which say nothing about the image).
        target: str = typer.Option(..., "--target", help="The target an image was built for."),
        cuda_cc: str = typer.Option(None, "--cuda-cc", help="CUDA capabilities the image was built for."),
        cpuinfo: Path = typer.Option(None, "--cpuinfo", help="Check a recorded /proc/cpuinfo instead."),
        require_gpu: bool = typer.Option(False, "--require-gpu", help="A CUDA target without a visible GPU fails."),
    ) -> None:
        """Preflight: exit 0 silently if this machine can run TARGET, else exit 3 naming what is missing."""
        from builder import guard
        from builder.errors import InputError
        from builder.targets import resolve_target

        resolved = resolve_target(target, cuda_cc=cuda_cc)  # a named target: pure, this host is read below
        path = str(cpuinfo) if cpuinfo is not None else "/proc/cpuinfo"
        try:
            flags = guard.read_cpu_flags(path)
        except OSError as error:
            raise InputError(f"cannot read {path}: {error.strerror}") from None
        problem = guard.cpu_problem(resolved.name, resolved.features, flags)
        if problem is None and resolved.cuda is not None:
            caps = [guard.parse_capability(cc) for cc in resolved.cuda.capabilities]
            problem, warning = guard.gpu_problem(
                resolved.name, caps, guard.parse_capability(resolved.cuda.ptx), guard.visible_gpus(), require_gpu
            )
            if warning:
                sys.stderr.write(f"tfsmith: warning: {warning}\n")
        if problem is not None:
            sys.stderr.write(f"tfsmith: {problem}\n")
            raise typer.Exit(guard.EXIT_CANNOT_RUN)


def _print_target(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"target {result['name']}", show_header=False, title_justify="left", box=None)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    table.add_row("architecture", result["arch"])
    table.add_row("TensorFlow", f"{result['tf_version']} (Python {result['python']}, {result['compiler']})")
    table.add_row("copts", " ".join(result["copts"]))
    table.add_row("host_copts", " ".join(result["host_copts"]) + "  (reference build machine; a build plans its own)")
    table.add_row("features", " ".join(result["features"]) + "  (what the compiler may emit: required)")
    if result["hints"]:
        table.add_row("not required", " ".join(result["hints"]) + "  (hints and intrinsic-only: never emitted)")
    if result["cuda"]:
        cuda = result["cuda"]
        table.add_row("CUDA", f"{cuda['version']} (cuDNN {cuda['cudnn']})")
        table.add_row("capabilities", cuda["hermetic_capabilities"])
    if "cuda_choice" in result:
        table.add_row("GPU choice", result["cuda_choice"]["why"])
    table.add_row("tag", result["tag"])
    if "against" in result:
        against = result["against"]
        verdict = "runs" if against["runs"] else "CANNOT run: lacks " + ", ".join(against["missing"])
        table.add_row("against", f"{against['machine']}: {verdict}")
    Console(highlight=False).print(table)
