"""The zoo models (tests/zoo.py) and their `tfsmith optimize --recipe auto` outputs, made once per test run.

Three test files read the same things: test_zoo checks the models themselves, test_optimize_zoo what optimize
wrote for each (contract, metrics, gate, choice), test_zoo_serving serves and packages it. Each used to train
its own copy of every model and optimize it again (about 10 of the suite's 56 minutes on 2 cores). Here the first
test to ask — in whichever worker process (`make test` runs two) — builds or optimizes under a lock in the run's
shared folder; the others wait for it and read what it wrote. Nothing here writes into a model's folder or an
output after it is made, and no test does either (they write to their own tmp_path).
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import zoo
from tests.locks import one_at_a_time

REPO = Path(__file__).resolve().parents[1]
TFSMITH = REPO / ".venv" / "bin" / "tfsmith"
#: what each zoo model that only TensorFlow runs needs on optimize's command line, as a user would give it
TF_ARGS = {"custom_layer": ["--import", zoo.CUSTOM_MODULE], "predict_module": ["--signature", "predict"]}
#: correctness here, timings are the benchmark's job
LATENCY_RUNS = "30"


def shared_root(factory: pytest.TempPathFactory) -> Path:
    """This test run's folder for what its worker processes share (pytest-xdist gives each worker a basetemp
    of its own under one folder of the run)."""
    base = factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "zoo-shared"
    root.mkdir(parents=True, exist_ok=True)
    return root


def model(name: str, factory: pytest.TempPathFactory) -> zoo.ZooModel:
    """Zoo model `name`, trained once per run (seed 0) into the shared folder."""
    root = shared_root(factory)
    record = root / "models" / f"{name}.pickle"
    with one_at_a_time(f"model-{name}", root / "locks"):
        if not record.exists():
            built = zoo.build(name, root / "models")
            record.write_bytes(pickle.dumps(built))
        return pickle.loads(record.read_bytes())


@dataclass(frozen=True)
class Optimized:
    """One `tfsmith optimize --recipe auto` run as a user sees it: its --out folder, exit status and output."""

    out: Path
    code: int
    stdout: str
    stderr: str


def auto(name: str, target: str, factory: pytest.TempPathFactory) -> Optimized:
    """`tfsmith optimize MODEL --recipe auto` of zoo model `name` for `target` ("host": this machine, measured),
    run once per run, from the model's folder (where `--import` finds the user's module)."""
    built = model(name, factory)
    root = shared_root(factory)
    out = root / "optimized" / f"{name}-{target}"
    record = out.with_name(out.name + ".json")
    with one_at_a_time(f"optimize-{name}-{target}", root / "locks"):
        if not record.exists():
            argv = [str(TFSMITH), "optimize", str(built.model_path), "--data", str(built.data_path), "--recipe", "auto",
                    "--out", str(out), "--latency-runs", LATENCY_RUNS, *TF_ARGS.get(name, [])]
            if target != "host":
                argv += ["--target", target]
            done = subprocess.run(argv, capture_output=True, text=True, timeout=900, cwd=built.model_path.parent,
                                  env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "COLUMNS": "200"})
            record.write_text(json.dumps({"code": done.returncode, "stdout": done.stdout, "stderr": done.stderr}))
        ran = json.loads(record.read_text())
    return Optimized(out, ran["code"], ran["stdout"], ran["stderr"])
