"""The size figures of the report: gzip sizes measured a member at a time on every core, and how many rows
optimize asks a model about at once."""

from __future__ import annotations

import gzip
import os
import random
from pathlib import Path

import pytest

from builder.optimize import budget, evaluate


def _data(size: int, seed: int = 0) -> bytes:
    """Half random bytes, half runs: compressible, but not to nothing."""
    rng = random.Random(seed)
    return bytes(rng.getrandbits(8) if i % 2 else (i // 512) % 256 for i in range(size))


def test_a_file_under_one_member_has_the_size_gzip_9_gives_it(tmp_path: Path) -> None:
    data = _data(40_000)
    path = tmp_path / "model.tflite"
    path.write_bytes(data)
    assert evaluate.gzip_bytes(path) == len(gzip.compress(data, compresslevel=9))


def test_a_larger_file_is_the_size_of_its_independent_members_which_gzip_reads_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evaluate, "GZIP_MEMBER", 16_384)
    data = _data(100_000, seed=1)
    path = tmp_path / "weights.bin"
    path.write_bytes(data)
    members = [gzip.compress(data[i : i + 16_384], compresslevel=9) for i in range(0, len(data), 16_384)]
    assert len(members) == 7
    assert evaluate.gzip_bytes(path) == sum(len(m) for m in members)
    assert gzip.decompress(b"".join(members)) == data  # the figure is of a file gzip -d reads whole


def test_a_file_changed_since_it_was_measured_is_measured_again(tmp_path: Path) -> None:
    path = tmp_path / "model.tflite"
    path.write_bytes(b"\0" * 50_000)
    small = evaluate.gzip_bytes(path)
    path.write_bytes(_data(50_001, seed=2))
    os.utime(path, ns=(1, 1))  # even with a modification time from long ago, the size differs
    assert evaluate.gzip_bytes(path) == len(gzip.compress(path.read_bytes(), compresslevel=9)) > small


def test_an_artifacts_sizes_add_up_its_files_and_raw_bytes_compress_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "saved_model"
    (folder / "variables").mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(_data(3_000, seed=3))
    (folder / "variables" / "variables.data-00000-of-00001").write_bytes(_data(9_000, seed=4))
    raw, packed = evaluate.file_sizes(folder)
    assert raw == 12_000
    assert packed == sum(len(gzip.compress(p.read_bytes(), compresslevel=9)) for p in sorted(folder.rglob("*"))
                         if p.is_file())
    assert evaluate.raw_bytes(folder / "variables") == 9_000


def test_a_big_model_is_asked_a_few_rows_at_a_time_and_a_small_one_many() -> None:
    assert budget.rows_per_call(440 * 10**6) == budget.FEW_ROWS < budget.MANY_ROWS
    assert budget.rows_per_call(4 * 10**6) == budget.MANY_ROWS
    assert budget.rows_per_call(None) == budget.MANY_ROWS  # size unknown: as before
    assert budget.rows_per_call(budget.BIG_WEIGHTS) == budget.FEW_ROWS
