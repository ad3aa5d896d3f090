"""Models the size users ship through `tfsmith optimize`: its wall time, its peak memory and the memory it was
given, what it chose, how fast and how small. Measured, never asserted in a test:

    python -m tests.benchmarks.real_size [--models bert_base,resnet50] [--out build/bench/real_size]
                                         [--memory 8G] [--cgroup-limit 9G]

Each model of `real_size_models.ZOO` (BERT-base and BERT-large sized encoders, a ViT-B/16, EfficientNet-B0,
ResNet50, wide-and-deep recommenders with 1M and 10M-row embedding tables, the latter above 2 GB; random
weights, heads fitted to prototype inputs so the gate can judge lossy files) is built once, in a process of its
own, and kept under --out. Then `tfsmith optimize MODEL --data DATA` runs under GNU `/usr/bin/time -v`, which
gives its wall time and peak resident set (the kernel's high-water mark of the process, its children included).

--memory passes optimize the memory it may use (its `--memory`); --cgroup-limit runs each build and each
optimize inside a memory cgroup of that size (cgroup v2 `memory.max` or v1 `memory.limit_in_bytes`; needs
write access to /sys/fs/cgroup), so a model too big for the host ends in the kernel's OOM killer, reported as
such, rather than in the host's swap. The budget column is what optimize could use: --memory, else the
cgroup's limit, else the machine's memory.

Per model the table gives: parameters and float32 weights, optimize's wall time, peak RSS (and its multiple of
the weights), the budget, the choice (artifact on runtime), its batch-1 p50 against the SavedModel on
TensorFlow and against the fastest candidate optimize timed, the chosen runtime against the fastest runtime
`tfsmith bench` finds when it times the optimized folder in rounds of its own (every file on every runtime it
can run, at batch 1, in the same cgroup), its rows/s at optimize's batch against the SavedModel's, and its size
against the SavedModel's. Writes real_size.json and real_size.md under --out; exit
status 1 when an optimize failed (its tail is in the table's note).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from tests.benchmarks.real_size_models import SPECS, ZOO

REPO = Path(__file__).resolve().parents[2]
GNU_TIME = Path("/usr/bin/time")
#: A model's optimize is stopped after this long (BERT-large on 2 cores takes most of it).
OPTIMIZE_TIMEOUT_S = 3 * 3600


def _tfsmith() -> list[str]:
    script = REPO / ".venv" / "bin" / "tfsmith"
    return [str(script)] if script.exists() else [sys.executable, "-m", "builder"]


# ------------------------------------------------------------------------------------------- limits
def limited(command: list[str], limit: str | None) -> list[str]:
    """`command` run in a fresh memory cgroup of `limit` bytes ("9G"), made by a shell that moves itself into
    it and then execs the command; unchanged without a limit."""
    if limit is None:
        return command
    script = (
        'set -e; limit=$1; shift; '
        'if [ -f /sys/fs/cgroup/cgroup.controllers ]; then g=/sys/fs/cgroup/tfsmith-bench-$$; '
        '  mkdir -p $g; echo $limit > $g/memory.max; '
        'else g=/sys/fs/cgroup/memory/tfsmith-bench-$$; mkdir -p $g; echo $limit > $g/memory.limit_in_bytes; fi; '
        'echo $$ > $g/cgroup.procs; exec "$@"')
    return ["bash", "-c", script, "limited", _bytes(limit), *command]


def run_limited(command: list[str], limit: str | None, timeout_s: float | None = None, **popen: object) -> int:
    """Run `limited(command, limit)` to its end (killed after `timeout_s`: -9) and remove its cgroup."""
    process = subprocess.Popen(limited(command, limit), cwd=REPO, **popen)  # type: ignore[call-overload]
    try:
        returncode = process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        returncode = -9
    for group in (Path(f"/sys/fs/cgroup/tfsmith-bench-{process.pid}"),
                  Path(f"/sys/fs/cgroup/memory/tfsmith-bench-{process.pid}")):
        if group.is_dir():
            try:
                group.rmdir()
            except OSError:
                pass
    return returncode


def _bytes(text: str) -> str:
    found = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)i?B?", text.strip(), re.IGNORECASE)
    if not found:
        raise SystemExit(f"--cgroup-limit {text!r}: give bytes or a size such as 9G")
    scale = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}[found.group(2).upper()]
    return str(int(float(found.group(1)) * scale))


def machine_memory() -> int | None:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return None


def budget_bytes(memory: str | None, cgroup_limit: str | None) -> tuple[int | None, str]:
    """What optimize could use, and whose figure it is."""
    if memory is not None:
        return int(_bytes(memory)), "--memory"
    if cgroup_limit is not None:
        return int(_bytes(cgroup_limit)), "cgroup limit"
    from builder.hardware.cpu import cgroup_memory_limit, mem_total, usable_memory

    usable, limit = usable_memory(mem_total(), cgroup_memory_limit()), cgroup_memory_limit()
    return usable, "cgroup limit" if limit is not None and usable == limit else "machine"


# ------------------------------------------------------------------------------------------- GNU time
@dataclass(frozen=True)
class Timed:
    wall_s: float
    peak_rss_bytes: int
    exit_status: int
    killed: str  # "" or what ended it ("signal 9: the OOM killer, or the timeout")


def parse_time_v(text: str, returncode: int) -> Timed:
    """GNU `time -v`'s report: elapsed wall clock, maximum resident set size, exit status or signal."""
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", text)
    seconds = 0.0
    if wall:
        for part in wall.group(1).split(":"):
            seconds = seconds * 60 + float(part)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    signal = re.search(r"Command terminated by signal (\d+)", text)
    status = re.search(r"Exit status: (\d+)", text)
    killed = ""
    if signal:
        killed = f"signal {signal.group(1)}" + (": the kernel's OOM killer (or the timeout)" if signal.group(1) == "9"
                                                 else "")
    return Timed(seconds, int(rss.group(1)) * 1024 if rss else 0,
                 int(status.group(1)) if status else returncode, killed)


