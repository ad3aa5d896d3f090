"""The model generator's larger sweep: `python -m tests.benchmarks.model_sweep --count N --seed S`.

Composes N models from the catalog (tests/modelgen), builds them in one subprocess, and runs each through
`tfsmith optimize` -> `tfsmith serve` -> REST, gRPC and v2 clients compared with the original; prints one row per
model (id, what it is made of, optimize ok?, served ok?, the failure's one line) and then the failure classes
with the models in each. `--start I` begins at index I (with `--count 1`, the one model a failing test names);
`--keep DIR` keeps the models, DATA and optimize folders there. Exits 0 when every model went through, 1 else.

`--recipe auto` (or a recipe file) instead of the light one (float files only), and `--optimize-only` to stop
after optimize: then it also prints what became of pruning (pruned and kept, pruned and dropped with the causes,
not pruned and why, by whether DATA had training rows) and every optional step that ended without a line
saying why (`tests/modelgen/dropouts.py`).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from tests.modelgen.composer import compose
from tests.modelgen.dropouts import Pruning, pruning_outcome, silent_steps
from tests.modelgen.runner import LIGHT_RECIPE, OPTIMIZED, Outcome, build_models, run_model


def failure_class(failure: str) -> str:
    """A failure's class: its line with what varies per model (paths, ids, numbers in shapes) folded, so models
    that fail for one reason group together."""
    text = re.sub(r"/\S+", "<path>", failure)
    text = re.sub(r"s\d+-\d{3}-[\w+.-]+", "<model>", text)
    text = re.sub(r"rows \d+\.\.\d+", "rows", text)
    return re.sub(r"\d+(\.\d+)?", "N", text)[:240]


def table(outcomes: list[Outcome]) -> str:
    lines = [f"{'model':<78} {'optimize':<8} {'served':<6} failure", "-" * 140]
    for o in outcomes:
        served = "ok" if o.served else "-" if o.optimized and not o.failure else "FAIL"  # "-": not asked
        lines.append(f"{o.spec.id:<78} {'ok' if o.optimized else 'FAIL':<8} {served:<6} "
                     f"{(o.failure or '')[:400]}")
        lines.append(f"    {o.spec.describe()}")
    return "\n".join(lines)


def classes(outcomes: list[Outcome]) -> str:
    grouped: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        if o.failure:
            grouped[failure_class(o.failure)].append(o)
    lines = []
    for cls, members in sorted(grouped.items(), key=lambda item: -len(item[1])):
        lines.append(f"\n[{len(members)}] {members[0].failure}")
        for o in members:
            lines.append(f"      {o.spec.id}")
        lines.append(f"      repro: {members[0].repro}")
    return "\n".join(lines)


def fold(cause: str) -> str:
    """A cause with its numbers folded, so causes that differ only in figures count together."""
    return re.sub(r"\d+(\.\d+)?", "N", cause)[:200]


def pruning_counts(pruned: dict[str, Pruning]) -> str:
    """Pruning's outcomes over the sweep: per verdict, with and without training rows, the causes counted."""
    lines = ["\npruning over the sweep (training rows: DATA has x_train):"]
    for rows in (True, False):
        members = {k: p for k, p in pruned.items() if (p.train_rows > 0) == rows}
        labelled = sum(p.train_labels for p in members.values())
        lines.append(f"  {'with' if rows else 'without'} training rows: {len(members)} models"
                     + (f" ({labelled} with labels, {len(members) - labelled} x_train only)" if rows else ""))
        for verdict in ("kept", "dropped", "not pruned", "not asked"):
            group = [p for p in members.values() if p.verdict == verdict]
            if not group:
                continue
            label = {"kept": "pruned and kept", "dropped": "pruned and dropped"}.get(verdict, verdict)
            shots = sum(p.one_shot for p in group)
            lines.append(f"    {label}: {len(group)}" + (f" ({shots} one-shot)" if shots else ""))
            causes: dict[str, int] = defaultdict(int)
            for p in group:
                if p.why:
                    causes[fold(p.why)] += 1
            for cause, n in sorted(causes.items(), key=lambda item: -item[1]):
                lines.append(f"      [{n}] {cause}")
    return "\n".join(lines)


