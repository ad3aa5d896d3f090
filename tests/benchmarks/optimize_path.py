"""Which of optimize's modules one run of `pipeline.run` passes, how often it enters them, and how often it comes
back to one it had already left (a measurement, not a test).

    python -m tests.benchmarks.optimize_path MODEL --data DATA [--src DIR] [--json FILE] [-- OPTIMIZE OPTIONS...]

Runs `tfsmith optimize MODEL --data DATA --out <temp>` (from this checkout, or `--src DIR`: another checkout, for
before/after) with a profile hook in its process (a `sitecustomize` on PYTHONPATH) that counts, from the moment
`builder.optimize.pipeline.run` is called until it returns, every call into a module of `builder.optimize` from
a frame of another `builder` module: one entry (one step handing work to another module). A call from outside
tfsmith's code (Keras calling a callback back, a thread starting) is not an entry. It prints the modules entered,
the distinct calls that enter them (caller function and function called: what a reader following the run from
`pipeline.run` follows, each once however often it runs), the comebacks (those calls minus the modules: how
often the reader comes back to a module already left), and the entries as run.
Conversions that optimize runs in processes of their own are not followed; the steps that start them are.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.benchmarks.profiled import hook_path, report, work_folder

ROOT = Path(__file__).resolve().parents[2]

#: The profile hook the measured process imports at start (as `sitecustomize`).
HOOK = r'''
import json, os, sys, threading
_OUT = os.environ.get("TFSMITH_OPTIMIZE_PATH_OUT")
if _OUT:
    _state = {"run": None, "entries": [], "pid": os.getpid()}

    def _dump():
        with open(_OUT, "w") as out:
            json.dump(_state["entries"], out)

    def _profile(frame, event, arg):
        name = frame.f_globals.get("__name__", "")
        if not name.startswith("builder.optimize"):
            return
        if event == "call" and _state["run"] is None:
            if name == "builder.optimize.pipeline" and frame.f_code.co_name == "run":
                _state["run"] = frame
            return
        if event == "return" and frame is _state["run"]:
            _dump()
            _state["run"] = False
            return
        if event != "call" or not _state["run"] or os.getpid() != _state["pid"]:
            return
        back = frame.f_back
        caller = back.f_globals.get("__name__", "") if back is not None else ""
        if caller == name or not caller.startswith("builder"):
            return
        _state["entries"].append([name, f"{caller}.{back.f_code.co_name}", frame.f_code.co_name])

    sys.setprofile(_profile)
    threading.setprofile(_profile)
'''


def measure(model: Path, data: Path, src: Path | None, options: list[str]) -> dict[str, Any]:
    source = src or ROOT
    with work_folder("tfsmith-optimize-path-") as work:
        out = work / "entries.json"
        env = {**os.environ, "PYTHONPATH": hook_path(work, HOOK, source), "TFSMITH_OPTIMIZE_PATH_OUT": str(out)}
        log = work / "optimize.log"
        with log.open("wb") as sink:
            code = subprocess.call([sys.executable, "-m", "builder.cli", "optimize", str(model), "--data", str(data),
                                    "--out", str(work / "out"), *options], env=env, cwd=source, stdout=sink,
                                   stderr=subprocess.STDOUT)
        if code != 0 or not out.exists():
            raise RuntimeError(f"optimize exited {code}; its output: {log}")
        entries: list[list[str]] = json.loads(out.read_text())
    counts: dict[str, int] = {}
    calls: dict[str, set[tuple[str, str]]] = {}
    for module, caller, function in entries:
        counts[module] = counts.get(module, 0) + 1
        calls.setdefault(module, set()).add((caller, function))
    followed = sum(len(pairs) for pairs in calls.values())
    return {"modules": len(counts), "calls": followed, "comebacks": followed - len(counts), "entries": len(entries),
            "by_module": {module: {"calls": len(calls[module]), "entries": counts[module]}
                          for module in sorted(counts, key=lambda m: (-len(calls[m]), m))}}


def render(result: dict[str, Any]) -> str:
    lines = [f"pipeline.run: {result['modules']} modules entered by {result['calls']} distinct calls from another "
             f"module (a reader following the run comes back {result['comebacks']} times to a module already left); "
             f"{result['entries']} entries as run"]
    lines += [f"    {module:45s} {counts['calls']:4d} calls {counts['entries']:7d} entries"
              for module, counts in result["by_module"].items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="optimize_path", description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--src", type=Path, help="root of another checkout whose optimize to measure")
    parser.add_argument("--json", type=Path, help="also write the counts here")
    argv = sys.argv[1:] if argv is None else argv
    options = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    result = measure(args.model.resolve(), args.data.resolve(), args.src, options)
    return report(render(result), result, args.json)


if __name__ == "__main__":
    sys.exit(main())