# ------------------------------------------------------------------------------------------- one model
@dataclass(frozen=True)
class Row:
    model: str
    parameters: int
    weight_bytes: int
    budget_bytes: int | None
    budget_source: str
    wall_s: float
    peak_rss_bytes: int
    ok: bool
    note: str  # why it failed, or ""
    chosen: str = ""
    chosen_runtime: str = ""
    chosen_p50_us: float | None = None
    saved_model_p50_us: float | None = None
    fastest: str = ""  # the fastest candidate optimize timed (artifact on runtime)
    fastest_p50_us: float | None = None
    chosen_rows_per_s: float | None = None
    saved_model_rows_per_s: float | None = None
    chosen_bytes: int | None = None
    saved_model_bytes: int | None = None
    saved_model_variables_bytes: int | None = None
    #: `tfsmith bench` of the optimize folder (every file on every runtime it can run, in its own interleaved
    #: rounds): its fastest runtime that kept the original's quality, and the p50 it gave the chosen runtime
    bench_fastest: str = ""
    bench_fastest_p50_us: float | None = None
    bench_chosen_p50_us: float | None = None
    bench_note: str = ""

    def ratio(self, a: float | None, b: float | None) -> float | None:
        return round(a / b, 2) if a and b else None


def read_report(out: Path) -> dict[str, object]:
    """The figures of the table from optimize's report (the one typed report)."""
    from builder.report import Report

    report = Report.from_dict(json.loads((out / "report.json").read_text()))
    timed = [c for c in report.selection.candidates if c.p50_us is not None and not c.error]
    chosen = next((c for c in timed if c.artifact == report.chosen and c.runtime == report.chosen_runtime), None)
    saved = next((c for c in timed if c.artifact == "saved_model" and c.runtime == "tensorflow"), None)
    fastest = min(timed, key=lambda c: c.p50_us or float("inf"), default=None)
    by_path = {a.path: a for a in report.artifacts}
    saved_row = by_path.get("saved_model")
    chosen_row = by_path.get(report.chosen)
    return {
        "chosen": report.chosen, "chosen_runtime": report.chosen_runtime,
        "chosen_p50_us": chosen.p50_us if chosen else (chosen_row.latency_us.p50 if chosen_row else None),
        "saved_model_p50_us": saved.p50_us if saved else (report.baseline.latency_us.p50 if report.baseline else None),
        "fastest": f"{fastest.artifact} on {fastest.runtime}" if fastest else "",
        "fastest_p50_us": fastest.p50_us if fastest else None,
        "chosen_rows_per_s": (chosen_row.throughput or {}).get("samples_per_s") if chosen_row else None,
        "saved_model_rows_per_s": (saved_row.throughput or {}).get("samples_per_s") if saved_row else None,
        "chosen_bytes": (chosen_row.size_bytes + chosen_row.variables_bytes) if chosen_row else None,
        "saved_model_bytes": saved_row.size_bytes if saved_row else None,
        "saved_model_variables_bytes": saved_row.variables_bytes if saved_row else None,
    }


def read_bench(bench_json: Path) -> dict[str, object]:
    """From `tfsmith bench`'s bench.json: the fastest runtime at batch 1 among those that ran and kept the
    original's quality (agreement or relative error as the bench judged it: its `reason` is empty), and the p50
    of the runtime serving what optimize chose (`shipped`)."""
    from builder.bench.results import BenchRun

    run = BenchRun.from_dict(json.loads(bench_json.read_text()))
    ran = [r for r in run.results if r.ok and r.p50 is not None]
    fastest = min(ran, key=lambda r: r.p50 or float("inf"), default=None)
    shipped = next((r for r in ran if run.shipped and r.name == run.shipped), None)
    return {"bench_fastest": f"{Path(fastest.artifact).name} on {fastest.name}" if fastest else "",
            "bench_fastest_p50_us": fastest.p50 * 1e6 if fastest and fastest.p50 else None,
            "bench_chosen_p50_us": shipped.p50 * 1e6 if shipped and shipped.p50 else None,
            "bench_note": "" if shipped else f"bench did not time the chosen runtime ({run.shipped or 'none named'})"}


