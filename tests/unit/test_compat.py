"""The compatibility table is data; these tests keep it consistent with itself and with what we know."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from builder import compat
from builder.errors import InputError
from builder.guard import parse_capability

RAW = json.loads(resources.files("builder").joinpath("data/compat.json").read_text())


def test_supported_versions_are_2_18_to_2_21() -> None:
    assert compat.SUPPORTED_TF_VERSIONS == ("2.18", "2.19", "2.20", "2.21")


@pytest.mark.parametrize("tf", compat.SUPPORTED_TF_VERSIONS)
def test_every_row_is_consistent(tf: str) -> None:
    row = compat.lookup(tf)
    assert compat.version_tuple(row.python_min) < compat.version_tuple(row.python_max)
    assert row.python_versions[0] == row.python_min and row.python_versions[-1] == row.python_max
    for version in (row.clang, row.bazel, row.cuda, row.cudnn):
        assert len(compat.version_tuple(version)) == 3, version
    # the CUDA version has a capability table, and TF's default list fits inside it
    limits = compat.cuda_limits(row.cuda)
    caps = [parse_capability(cc) for cc in row.default_capabilities]
    assert all(parse_capability(limits.min_capability) <= cc <= parse_capability(limits.max_capability) for cc in caps)
    assert row.default_capabilities[-1].startswith("compute_")  # the newest is shipped as PTX
    assert all(cc.startswith("sm_") for cc in row.default_capabilities[:-1])
    assert caps == sorted(caps)
    # the clang version can compile for every default capability
    assert max(caps) <= parse_capability(compat.clang_max_capability(row.clang))
    # configs later stages use exist; configs that never existed do not sneak in
    for config in ("cuda", "cuda_wheel", "release_cpu_linux", "avx_linux"):
        assert row.has_config(config)
    assert not row.has_config("opt") and not row.has_config("avx2_linux")
    assert len(set(row.bazel_configs)) == len(row.bazel_configs)


def test_rows_never_go_backwards() -> None:
    rows = [compat.lookup(tf) for tf in compat.SUPPORTED_TF_VERSIONS]
    for older, newer in zip(rows, rows[1:]):
        assert compat.version_tuple(newer.clang) >= compat.version_tuple(older.clang)
        assert compat.version_tuple(newer.bazel) >= compat.version_tuple(older.bazel)
        assert compat.version_tuple(newer.python_max) >= compat.version_tuple(older.python_max)


def test_facts_md_values() -> None:
    row = compat.lookup("2.21.0")
    assert (row.python_min, row.python_max, row.clang, row.bazel, row.cuda, row.cudnn) == (
        "3.10", "3.13", "18.1.8", "7.4.1", "12.5.1", "9.3.0"
    )
    assert compat.lookup("2.18").clang == "17.0.6" and compat.lookup("2.19").bazel == "6.5.0"
    assert row.default_capabilities == ("sm_60", "sm_70", "sm_80", "sm_89", "compute_90")
    assert row.supports_python("3.12.4") and not row.supports_python("3.9")


def test_lookup_accepts_patch_versions_and_refuses_unknown() -> None:
    assert compat.lookup("2.20.1") == compat.lookup("2.20")
    with pytest.raises(InputError, match="not supported"):
        compat.lookup("2.15")
    with pytest.raises(InputError, match="not a version"):
        compat.version_tuple("3.x")


def test_cuda_tables() -> None:
    assert compat.cuda_limits("12.5.1").max_capability == "9.0"
    assert parse_capability(compat.cuda_limits("12.8").max_capability) >= (12, 0)  # Blackwell needs 12.8
    assert compat.cuda_limits("13.0").min_capability == "7.5"  # CUDA 13 drops < 7.5
    with pytest.raises(InputError):
        compat.cuda_limits("11.2")
    assert compat.clang_max_capability("18.1.8") == "9.0"
    assert compat.clang_max_capability("99.0") == compat.clang_max_capability(max(RAW["clang_max_capability"], key=int))


def test_driver_table_is_sorted_and_maps_branches() -> None:
    branches = [int(b) for b, _ in RAW["driver_cuda"]]
    cudas = [compat.version_tuple(c) for _, c in RAW["driver_cuda"]]
    assert branches == sorted(branches, reverse=True) and cudas == sorted(cudas, reverse=True)
    assert compat.cuda_for_driver("550.54.15") == "12.4"
    assert compat.cuda_for_driver("470.256.02") == "11.4"
    assert compat.cuda_for_driver("580.65.06") == "13.0"
    assert compat.cuda_for_driver("390.1") is None and compat.cuda_for_driver("x") is None
    # every CUDA in the capability table has a driver minimum that the driver table agrees with
    for cuda, limits in RAW["cuda"].items():
        assert compat.cuda_for_driver(limits["min_driver"] + ".0") == cuda


def test_a_driver_runs_cuda_of_its_major_and_older() -> None:
    """CUDA's minor version compatibility: the driver's major CUDA decides; the oldest branch of a major comes
    from the driver table itself."""
    row = compat.lookup("2.21")
    assert compat.driver_runs("13.0", row.cuda) and compat.driver_runs("12.4", row.cuda)
    assert compat.driver_runs("11.4", row.cuda) is False
    assert compat.driver_runs(None, row.cuda) is None and compat.driver_runs("n/a", row.cuda) is None
    assert compat.min_driver_for(row.cuda) == "525"
    assert compat.cuda_for_driver(compat.min_driver_for(row.cuda) + ".60.13") == "12.0"
    assert compat.min_driver_for("99.0") is None
