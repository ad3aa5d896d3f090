"""The model generator in the suite: a fixed, seeded set of small models composed from a catalog of what users
build (tests/modelgen), each through `tfsmith optimize` -> `tfsmith serve` (a real server) -> clients over REST
(rows and columns), gRPC (tensorflow-serving-api's stubs) and the Open Inference Protocol v2, compared with the
ORIGINAL model's answers (recorded by the builder from the saved file, never by tfsmith) within the gate of each
output's task; the served metadata must carry the original's input and output names, dtypes and shapes, for every
signature.

Reproduce one model: `pytest tests/e2e/test_model_generator.py -k <model id>` (the id names the seed and index:
`s<seed>-<index>-...`), or `python -m tests.benchmarks.model_sweep --seed S --start I --count 1 --details`.
`MODELGEN_SEED` and `MODELGEN_COUNT` choose another set (the defaults are what `make test` runs).

A model kind that fails today because of a tfsmith bug stays in the catalog and is marked here, only through
`KNOWN_FAILURES` (xfail, not strict: a fix makes it pass and the entry can go).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from tests.modelgen.catalog import ModelSpec
from tests.modelgen.composer import compose
from tests.modelgen.runner import Built, build_models, run_model

pytestmark = pytest.mark.tf
if any(importlib.util.find_spec(m) is None for m in ("tensorflow", "keras", "tf_keras", "ai_edge_litert", "grpc",
                                                     "tensorflow_serving", "tensorflow_model_optimization")):
    pytest.skip("needs the optimize and serve extras and tensorflow-serving-api", allow_module_level=True)

SEED = int(os.environ.get("MODELGEN_SEED", "2088"))
#: about five minutes on two shared cores (each model: a build share, optimize, a server start, four clients)
COUNT = int(os.environ.get("MODELGEN_COUNT", "5"))

#: (what the model is made of, the failure class it meets today). A spec matches when every field named equals
#: the spec's; the reason is the exact one-line failure. The lead empties this table as tfsmith's fixes land.
KNOWN_FAILURES: tuple[tuple[dict[str, str], str], ...] = ()


def known_failure(spec: ModelSpec) -> str | None:
    for fields, reason in KNOWN_FAILURES:
        if all(str(getattr(spec, key)) == value for key, value in fields.items()):
            return reason
    return None


SPECS = compose(SEED, COUNT)
PARAMS = [pytest.param(spec, id=spec.id, marks=[pytest.mark.xfail(strict=False, reason=reason)]
                       if (reason := known_failure(spec)) else []) for spec in SPECS]


@pytest.fixture(scope="module")
def built(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Built]:
    """The selected models (all of the set, or what `-k` picked), built once in one subprocess (Keras 3, tf_keras
    and TensorFlow stay out of this process)."""
    selected = [item.callspec.params["spec"] for item in request.session.items
                if getattr(item, "module", None) is request.module and hasattr(item, "callspec")
                and "spec" in item.callspec.params]
    return build_models(selected or SPECS, tmp_path_factory.mktemp("modelgen") / "models")


@pytest.mark.parametrize("spec", PARAMS)
def test_a_generated_model_is_served_as_the_original(spec: ModelSpec, built: dict[str, Built], tmp_path: Path) -> None:
    model = built[spec.id]
    assert model.build_error is None, f"seed {SEED}, model {spec.id}: the generator could not build it:\n" \
                                      f"{model.build_error[-3000:]}"
    outcome = run_model(model, tmp_path)
    assert outcome.ok, (f"seed {SEED}, model {spec.id} ({spec.describe()}):\n{outcome.failure}\n"
                        f"reproduce: {outcome.repro}\n  or: pytest tests/e2e/test_model_generator.py -k '{spec.id}'\n"
                        f"{outcome.detail[-4000:]}")
    assert outcome.checks == ["metadata", "answers"]  # both were asked, not skipped