def run_bench(optimized: Path, data: str, folder: Path, cgroup_limit: str | None) -> dict[str, object]:
    """`tfsmith bench` of optimize's folder at batch 1, in the same memory cgroup; its figures, or a note."""
    out, log = folder / "bench", folder / "bench.log"
    with log.open("w") as sink:
        returncode = run_limited([*_tfsmith(), "bench", str(optimized), "--data", data, "--batch", "1", "--out",
                                  str(out)], cgroup_limit, OPTIMIZE_TIMEOUT_S, stdout=sink, stderr=subprocess.STDOUT,
                                 env={**os.environ, "COLUMNS": "200"})
    if returncode != 0 or not (out / "bench.json").is_file():
        tail = [line for line in log.read_text(errors="replace").splitlines() if line.strip()][-1:]
        return {"bench_note": f"tfsmith bench exit {returncode}: {tail[0][:160] if tail else 'no output'}"}
    return read_bench(out / "bench.json")


def build_model(name: str, folder: Path, cgroup_limit: str | None) -> dict[str, object]:
    """The model and its DATA, built in a process of its own (its memory returned when it exits)."""
    code = ("import json, sys; from pathlib import Path; from dataclasses import asdict; "
            "from tests.benchmarks.real_size_models import build; "
            "b = build(sys.argv[1], Path(sys.argv[2])); "
            "print(json.dumps({k: str(v) if isinstance(v, Path) else v for k, v in asdict(b).items()}))")
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "build.log"
    with log.open("w") as sink:
        returncode = run_limited([sys.executable, "-c", code, name, str(folder)], cgroup_limit, stdout=sink,
                                 stderr=subprocess.STDOUT)
    lines = log.read_text(errors="replace").strip().splitlines()
    if returncode != 0:
        raise RuntimeError(f"building {name} failed (exit {returncode}): " + " | ".join(lines[-3:]))
    return json.loads(lines[-1])


def run_model(name: str, out: Path, memory: str | None, cgroup_limit: str | None) -> Row:
    folder = out / name
    budget, source = budget_bytes(memory, cgroup_limit)
    try:
        built = build_model(name, folder, cgroup_limit)
    except RuntimeError as error:
        return Row(name, 0, 0, budget, source, 0.0, 0, False, str(error))
    optimized = folder / "optimized"
    if optimized.exists():
        import shutil

        shutil.rmtree(optimized)
    command = [*_tfsmith(), "optimize", str(built["model_path"]), "--data", str(built["data_path"]),
               "--out", str(optimized), *(["--memory", memory] if memory else [])]
    time_log, log = folder / "optimize.time", folder / "optimize.log"
    print(f"==> {name}: {SPECS[name].about}; tfsmith optimize (log {log})", flush=True)
    with log.open("w") as sink:
        returncode = run_limited([str(GNU_TIME), "-v", "-o", str(time_log), *command], cgroup_limit,
                                 OPTIMIZE_TIMEOUT_S, stdout=sink, stderr=subprocess.STDOUT,
                                 env={**os.environ, "COLUMNS": "200"})
    timed = parse_time_v(time_log.read_text() if time_log.exists() else "", returncode)
    base = dict(model=name, parameters=int(built["parameters"]), weight_bytes=int(built["weight_bytes"]),
                budget_bytes=budget, budget_source=source, wall_s=timed.wall_s, peak_rss_bytes=timed.peak_rss_bytes)
    if timed.exit_status != 0 or timed.killed or not (optimized / "report.json").is_file():
        tail = [line for line in log.read_text(errors="replace").splitlines() if line.strip()][-1:]
        why = timed.killed or f"exit {timed.exit_status}"
        return Row(**base, ok=False, note=f"{why}: {tail[0][:160] if tail else 'no output'}")
    print(f"==> {name}: tfsmith bench of the optimized folder (log {folder / 'bench.log'})", flush=True)
    benched = run_bench(optimized, str(built["data_path"]), folder, cgroup_limit)
    return Row(**base, ok=True, note="", **read_report(optimized), **benched)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------- the table
def _size(value: int | None) -> str:
    if not value:
        return "-"
    return f"{value / 2**20:.0f} MiB" if value < 2**30 else f"{value / 2**30:.2f} GiB"


