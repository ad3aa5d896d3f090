"""The signature lattice, as data: every dtype TF Serving's TensorProto carries x every rank from 0 to 5 (fixed or
unknown dimensions past the batch, with or without a scalar beside the batch) x every protocol, and what a
client gets in each cell: the original's answers, or a refusal with TF Serving's own status and one line why.

Pure (no TensorFlow): the composer draws cells from here, the runner asserts each cell's verdict against a real
server, and `tests.modelgen.table` writes the verdicts into docs/lattice.md, so the table is this module and
cannot drift from what the generator checks.

A cell's model (`tests.modelgen.cells`) is a `tf.Module` SavedModel: input `x` of the cell's dtype and shape
(rank 0: a signature of scalars), beside it `scale` [] float32 when the cell has a scalar beside the batch;
outputs `y` (x's dtype and shape: x times 2 or the scale, negated for bool, suffixed for strings) and `summary`
(float64, one value per row: the row's sum, or a string's length, or a complex number's real part), and when
the cell has a scalar output, `total` [] float64 beside them (the summaries' sum: an answer without a batch).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

#: TF Serving's TensorProto dtypes (tensorflow/core/framework/types.proto), numpy's spelling; `string` is tf.string
DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
          "uint32", "uint64", "bool", "string", "complex64", "complex128")
RANKS = (0, 1, 2, 3, 4, 5)
#: the dimensions past the batch: all fixed (2, 3, 2, 1 ...) or all unknown (None); rank 0 and 1 have none.
#: BATCH2: every dimension fixed, the batch too (a model built for batches of exactly 2 rows)
FIXED, UNKNOWN, NONE, BATCH2 = "fixed", "unknown", "none", "batch2"
#: the sizes DATA and the probe give the dimensions past the batch (declared, or given to unknown ones)
SIZES = (2, 3, 2, 1)

REST_ROWS, REST_COLUMNS, GRPC, V2 = "REST rows", "REST columns", "gRPC", "v2"
PROTOCOLS = (REST_ROWS, REST_COLUMNS, GRPC, V2)

#: dtypes `tfsmith optimize` refuses today in one line ("... has dtype X, which tfsmith does not serve"): none
#: (bfloat16 is spelled by ml_dtypes, as TensorFlow spells it)
NOT_SERVED: tuple[str, ...] = ()
#: dtypes the v2 protocol has no datatype for (its datatypes: BOOL, UINT8..64, INT8..64, FP16/32/64, BYTES, BF16)
NO_V2_TYPE = ("complex64", "complex128")
#: dtypes TF Serving's JSON (REST, rows and columns) has no values for (its REST API refuses them)
NO_JSON_TYPE = ("complex64", "complex128")


@dataclass(frozen=True)
class Cell:
    """One signature of the lattice: `x` of `dtype` at `rank`, its dimensions past the batch `dims`, and a scalar
    `scale` beside it when `beside` (rank 0 with `beside`: a signature of two scalars); `out_scalar`: a scalar
    output `total` beside the batched ones (rank 1-5)."""

    dtype: str
    rank: int
    dims: str
    beside: bool
    out_scalar: bool = False

    @property
    def name(self) -> str:
        return (f"{self.dtype}-r{self.rank}-{self.dims}{'-scalar' if self.beside else ''}"
                f"{'-total' if self.out_scalar else ''}")

    @property
    def x_shape(self) -> tuple[int | None, ...]:
        """`x` as the signature declares it: () for rank 0, else (None, ...) with the dimensions past the batch."""
        if self.rank == 0:
            return ()
        batch = 2 if self.dims == BATCH2 else None
        return (batch, *[size if self.dims in (FIXED, BATCH2) else None for size in SIZES[:self.rank - 1]])

    @property
    def has_scalar_input(self) -> bool:
        return self.rank == 0 or self.beside

    def describe(self) -> str:
        shape = "[" + ", ".join("-1" if d is None else str(d) for d in self.x_shape) + "]"
        return (f"x {self.dtype} {shape}" + (" + scale float32 []" if self.beside else "")
                + (" -> y, summary and total float64 []" if self.out_scalar else " -> y, summary"))


def all_cells() -> tuple[Cell, ...]:
    """The whole lattice: every dtype x (rank 0, rank 1, ranks 2-5 fixed and unknown) x with/without a scalar
    input beside x x (ranks 1-5) with/without a scalar output beside the batched ones x (ranks 1-5) a batch of
    any size or of exactly 2 rows."""
    cells = []
    for dtype in DTYPES:
        for rank in RANKS:
            for dims in (() if rank == 0 else (BATCH2,)) + ((NONE,) if rank < 2 else (FIXED, UNKNOWN)):
                for beside in (False, True):
                    for out_scalar in ((False,) if rank == 0 else (False, True)):
                        cells.append(Cell(dtype, rank, dims, beside, out_scalar))
    return tuple(cells)


CELLS = all_cells()
CELL = {cell.name: cell for cell in CELLS}


@dataclass(frozen=True)
class Verdict:
    """What a client gets in a cell over a protocol: `served` (the original's answers), or refused with `status`
    (HTTP 400 / gRPC INVALID_ARGUMENT, as TF Serving answers) and `reason`; `stage` says who refuses:
    `optimize` (tfsmith optimize, exit 2, before any file is written) or the protocol itself."""

    served: bool
    stage: str = ""
    status: str = ""
    reason: str = ""

    @property
    def short(self) -> str:
        return "served" if self.served else f"refused: {self.reason}"


SERVED = Verdict(True)
#: the reasons, one line each (the table's words and what the runner checks a refusal's message against)
REASON_DTYPE = "optimize refuses the dtype in one line (tfsmith's contract has no numpy spelling for it yet)"
REASON_ROWS = "the row format cannot carry a scalar beside rows (each instance is one row of every input)"
REASON_V2 = "v2 has no complex datatype"
REASON_JSON = "TF Serving's JSON (REST) carries no complex values"
REASON_ROWS_OUT = "the row format cannot answer an output without a batch (one entry per instance)"


def verdict(cell: Cell, protocol: str) -> Verdict:
    """What `tfsmith serve` answers in `cell` over `protocol` after `tfsmith optimize`, as TF Serving would."""
    if cell.dtype in NOT_SERVED:
        return Verdict(False, "optimize", "exit 2", REASON_DTYPE)
    if protocol in (REST_ROWS, REST_COLUMNS) and cell.dtype in NO_JSON_TYPE:
        return Verdict(False, protocol, "HTTP 400", REASON_JSON)
    if protocol == REST_ROWS and cell.has_scalar_input:
        return Verdict(False, protocol, "HTTP 400", REASON_ROWS)
    if protocol == REST_ROWS and cell.out_scalar:  # TF Serving: "Tensor name: total has no shape information"
        return Verdict(False, protocol, "HTTP 400", REASON_ROWS_OUT)
    if protocol == V2 and cell.dtype in NO_V2_TYPE:
        return Verdict(False, protocol, "HTTP 400", REASON_V2)
    return SERVED


#: cells whose verdict tfsmith does not meet yet, each with the reason it fails (found by the generator; the e2e
#: test expects these to fail, strictly: one that starts passing fails the test until it leaves this list). Each
#: entry: (which cells, the protocol it concerns or None for every one, why). Empty: every cell meets its verdict.
KNOWN: tuple[tuple[Callable[[Cell], bool], str | None, str], ...] = ()


def known_failure(cell: Cell, protocol: str | None = None) -> str | None:
    """Why tfsmith does not yet do what `verdict` says in `cell` over `protocol` (any protocol when None; None: it
    does)."""
    for chooses, concerns, why in KNOWN:
        if chooses(cell) and (protocol is None or concerns is None or concerns == protocol):
            return why
    return None


@dataclass(frozen=True)
class CellSpec:
    """One generated model of the lattice: `cell`'s signature, built for a (seed, index). Its id (`-k`) rebuilds
    it: `c<seed>-<index>-<cell name>`."""

    seed: int
    index: int
    cell: str

    @property
    def id(self) -> str:
        return f"c{self.seed}-{self.index:03d}-{self.cell}"

    @property
    def the_cell(self) -> Cell:
        return CELL[self.cell]

    @property
    def fixed_batch(self) -> None:
        return None

    def describe(self) -> str:
        return f"tf.Module SavedModel, {self.the_cell.describe()}"

    def as_dict(self) -> dict[str, object]:
        return {"seed": self.seed, "index": self.index, "cell": self.cell}


def cell_order(seed: int) -> list[Cell]:
    """Every cell once, in an order that depends only on the seed: any `count` first cells are distinct."""
    order = list(CELLS)
    random.Random(f"cells-{seed}").shuffle(order)
    return order


def compose_cells(seed: int, count: int, start: int = 0) -> list[CellSpec]:
    order = cell_order(seed)
    return [CellSpec(seed, i, order[i % len(order)].name) for i in range(start, start + count)]


def sample(seed: int, count: int) -> list[CellSpec]:
    """`count` cells of a seed for a short run that still holds the cells a user meets first: a float64 signature,
    a scalar beside the batch, a signature of scalars and a scalar output beside the batched ones (each the seed's
    first such cell that goes through today), then the seed's order."""
    order = compose_cells(seed, len(CELLS))
    # dtypes every protocol carries and numpy saves as themselves (np.savez writes bfloat16 as 2-byte void)
    common = [d for d in DTYPES if d not in NOT_SERVED + NO_JSON_TYPE + ("bfloat16",)]
    wanted = [lambda c: c.dtype == "float64" and c.rank >= 1 and not c.beside,
              lambda c: c.rank >= 1 and c.beside and c.dtype in common,
              lambda c: c.rank == 0 and c.dtype in common,
              lambda c: c.out_scalar and c.dtype in common]
    chosen: list[CellSpec] = []
    for want in wanted:  # cells that go through today: the sample proves them served
        chosen.append(next(s for s in order if want(s.the_cell) and not known_failure(s.the_cell) and s not in chosen))
    chosen += [s for s in order if s not in chosen]
    return sorted(chosen[:count], key=lambda s: s.index)


def by_id(cell_id: str) -> CellSpec:
    seed_part, index_part, name = cell_id.split("-", 2)
    spec = compose_cells(int(seed_part[1:]), 1, start=int(index_part))[0]
    if spec.id != cell_id:
        raise ValueError(f"{cell_id!r} is not what seed {seed_part[1:]} index {index_part} composes ({spec.id})")
    return spec
