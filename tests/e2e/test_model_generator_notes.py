"""Every optional step `tfsmith optimize --recipe auto` asks for, over generated models: each one either made its
file or says why not in a line that names it (pruning, each .tflite, OpenVINO's float and int8 IR, serving_xla), and
every model with training rows in DATA has a pruned candidate judged by the gate or a line saying why not.

The models come from the generator (tests/modelgen) as users build them; the default set is one plain
`tf.Module` SavedModel without labels, a Keras 3 stateful RNN in .h5, and a tf_keras LSTM SavedModel with two
signatures whose plain .tflite cannot be made (OpenVINO's IR then still comes, float and int8, from the
SavedModel), and a tf_keras model with a bool output, which fine-tuning has no loss for: it is pruned one-shot. `MODELGEN_NOTES_SEED`, `MODELGEN_NOTES_START` and `MODELGEN_NOTES_COUNT` choose another set;
`python -m tests.benchmarks.model_sweep --recipe auto --optimize-only` runs the same checks over a larger one.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

from tests.modelgen.composer import compose
from tests.modelgen.dropouts import pruning_outcome, silent_steps
from tests.modelgen.runner import OPTIMIZED, Built, build_models, run_model

pytestmark = pytest.mark.tf
if any(importlib.util.find_spec(m) is None for m in ("tensorflow", "keras", "tf_keras", "ai_edge_litert",
                                                     "tensorflow_model_optimization")):
    pytest.skip("needs the optimize extra", allow_module_level=True)

SEED = int(os.environ.get("MODELGEN_NOTES_SEED", "7"))
START = int(os.environ.get("MODELGEN_NOTES_START", "1"))
COUNT = int(os.environ.get("MODELGEN_NOTES_COUNT", "3"))
#: ... and a tf_keras .keras model with a bool output no loss applies to (and labels for its float one): pruned
#: one-shot, without fine-tuning, and judged by the gate
SPECS = compose(SEED, COUNT, start=START) + ([] if "MODELGEN_NOTES_SEED" in os.environ else compose(1, 1, start=5))
FLOATS = ("float16", "float32", "float64", "bfloat16")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Built]:
    return build_models(SPECS, tmp_path_factory.mktemp("modelgen-notes") / "models")


def has_training_rows(data: Path) -> bool:
    with np.load(data, allow_pickle=False) as held:
        return any(k.startswith("x_train") and len(held[k]) > 0 for k in held.files)


@pytest.mark.parametrize("spec", SPECS, ids=[s.id for s in SPECS])
def test_every_optional_step_made_its_file_or_says_why(spec, built: dict[str, Built], tmp_path: Path) -> None:
    model = built[spec.id]
    assert model.build_error is None, f"the generator could not build {spec.id}:\n{model.build_error[-3000:]}"
    outcome = run_model(model, tmp_path, "auto", serve=False)
    assert outcome.optimized, f"{spec.id}: {outcome.failure}\n{outcome.repro}\n{outcome.detail[-4000:]}"
    out = tmp_path / OPTIMIZED
    assert silent_steps(out) == [], f"{spec.id} ({spec.describe()}): steps that ended without a line saying why"
    pruning = pruning_outcome(out, model.data)
    assert pruning.verdict != "not asked", f"{spec.id}: auto asks for pruning, and the run has no word on it"
    if has_training_rows(model.data):  # a pruned candidate judged by the gate, or a line saying why not
        assert pruning.verdict in ("kept", "dropped", "not pruned")
        assert pruning.verdict == "kept" or pruning.why, f"{spec.id}: pruning {pruning.verdict} without a cause"
    outputs = next(iter(model.contract.values()))["outputs"]
    if spec.keras == "tf_keras" and spec.fmt in ("keras", "h5") and any(o["dtype"] not in FLOATS for o in outputs):
        assert pruning.verdict in ("kept", "dropped") and pruning.one_shot, pruning  # judged, not skipped
