"""A seeded sample of the generator's lattice, each model built by tests/modelgen and run as a user does:
`tfsmith optimize` -> `tfsmith serve` -> clients over REST rows and columns, gRPC and v2, every answer and the
metadata compared with the original's (`tests.modelgen.runner`).

- models beyond float32 (`Family.dtypes`: a float64 `tf.Module`, one signature and several);
- cells of the signature lattice (`tests.modelgen.lattice`: dtype x rank 0-5 x fixed/unknown dimensions x a
  scalar beside the batch), each protocol's reply held to the cell's verdict: the original's answers, or TF
  Serving's status and the one-line reason (docs/lattice.md is the table of those verdicts). The sample always
  holds a float64 signature, a scalar beside the batch and a signature of scalars.

`LATTICE_SEED` and `LATTICE_COUNT` choose another sample of models, `LATTICE_CELL_SEED` and `LATTICE_CELL_COUNT`
of cells (`LATTICE_CELL_COUNT=928`: the whole lattice); reproduce one with `-k <id>`.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from tests.modelgen import lattice
from tests.modelgen.catalog import ModelSpec
from tests.modelgen.composer import compose
from tests.modelgen.runner import Built, build_cells, build_models, run_cell, run_model

pytestmark = [pytest.mark.tf, pytest.mark.slow]
if any(importlib.util.find_spec(m) is None for m in ("tensorflow", "ai_edge_litert", "grpc")):
    pytest.skip("needs the optimize and serve extras", allow_module_level=True)

SEED = int(os.environ.get("LATTICE_SEED", "1"))
COUNT = int(os.environ.get("LATTICE_COUNT", "2"))
#: how far into a seed the sample looks for its cells (the families come round-robin)
SEARCH = 120

SPECS = [spec for spec in compose(SEED, SEARCH) if spec.dtype != "float32"][:COUNT]
CELL_SEED = int(os.environ.get("LATTICE_CELL_SEED", "1"))
CELL_COUNT = int(os.environ.get("LATTICE_CELL_COUNT", "4"))
CELL_SPECS = lattice.sample(CELL_SEED, CELL_COUNT)


def test_the_sample_holds_cells_beyond_float32() -> None:
    assert len(SPECS) == COUNT, f"seed {SEED} composes {len(SPECS)} models beyond float32 in {SEARCH}"
    assert {spec.dtype for spec in SPECS} == {"float64"}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Built]:
    return build_models(SPECS, tmp_path_factory.mktemp("lattice") / "models")


@pytest.mark.parametrize("spec", SPECS, ids=[spec.id for spec in SPECS])
def test_a_lattice_model_is_served_as_the_original(spec: ModelSpec, built: dict[str, Built], tmp_path: Path) -> None:
    model = built[spec.id]
    assert model.build_error is None, f"the generator could not build {spec.id}:\n{model.build_error[-3000:]}"
    outcome = run_model(model, tmp_path)
    assert outcome.ok, (f"seed {SEED}, model {spec.id} ({spec.describe()}):\n{outcome.failure}\n"
                        f"reproduce: {outcome.repro}\n{outcome.detail[-4000:]}")
    assert outcome.checks == ["metadata", "answers"]


@pytest.fixture(scope="module")
def cells(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Built]:
    return build_cells(CELL_SPECS, tmp_path_factory.mktemp("cells") / "models")


@pytest.mark.parametrize("spec", CELL_SPECS, ids=[spec.id for spec in CELL_SPECS])
def test_a_lattice_cell_is_served_or_refused_as_tf_serving_would(spec: lattice.CellSpec, cells: dict[str, Built],
                                                                  tmp_path: Path, request: pytest.FixtureRequest) -> None:
    known = lattice.known_failure(spec.the_cell)
    if known:  # strict: a cell that starts going through fails here until it leaves lattice.known_failure
        request.applymarker(pytest.mark.xfail(reason=f"not yet: {known}", strict=True))
    model = cells[spec.id]
    assert model.build_error is None, f"the generator could not build {spec.id}:\n{model.build_error[-3000:]}"
    outcome = run_cell(model, tmp_path)
    assert outcome.ok, (f"cell seed {CELL_SEED}, {spec.id} ({spec.describe()}):\n{outcome.failure}\n"
                        f"reproduce: {outcome.repro}\n{outcome.detail[-4000:]}")
    refused_at_optimize = lattice.verdict(spec.the_cell, lattice.PROTOCOLS[0]).stage == "optimize"
    assert outcome.checks == (["optimize refused"] if refused_at_optimize else ["metadata", *lattice.PROTOCOLS])
