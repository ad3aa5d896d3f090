"""The model generator's signature lattice (tests/modelgen/lattice.py), pure: the cells span every TensorProto
dtype and ranks 0-5, seeds reproduce, the short sample holds float64, a scalar beside the batch and a signature of
scalars, each verdict follows TF Serving's rules, and docs/lattice.md is what the lattice writes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.modelgen import lattice
from tests.modelgen.cells import values
from tests.modelgen.lattice import CELL, CELLS, PROTOCOLS, REST_COLUMNS, REST_ROWS, V2, Cell, verdict
from tests.modelgen.runner import DT, V2 as V2_SPELLING, cell_agree
from tests.modelgen.table import render

DOCS = Path(__file__).resolve().parents[2] / "docs" / "lattice.md"
GATE = {"max_accuracy_drop": 0.01, "max_relative_error": 0.05}


def test_the_lattice_holds_every_dtype_rank_and_kind_of_dimension() -> None:
    assert len(CELLS) == len(set(CELLS)) == len(CELL)
    assert {c.dtype for c in CELLS} == set(lattice.DTYPES) == set(DT)  # every TensorProto dtype, each spelled
    assert {c.rank for c in CELLS} == {0, 1, 2, 3, 4, 5}
    for rank in range(2, 6):
        assert {c.dims for c in CELLS if c.rank == rank} == {lattice.FIXED, lattice.UNKNOWN, lattice.BATCH2}
    assert CELL["float32-r3-unknown-scalar"].x_shape == (None, None, None)
    assert CELL["int8-r4-fixed"].x_shape == (None, 2, 3, 2)
    assert CELL["int8-r2-batch2-scalar"].x_shape == (2, 2) and CELL["bool-r1-batch2"].x_shape == (2,)
    assert CELL["bool-r0-none"].x_shape == () and CELL["bool-r0-none"].has_scalar_input


def test_a_seed_draws_the_same_cells_and_an_id_rebuilds_its_cell() -> None:
    assert lattice.compose_cells(3, 40) == lattice.compose_cells(3, 40)
    assert lattice.compose_cells(3, 10, start=30) == lattice.compose_cells(3, 40)[30:]
    assert [s.cell for s in lattice.compose_cells(3, 20)] != [s.cell for s in lattice.compose_cells(4, 20)]
    whole = lattice.compose_cells(5, len(CELLS))
    assert {s.cell for s in whole} == set(CELL)  # a seed's first len(CELLS) draws are the whole lattice
    for spec in whole[:30]:
        assert lattice.by_id(spec.id) == spec
    with pytest.raises(ValueError):
        lattice.by_id(whole[0].id.replace(whole[0].cell, "float32-r9-none"))


@pytest.mark.parametrize("seed", [0, 1, 2, 2026])
def test_the_short_sample_holds_the_cells_a_user_meets_first(seed: int) -> None:
    chosen = [s.the_cell for s in lattice.sample(seed, 3)]
    assert any(c.dtype == "float64" and c.rank >= 1 for c in chosen)
    assert any(c.rank >= 1 and c.beside for c in chosen)
    assert any(c.rank == 0 for c in chosen)
    assert not any(lattice.known_failure(c) for c in chosen)
    assert any(c.out_scalar for c in (s.the_cell for s in lattice.sample(seed, 4)))
    assert len(lattice.sample(seed, 6)) == 6 and lattice.sample(seed, 6)[:0] == []


def test_verdicts_follow_tf_servings_rules() -> None:
    # float64 and every integer, bool and string dtype: served on every protocol, rows or columns
    for dtype in ("float64", "float16", "int8", "uint32", "uint64", "bool", "string"):
        for protocol in PROTOCOLS:
            assert verdict(Cell(dtype, 3, lattice.UNKNOWN, False), protocol).served
    # a scalar beside the batch, or a signature of scalars: every protocol but the row format
    for cell in (Cell("float32", 2, lattice.FIXED, True), Cell("int64", 0, lattice.NONE, False)):
        refused = verdict(cell, REST_ROWS)
        assert not refused.served and refused.status == "HTTP 400" and "scalar" in refused.reason
        assert all(verdict(cell, p).served for p in PROTOCOLS if p != REST_ROWS)
    # bfloat16 as float16: every protocol (v2's BF16)
    assert all(verdict(Cell("bfloat16", 2, lattice.FIXED, False), p).served for p in PROTOCOLS)
    # complex: gRPC carries it; TF Serving's JSON has no complex values, v2 no complex datatype
    for protocol in PROTOCOLS:
        one = verdict(Cell("complex64", 2, lattice.FIXED, False), protocol)
        assert one.served == (protocol == lattice.GRPC)
        assert one.served or (one.status == "HTTP 400" and "complex" in one.reason)
    assert verdict(Cell("string", 0, lattice.NONE, True), REST_COLUMNS).served


def test_a_dtype_optimize_does_not_take_is_refused_there_for_every_protocol(monkeypatch: pytest.MonkeyPatch) -> None:
    assert lattice.NOT_SERVED == ()  # every dtype TF Serving carries is taken today
    monkeypatch.setattr(lattice, "NOT_SERVED", ("bfloat16",))
    refused = {verdict(Cell("bfloat16", 1, lattice.NONE, False), p) for p in PROTOCOLS}
    assert refused == {lattice.Verdict(False, "optimize", "exit 2", lattice.REASON_DTYPE)}


def test_the_lattice_page_is_what_the_lattice_writes() -> None:
    """Regenerate with `python -m tests.modelgen.table > docs/lattice.md`."""
    assert DOCS.read_text() == render()


def test_the_table_says_every_verdict() -> None:
    page = render()
    for reason in (lattice.REASON_ROWS, lattice.REASON_ROWS_OUT, lattice.REASON_JSON, lattice.REASON_V2):
        assert reason in page
    assert "| float64 | refused (a) | served | served | served | served | served | refused (a) |" in page
    served = sum(verdict(c, p).served and not lattice.known_failure(c, p) for c in CELLS for p in PROTOCOLS)
    assert f"{served} of {len(CELLS) * len(PROTOCOLS)} cell x protocol pairs served" in page


@pytest.mark.parametrize("dtype", lattice.DTYPES)
def test_cell_data_is_in_the_cells_dtype_and_shape(dtype: str) -> None:
    rng = np.random.default_rng(0)
    for cell in (Cell(dtype, 0, lattice.NONE, False), Cell(dtype, 5, lattice.FIXED, True)):
        x = values(cell, 4, rng)
        assert x.shape == (4, *[d for d in cell.x_shape[1:] if d is not None]) if cell.rank else x.shape == (4,)
        assert (x.dtype.kind == "S") if dtype == "string" else (x.dtype.name == dtype)


def test_a_cells_answers_are_compared_and_the_comparison_can_fail() -> None:
    assert cell_agree(np.float64(2.0), np.float64(2.0), GATE) is None
    assert cell_agree(np.float64(2.5), np.float64(2.0), GATE) is not None
    assert cell_agree(np.array([b"a!", b"b!"], dtype=object), np.array([b"a!", b"b!"]), GATE) is None
    assert cell_agree(np.array([b"a!", b"c!"], dtype=object), np.array([b"a!", b"b!"]), GATE) is not None
    assert cell_agree(np.array([3, 4], np.uint64), np.array([3, 5], np.uint64), GATE) is not None
    assert cell_agree(np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[1.0, 2.0], [3.0, 4.0]]), GATE) is None


def test_every_dtype_has_the_protocols_own_spelling() -> None:
    assert DT["uint32"] == "DT_UINT32" and DT["complex128"] == "DT_COMPLEX128" and DT["bfloat16"] == "DT_BFLOAT16"
    assert V2_SPELLING["uint64"] == "UINT64" and V2_SPELLING["bfloat16"] == "BF16"
    assert not set(lattice.NO_V2_TYPE) & set(V2_SPELLING)


def test_the_sweep_groups_failures_by_what_does_not_vary() -> None:
    from tests.modelgen.cell_sweep import failure_class

    one = failure_class("served: gRPC: INVALID_ARGUMENT: c1-004-uint32-r2-fixed: input 'x' shape [5, 2] in /tmp/a/b")
    other = failure_class("served: gRPC: INVALID_ARGUMENT: c1-017-int8-r3-unknown-scalar: input 'x' shape [3, 1] "
                          "in /tmp/c")
    assert one == other == "served: gRPC: INVALID_ARGUMENT: <cell>: input 'x' shape [N, N] in <path>"
    assert failure_class("optimize exit 1: TypeError: x") != failure_class("optimize exit 2: tfsmith: error: y")


def test_a_scalar_output_is_served_where_the_protocol_carries_it() -> None:
    cell = CELL["float32-r2-fixed-total"]
    assert lattice.known_failure(cell) is None
    refused = verdict(cell, REST_ROWS)
    assert not refused.served and refused.status == "HTTP 400" and refused.reason == lattice.REASON_ROWS_OUT
    assert all(verdict(cell, p).served for p in PROTOCOLS if p != REST_ROWS)
    assert "| float32 | served | served | served | served | served | served | served | served | served | served |" \
        in render().split("## REST columns")[1]


def test_known_failures_are_named_and_shown_as_not_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not any(lattice.known_failure(c, p) for c in CELLS for p in (*PROTOCOLS, None))  # none today
    why = "a reason found by the generator"
    monkeypatch.setattr(lattice, "KNOWN", ((lambda c: c.out_scalar, lattice.GRPC, why),))
    assert lattice.known_failure(CELL["float32-r2-fixed-total"], lattice.GRPC) == why
    assert lattice.known_failure(CELL["float32-r2-fixed-total"], REST_COLUMNS) is None
    assert lattice.known_failure(CELL["float32-r2-fixed-total"]) == why  # any protocol
    assert lattice.known_failure(CELL["float64-r3-fixed"]) is None
    import re

    page = render()
    mark = re.search(r"- \((\w)\) not yet as TF Serving does it: " + re.escape(why), page)
    assert mark and f"not yet ({mark.group(1)})" in page.split("## gRPC")[1].split("## v2")[0]
    assert f"not yet ({mark.group(1)})" not in page.split("## gRPC")[0]