def counted(work: Path, spec_id: str, data: Path | None) -> tuple[Pruning, list[str]] | None:
    """(what became of pruning, the steps without a line) of one model's optimize folder; None without a report."""
    out = work / spec_id / OPTIMIZED
    if not (out / "report.json").exists():
        return None
    return pruning_outcome(out, data), silent_steps(out)


def summary(pruned: dict[str, Pruning], silent: dict[str, list[str]]) -> tuple[str, bool]:
    """The counts, and whether every step said why it was not done."""
    quiet = {k: v for k, v in silent.items() if v}
    lines = [pruning_counts(pruned),
             f"\noptional steps that ended without a line saying why: {sum(map(len, quiet.values()))} in "
             f"{len(quiet)} models"]
    lines += [f"  {model}: " + "; ".join(problems) for model, problems in quiet.items()]
    return "\n".join(lines), not quiet


def recount(work: Path, specs: list) -> int:
    """The counts over an earlier sweep's --keep folder (its models and optimize folders as they are)."""
    import json

    pruned: dict[str, Pruning] = {}
    silent: dict[str, list[str]] = {}
    for spec in specs:
        entry = work / "models" / f"{spec.id}.contract.json"
        data = Path(json.loads(entry.read_text())["data"]) if entry.exists() else None
        found = counted(work, spec.id, data)
        if found is None:
            print(f"no report  {spec.id}")
            continue
        pruned[spec.id], silent[spec.id] = found
        p = found[0]
        print(f"{spec.id}  pruning: {p.verdict}{' (one-shot)' if p.one_shot else ''}{': ' + p.why if p.why else ''}")
    text, said = summary(pruned, silent)
    print(f"\n{len(pruned)} optimize reports of {len(specs)} models in {work}")
    print(text)
    return 0 if said else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=38)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--keep", type=Path, default=None, help="keep the models and outputs in this folder")
    parser.add_argument("--details", action="store_true", help="print each failure's whole text")
    parser.add_argument("--recipe", default=None, help="'auto' or a recipe file (default: float files only)")
    parser.add_argument("--optimize-only", action="store_true", help="stop after optimize; count pruning's outcomes")
    parser.add_argument("--recount", type=Path, default=None,
                        help="only count pruning and silent steps again over a --keep folder of an earlier sweep")
    args = parser.parse_args(argv)
    if args.recount is not None:
        return recount(args.recount, compose(args.seed, args.count, start=args.start))
    recipe = (LIGHT_RECIPE if args.recipe is None else "auto" if args.recipe == "auto"
              else Path(args.recipe).read_text())
    work = args.keep or Path(tempfile.mkdtemp(prefix="model-sweep-"))
    specs = compose(args.seed, args.count, start=args.start)
    print(f"model sweep: seed {args.seed}, models {args.start}..{args.start + args.count - 1}, work {work}", flush=True)
    built = build_models(specs, work / "models")
    outcomes = []
    pruned: dict[str, Pruning] = {}
    silent: dict[str, list[str]] = {}
    for spec in specs:
        outcome = run_model(built[spec.id], work / spec.id, recipe, serve=not args.optimize_only)
        outcomes.append(outcome)
        print(f"{'ok  ' if outcome.ok else 'FAIL'} {spec.id}  {outcome.failure or ''}", flush=True)
        found = counted(work, spec.id, built[spec.id].data) if outcome.optimized else None
        if found is not None:
            pruned[spec.id], silent[spec.id] = found
            p = pruned[spec.id]
            print(f"     pruning: {p.verdict}{' (one-shot)' if p.one_shot else ''}{': ' + p.why if p.why else ''}"
                  f"; train rows {p.train_rows}" + "".join(f"\n     NO NOTE: {s}" for s in silent[spec.id]),
                  flush=True)
        if args.details and outcome.detail:
            print("    " + outcome.detail.replace("\n", "\n    "), flush=True)
    print()
    print(table(outcomes))
    went = sum(o.ok for o in outcomes)
    print(f"\n{went} of {len(outcomes)} went through optimize -> serve -> REST/gRPC/v2 as the original"
          f" ({sum(o.optimized for o in outcomes)} optimized)")
    print(classes(outcomes))
    text, said = summary(pruned, silent)
    if args.optimize_only or args.recipe:
        print(text)
    return 0 if went == len(outcomes) and said else 1


if __name__ == "__main__":
    sys.exit(main())
