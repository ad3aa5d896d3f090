"""Memory is a budget: a model of about 100 MB of weights optimized under `--memory`, judged by what the kernel
says the process used (GNU `time -v`'s maximum resident set, and the report's own peak), never by time.

Without a budget the same run peaks near 3.8 GB on this toolchain (every runner of the race open at once, 38x
the weights); under a 3 GB budget the race runs in groups and the run stays inside it, with the same kind of
choice, and each TFLite conversion runs in a process of its own, which gives back everything it took. Under a
budget that not even the model's own SavedModel fits in, optimize stops at once with one line
giving both figures, and writes nothing.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.tf
if any(importlib.util.find_spec(m) is None for m in ("tensorflow", "keras", "ai_edge_litert")):
    pytest.skip("needs the optimize extra", allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]
TFSMITH = REPO / ".venv" / "bin" / "tfsmith"
GIB = 1024**3
BUDGET = 3 * GIB


@pytest.fixture(scope="module")
def model_100mb(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A Keras 3 MLP with 25.2M float32 parameters (101 MB of weights): 1024 -> 4096 -> 4096 -> 1024 -> 10, with
    a head whose answers are confident (its last layer scaled so the top class stands out), and DATA with
    held-out and calibration rows."""
    folder = tmp_path_factory.mktemp("mlp")
    script = f"""
import numpy as np, keras
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((1024,)), keras.layers.Dense(4096, activation="relu"),
                          keras.layers.Dense(4096, activation="relu"), keras.layers.Dense(1024, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])
kernel, bias = model.layers[-1].get_weights()
model.layers[-1].set_weights([kernel * 40.0, bias])
rng = np.random.default_rng(0)
x = rng.normal(size=(160, 1024)).astype("float32")
model.save({str(folder / 'mlp.keras')!r})
np.savez({str(folder / 'mlp.npz')!r}, x_val=x[:64], x_calib=x[64:])
print(model.count_params())
"""
    done = subprocess.run([str(REPO / ".venv" / "bin" / "python"), "-c", script], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[-1]) == 25_185_290
    return folder / "mlp.keras", folder / "mlp.npz"


def _gnu_time() -> str:
    found = shutil.which("time") or "/usr/bin/time"
    if not Path(found).exists():
        pytest.skip("GNU time is not installed (Debian's `time`; make test installs it)")
    return found


def _max_rss_bytes(stderr: str) -> int:
    found = re.search(r"Maximum resident set size \(kbytes\): (\d+)", stderr)
    assert found, stderr[-2000:]
    return int(found.group(1)) * 1024


def test_a_100mb_model_stays_inside_its_memory_budget(model_100mb: tuple[Path, Path], tmp_path: Path) -> None:
    from builder.report import Report

    model, data = model_100mb
    out = tmp_path / "out"
    done = subprocess.run([_gnu_time(), "-v", str(TFSMITH), "optimize", str(model), "--data", str(data), "--out",
                           str(out), "--memory", str(BUDGET), "--latency-runs", "30"],
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-4000:]
    peak = _max_rss_bytes(done.stderr)
    report = Report.load(out)
    assert report.memory is not None and report.memory.budget_bytes == BUDGET
    assert peak <= BUDGET, f"peak {peak / GIB:.2f} GiB over the {BUDGET / GIB:.0f} GiB budget"
    assert report.memory.peak_bytes is not None and report.memory.peak_bytes <= BUDGET
    # the report's peak is at least what the kernel says of the largest process (never reset), and counts a
    # conversion's own process with optimize's, which GNU time reports apart (the largest one, not their sum)
    assert report.memory.peak_bytes >= 0.95 * peak
    # every step beyond the SavedModel measured: time and resident memory before, after and at its peak
    ran = [a for a in report.attempts if a.outcome == "done" and a.rss_before_mib is not None]
    assert ran and all(a.peak_rss_mib >= min(a.rss_before_mib, a.rss_after_mib) for a in ran)
    # a conversion in its own process: its memory counted at its peak, and all of it given back when it ended
    converted = [a for a in ran if a.step in ("model_dynamic.tflite", "model_float16.tflite", "model_int8.tflite")]
    assert converted, [a.step for a in report.attempts]
    for a in converted:
        assert a.peak_rss_mib > a.rss_before_mib + 100, a
        assert abs(a.rss_after_mib - a.rss_before_mib) < 64, a
    assert report.chosen_artifact.accepted and report.chosen != "baseline"
    # a runner the budget had no room for is a candidate that says so, never a crash
    assert all("not enough memory" in c.error or not c.error.startswith("MemoryError")
               for c in report.selection.candidates)


def test_a_budget_the_floor_cannot_fit_in_stops_at_once_in_one_line(model_100mb: tuple[Path, Path],
                                                                     tmp_path: Path) -> None:
    model, data = model_100mb
    out = tmp_path / "out"
    done = subprocess.run([str(TFSMITH), "optimize", str(model), "--data", str(data), "--out", str(out),
                           "--memory", "700M"], capture_output=True, text=True, timeout=900)
    assert done.returncode == 2, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("tfsmith: error:")]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "not enough memory" in lines[0] and "usable" in lines[0] and "700 MiB is usable" in lines[0], lines[0]
    assert re.search(r"needs about [\d.]+ (MiB|GiB) beside the [\d.]+ (MiB|GiB) in use", lines[0]), lines[0]
    assert not out.exists()


def test_sizes_are_read_as_people_write_them() -> None:
    from builder.measure.memory import parse_size, text

    assert parse_size("8G") == 8 * GIB and parse_size("8GiB") == 8 * GIB and parse_size("512Mi") == 512 * 1024**2
    assert parse_size("7.5GB") == 7_500_000_000 and parse_size("1073741824") == GIB
    with pytest.raises(ValueError, match="is not a size"):
        parse_size("3X")
    assert text(3 * GIB) == "3.0 GiB" and text(700 * 1024**2) == "700 MiB" and text(None) == "?"
    assert np.isclose(parse_size("0.5G"), GIB / 2)
