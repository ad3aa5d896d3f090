"""The model generator's larger sweep: `python -m tests.benchmarks.model_sweep --count N --seed S`.

Composes N models from the catalog (tests/modelgen), builds them in one subprocess, and runs each through
`tfsmith optimize` -> `tfsmith serve` -> REST, gRPC and v2 clients compared with the original; prints one row per
model (id, what it is made of, optimize ok?, served ok?, the failure's one line) and then the failure classes
with the models in each. `--start I` begins at index I (with `--count 1`, the one model a failing test names);
`--keep DIR` keeps the models, DATA and optimize folders there. Exits 0 when every model went through, 1 else.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from tests.modelgen.composer import compose
from tests.modelgen.runner import Outcome, build_models, run_model


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
        lines.append(f"{o.spec.id:<78} {'ok' if o.optimized else 'FAIL':<8} {'ok' if o.served else 'FAIL':<6} "
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=38)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--keep", type=Path, default=None, help="keep the models and outputs in this folder")
    parser.add_argument("--details", action="store_true", help="print each failure's whole text")
    args = parser.parse_args(argv)
    work = args.keep or Path(tempfile.mkdtemp(prefix="model-sweep-"))
    specs = compose(args.seed, args.count, start=args.start)
    print(f"model sweep: seed {args.seed}, models {args.start}..{args.start + args.count - 1}, work {work}", flush=True)
    built = build_models(specs, work / "models")
    outcomes = []
    for spec in specs:
        outcome = run_model(built[spec.id], work / spec.id)
        outcomes.append(outcome)
        print(f"{'ok  ' if outcome.ok else 'FAIL'} {spec.id}  {outcome.failure or ''}", flush=True)
        if args.details and outcome.detail:
            print("    " + outcome.detail.replace("\n", "\n    "), flush=True)
    print()
    print(table(outcomes))
    went = sum(o.ok for o in outcomes)
    print(f"\n{went} of {len(outcomes)} went through optimize -> serve -> REST/gRPC/v2 as the original"
          f" ({sum(o.optimized for o in outcomes)} optimized)")
    print(classes(outcomes))
    return 0 if went == len(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
