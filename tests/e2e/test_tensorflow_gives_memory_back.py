"""A SavedModel that optimize opened on TensorFlow and closed gives its memory back to the machine.

optimize opens and closes one runner after another in its own process (the evaluation, then the race in groups
sized by what is resident). TensorFlow's x86 wheels put every tensor of 4 KiB or more in oneDNN's pool, which
never shrinks: a closed SavedModel's weights stayed resident beside every later runner. optimize imports
TensorFlow with its tensors taken from malloc (`builder.optimize.tfenv.setup`), which `give_memory_back` trims.

Each check runs in a fresh interpreter: the allocator is chosen once, when TensorFlow is first imported.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.tf
if importlib.util.find_spec("tensorflow") is None:
    pytest.skip("needs the optimize extra", allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]
WEIGHTS = 4096 * 4096 * 4 * 2  # two float32 4096x4096 matrices: 128 MiB

BUILD = """
import sys, tensorflow as tf
class Wide(tf.Module):
    def __init__(self):
        self.a = tf.Variable(tf.random.normal([4096, 4096], seed=1) * 0.01)
        self.b = tf.Variable(tf.random.normal([4096, 4096], seed=2) * 0.01)
    @tf.function(input_signature=[tf.TensorSpec([None, 4096], tf.float32, name="x")])
    def serve(self, x):
        return {"y": tf.matmul(tf.nn.relu(tf.matmul(x, self.a)), self.b)}
m = Wide()
tf.saved_model.save(m, sys.argv[1], signatures={"serving_default": m.serve})
"""

MEASURE = """
import json, sys
import numpy as np
from pathlib import Path
from builder.optimize import evaluate, tfenv
from builder.measure import memory
tfenv.tensorflow()
tfenv.give_memory_back()
before = memory.rss_bytes()
runner = evaluate.Runner("tensorflow", Path(sys.argv[1]), 2, "serving_default")
runner.predict_all({"x": np.ones((16, 4096), np.float32)})
opened = memory.rss_bytes()
del runner
tfenv.give_memory_back()
print(json.dumps({"before": before, "opened": opened, "after": memory.rss_bytes()}))
"""


def _python(code: str, *args: str, env: dict[str, str] | None = None) -> str:
    """`code` in a fresh interpreter; the allocator is tfenv's default unless `env` sets it."""
    environment = {k: v for k, v in os.environ.items() if k != "TF_ONEDNN_USE_SYSTEM_ALLOCATOR"}
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600,
                          cwd=REPO, env={**environment, "PYTHONPATH": str(REPO), **(env or {})})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("wide") / "saved_model"
    _python(BUILD, str(path), env={"TF_CPP_MIN_LOG_LEVEL": "2"})
    return path


def test_a_closed_savedmodel_runner_leaves_little_of_its_weights_resident(saved_model: Path) -> None:
    figures = json.loads(_python(MEASURE, str(saved_model)).splitlines()[-1])
    held = figures["opened"] - figures["before"]
    left = figures["after"] - figures["before"]
    assert held > 0.8 * WEIGHTS, figures  # the weights were loaded: the check below can fail
    assert left < 0.25 * WEIGHTS, (f"{left / 2**20:.0f} MiB of {WEIGHTS / 2**20:.0f} MiB of weights still resident "
                                   f"after the runner closed: {figures}")


def test_the_pool_that_keeps_them_is_what_tfsmith_turns_off(saved_model: Path) -> None:
    """The same measurement with oneDNN's pool left on: the weights stay. Proves the check above can fail, and
    that the setting, not something else, is what gives the memory back."""
    figures = json.loads(_python(MEASURE, str(saved_model), env={"TF_ONEDNN_USE_SYSTEM_ALLOCATOR": "0"}).splitlines()[-1])
    assert figures["after"] - figures["before"] > 0.8 * WEIGHTS, figures