def _ms(us: float | None) -> str:
    return "-" if us is None else f"{us / 1e3:.3g} ms"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def table(rows: Sequence[Row]) -> str:
    lines = ["| model | params | weights | optimize wall | peak RSS | budget | chosen | p50 | vs SavedModel on TF "
             "| vs fastest timed | vs tfsmith bench's fastest | rows/s vs SavedModel | size vs SavedModel |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for r in rows:
        peak = f"{_size(r.peak_rss_bytes)} ({r.peak_rss_bytes / r.weight_bytes:.1f}x weights)" if r.weight_bytes \
            and r.peak_rss_bytes else _size(r.peak_rss_bytes)
        budget = f"{_size(r.budget_bytes)} ({r.budget_source})"
        wall = f"{r.wall_s / 60:.1f} min" if r.wall_s else "-"
        if not r.ok:
            lines.append(f"| {r.model} | {r.parameters / 1e6:.1f}M | {_size(r.weight_bytes)} | {wall} | {peak} | "
                         f"{budget} | FAILED | - | - | - | - | - | - |")
            notes.append(f"- {r.model}: {r.note}")
            continue
        lines.append(
            f"| {r.model} | {r.parameters / 1e6:.1f}M | {_size(r.weight_bytes)} | {wall} | {peak} | {budget} | "
            f"{r.chosen} on {r.chosen_runtime} | {_ms(r.chosen_p50_us)} | "
            f"{_x(r.ratio(r.saved_model_p50_us, r.chosen_p50_us))} faster | "
            f"{_x(r.ratio(r.chosen_p50_us, r.fastest_p50_us))} of {r.fastest} | "
            f"{_bench(r)} | "
            f"{_x(r.ratio(r.chosen_rows_per_s, r.saved_model_rows_per_s))} | "
            f"{_size(r.chosen_bytes)} vs {_size(r.saved_model_bytes)} "
            f"({_x(r.ratio(r.chosen_bytes, r.saved_model_bytes))}) |")
        if r.bench_note:
            notes.append(f"- {r.model}: {r.bench_note}")
        if r.saved_model_variables_bytes and r.saved_model_variables_bytes > 1.05 * r.weight_bytes:
            notes.append(f"- {r.model}: the SavedModel's variables are {_size(r.saved_model_variables_bytes)} for "
                         f"{_size(r.weight_bytes)} of weights")
    return "\n".join(lines + ([""] + notes if notes else []))


def _bench(row: Row) -> str:
    """The chosen runtime's p50 in `tfsmith bench`'s own rounds, as a multiple of the fastest it found."""
    if row.bench_fastest_p50_us is None or row.bench_chosen_p50_us is None:
        return "-"
    return f"{_x(row.ratio(row.bench_chosen_p50_us, row.bench_fastest_p50_us))} of {row.bench_fastest}"


def earlier_rows(path: Path, rerun: set[str]) -> list[Row]:
    """The rows an earlier run under the same --out wrote, but for the models run again."""
    try:
        rows = json.loads(path.read_text())["rows"]
        return [Row(**row) for row in rows if row["model"] not in rerun]
    except (OSError, ValueError, KeyError, TypeError):
        return []


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(ZOO),
                        help=f"comma-separated, of: {', '.join(SPECS)} (default: {','.join(ZOO)})")
    parser.add_argument("--out", type=Path, default=REPO / "build" / "bench" / "real_size")
    parser.add_argument("--memory", default=None, help="the memory optimize may use (its --memory), e.g. 8G")
    parser.add_argument("--cgroup-limit", default=None, help="run each build and optimize in a memory cgroup of "
                        "this size, e.g. 9G (needs write access to /sys/fs/cgroup)")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in SPECS]
    if unknown:
        parser.error(f"--models: unknown {', '.join(unknown)}; known: {', '.join(SPECS)}")
    if not GNU_TIME.is_file():
        parser.error(f"{GNU_TIME} (GNU time) is missing: apt-get install time (make bench installs it)")
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    fresh = [run_model(name, args.out, args.memory, args.cgroup_limit) for name in names]
    rows = [*earlier_rows(args.out / "real_size.json", set(names)), *fresh]  # a subset re-run keeps the others
    text = table(rows)
    print(text)
    (args.out / "real_size.md").write_text(text + "\n")
    (args.out / "real_size.json").write_text(json.dumps(
        {"host": os.uname().nodename, "cores": os.cpu_count(), "machine_memory_bytes": machine_memory(),
         "memory": args.memory, "cgroup_limit": args.cgroup_limit, "seconds": round(time.time() - started, 1),
         "rows": [asdict(r) for r in rows]}, indent=2) + "\n")
    print(f"real_size: {args.out / 'real_size.md'}, {args.out / 'real_size.json'}")
    return 0 if all(r.ok for r in fresh) else 1


if __name__ == "__main__":
    sys.exit(main())
