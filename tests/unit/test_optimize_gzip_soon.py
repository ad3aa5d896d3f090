"""gzip sizes measured in the background while conversions run: the same figure as measured when asked, and a
file that changes or goes before its turn is measured as it is when asked (or not at all)."""

from __future__ import annotations

import gzip
import os
import time
from pathlib import Path

import numpy as np

from builder.optimize import evaluate


def _file(path: Path, size: int, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    # half random bytes, half zeros: compresses to about half, unlike either alone
    data = rng.integers(0, 256, size // 2, dtype=np.uint8).tobytes() + bytes(size - size // 2)
    path.write_bytes(data)
    return path


def _wait_measured(path: Path, deadline_s: float = 120.0) -> None:
    key = evaluate._file_key(path)
    end = time.monotonic() + deadline_s
    while key not in evaluate._GZIPPED:
        assert time.monotonic() < end, "the background thread never measured the file"
        time.sleep(0.01)


def test_a_file_measured_in_the_background_has_the_figure_gzip_gives(tmp_path: Path) -> None:
    path = _file(tmp_path / "model.tflite", 3 << 20, seed=1)
    evaluate.gzip_soon(path)
    _wait_measured(path)
    assert evaluate.gzip_bytes(path) == len(gzip.compress(path.read_bytes(), compresslevel=9, mtime=0))


def test_a_file_rewritten_after_it_was_queued_is_measured_as_it_is_now(tmp_path: Path) -> None:
    path = _file(tmp_path / "model.tflite", 1 << 20, seed=2)
    evaluate.gzip_soon(path)
    _wait_measured(path)
    _file(path, 2 << 20, seed=3)
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 1_000_000))
    assert evaluate.gzip_bytes(path) == len(gzip.compress(path.read_bytes(), compresslevel=9, mtime=0))


def test_a_file_gone_before_its_turn_leaves_the_queue_working(tmp_path: Path) -> None:
    gone = _file(tmp_path / "gone.tflite", 1 << 20, seed=4)
    evaluate.gzip_soon(gone)
    gone.unlink()
    kept = _file(tmp_path / "kept.tflite", 1 << 20, seed=5)
    evaluate.gzip_soon(kept)
    _wait_measured(kept)
    assert evaluate.gzip_bytes(kept) == len(gzip.compress(kept.read_bytes(), compresslevel=9, mtime=0))


def test_an_artifact_folder_queues_each_of_its_files(tmp_path: Path) -> None:
    folder = tmp_path / "saved_model"
    (folder / "variables").mkdir(parents=True)
    files = [_file(folder / "saved_model.pb", 200_000, seed=6),
             _file(folder / "variables" / "variables.data-00000-of-00001", 500_000, seed=7)]
    evaluate.gzip_soon(folder)
    for file in files:
        _wait_measured(file)
    raw, packed = evaluate.file_sizes(folder)
    assert raw == sum(f.stat().st_size for f in files)
    assert packed == sum(len(gzip.compress(f.read_bytes(), compresslevel=9, mtime=0)) for f in files)
