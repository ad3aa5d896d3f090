"""The signature lattice swept: `python -m tests.modelgen.cell_sweep --seed S --count N [--start I] [--keep DIR]`.

Builds N cells of a seed's order (`tests.modelgen.lattice.compose_cells`; N = 928 is the whole lattice), runs
each through optimize -> serve -> every protocol (`tests.modelgen.runner.run_cell`), and prints one line per
cell, then the failures grouped by class (what varies per cell folded). Exit 1 when a cell failed that
`lattice.known_failure` does not name. About 12 s a cell on an idle 2-core host (about 40 s beside other work),
so the whole lattice takes hours: a benchmark's run, not a test's.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from tests.modelgen.lattice import CELLS, compose_cells, known_failure
from tests.modelgen.runner import Outcome, build_cells, run_cell


def failure_class(failure: str) -> str:
    """A failure's line with paths, cell ids and numbers folded, so cells failing for one reason group together."""
    text = re.sub(r"/\S+", "<path>", failure)
    text = re.sub(r"c\d+-\d{3}-[\w-]+", "<cell>", text)
    return re.sub(r"\d+(\.\d+)?", "N", text)[:240]


def summary(outcomes: list[Outcome]) -> str:
    grouped: dict[str, list[Outcome]] = defaultdict(list)
    for outcome in outcomes:
        if outcome.failure:
            grouped[failure_class(outcome.failure)].append(outcome)
    lines = [f"{sum(o.ok for o in outcomes)} of {len(outcomes)} cells as their verdicts say; "
             f"{sum(not o.ok and bool(known_failure(o.spec.the_cell)) for o in outcomes)} failed as known "
             "(lattice.known_failure)"]
    for _, members in sorted(grouped.items(), key=lambda item: -len(item[1])):
        known = all(known_failure(o.spec.the_cell) for o in members)
        lines.append(f"[{len(members)}]{' (known)' if known else ''} {members[0].failure}")
        lines.append("    " + ", ".join(o.spec.id for o in members[:12]))
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--count", type=int, default=len(CELLS))
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--keep", type=Path, help="keep the cells' models and servers' logs here")
    args = parser.parse_args(argv)
    work = args.keep or Path(tempfile.mkdtemp(prefix="cell-sweep-"))
    specs = compose_cells(args.seed, args.count, start=args.start)
    built = build_cells(specs, work / "models")
    outcomes = []
    try:
        for spec in specs:
            outcome = run_cell(built[spec.id], work / spec.id)
            outcomes.append(outcome)
            print(f"{spec.id:<40} {'ok' if outcome.ok else 'FAIL':<4} {','.join(outcome.checks)} "
                  f"{outcome.failure or ''}", flush=True)
            if not args.keep:
                shutil.rmtree(work / spec.id, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(summary(outcomes))
    return 0 if all(o.ok or known_failure(o.spec.the_cell) for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
