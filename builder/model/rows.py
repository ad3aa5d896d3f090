"""Which inputs of a signature carry the batch, and how rows are called on a model some of whose inputs do not.

A signature may take, beside its batched inputs, inputs that are one tensor for the whole call: a scalar
`temperature` beside `features` [-1, 10], a fixed [3, 4] table beside a batch, or nothing but scalars. TF
Serving calls such a model with each input as the signature declares it. Everything that works on rows
(optimize's held-out rows, their slices, the gate's added row, the timing loop's row cycle) needs a row axis on
every input, so an input that takes no batch is carried in ROW FORM: one value per row, stacked on a leading
axis (its declared rank plus one). `call_rows` turns rows back into the calls the model takes: consecutive rows
whose unbatched values are equal go in one call, those inputs as declared; the answers come back one per row.

A model in a server never sees row form: a request's tensors have the declared ranks (the protocols' shape
rules refuse others before the model), and `call_rows` only takes an unbatched input of exactly one rank more.

Outputs too: beside batched outputs a signature may answer a scalar for the whole call (a sum over the request's
rows). Such an answer belongs to the call, not to a row, so what it is depends on which rows were called
together. `answer_rows` gives every output one value per row whatever batch it is asked in: each row is called
alone (a model with a fixed batch: in its own batches, from the first row), and the call's scalar is that row's.
So the original and every file made from it are compared on the same calls, however many rows each is asked at
once; a server answers a request in one call, as declared (`Backend.answer`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from builder.report import TensorSpec

Arrays = Mapping[str, np.ndarray]


def contiguous(value: object) -> np.ndarray:
    """`value` as a C-contiguous array of its own shape: `np.ascontiguousarray` makes a scalar one-dimensional,
    which a runtime then refuses for an input declared as a scalar."""
    array = np.asarray(value)
    return np.ascontiguousarray(array).reshape(array.shape)


def unbatched(inputs: Sequence[TensorSpec]) -> frozenset[str]:
    """The inputs that take no batch: scalars; beside an input whose first dimension is open, those whose first
    is fixed; with no open first dimension, every input when their first dimensions differ (no common batch)."""
    ranked = [spec for spec in inputs if len(spec.shape) > 0]
    scalars = {spec.name for spec in inputs if len(spec.shape) == 0}
    if any(spec.shape[0] is None for spec in ranked):
        return frozenset(scalars | {spec.name for spec in ranked if spec.shape[0] is not None})
    if len({spec.shape[0] for spec in ranked}) > 1:
        return frozenset(spec.name for spec in inputs)
    return frozenset(scalars)


def unbatched_outputs(inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> frozenset[str]:
    """The outputs that carry no batch beside a batched input: scalars (a sum over the call's rows). A signature
    with no batched input answers every output for its one call, and rows of it are `call_rows`' concern."""
    if all(spec.name in unbatched(inputs) for spec in inputs):
        return frozenset()
    return frozenset(spec.name for spec in outputs if len(spec.shape) == 0)


def fixed_batch(inputs: Sequence[TensorSpec]) -> int | None:
    """The batch size a model with a fixed batch takes (every batched input's first dimension), else None."""
    free = unbatched(inputs)
    firsts = {spec.shape[0] for spec in inputs if spec.name not in free}
    return next(iter(firsts)) if len(firsts) == 1 and None not in firsts else None


def in_row_form(inputs: Sequence[TensorSpec], x: Arrays) -> frozenset[str]:
    """The unbatched inputs that `x` carries one value per row (one rank more than declared)."""
    free = unbatched(inputs)
    return frozenset(spec.name for spec in inputs
                     if spec.name in free and spec.name in x and np.ndim(x[spec.name]) == len(spec.shape) + 1)


def as_rows(inputs: Sequence[TensorSpec], x: Arrays, rows: int) -> dict[str, np.ndarray]:
    """`x` with every unbatched input given as declared repeated into row form, `rows` rows."""
    free = unbatched(inputs)
    out = dict(x)
    for spec in inputs:
        if spec.name in free and spec.name in x and np.ndim(x[spec.name]) == len(spec.shape):
            value = np.asarray(x[spec.name])
            out[spec.name] = np.broadcast_to(value, (rows, *value.shape)).copy()
    return out


def row_count(inputs: Sequence[TensorSpec], x: Arrays) -> int:
    """How many rows `x` holds: a batched input's length, else a row-form input's, else one call's worth (1)."""
    free = unbatched(inputs)
    shaped = in_row_form(inputs, x)
    for spec in inputs:
        if spec.name in x and (spec.name not in free or spec.name in shaped):
            return len(x[spec.name])
    return 1


def take(inputs: Sequence[TensorSpec], x: Arrays, start: int, stop: int) -> dict[str, np.ndarray]:
    """Rows [start, stop) of `x`: batched and row-form inputs sliced, an unbatched one given as declared kept."""
    free = unbatched(inputs)
    shaped = in_row_form(inputs, x)
    return {name: v if name in free and name not in shaped else v[start:stop] for name, v in x.items()}


def _runs(values: list[np.ndarray], rows: int) -> list[tuple[int, int]]:
    """[start, stop) of each run of consecutive rows whose values are all equal."""
    runs: list[tuple[int, int]] = []
    start = 0
    for i in range(1, rows + 1):
        if i == rows or any(not np.array_equal(v[i], v[start]) for v in values):
            runs.append((start, i))
            start = i
    return runs


def call_rows(inputs: Sequence[TensorSpec], x: Arrays,
              call: Callable[[dict[str, np.ndarray]], Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """`call(x)` where `x` carries unbatched inputs in row form: one call per run of equal unbatched values,
    those inputs as declared; each answer one per row (an output that carries the run's batch is joined, any
    other repeated for each row of its run). Without row form, `call(x)` as it is."""
    shaped = in_row_form(inputs, x)
    if not shaped:
        return dict(call(dict(x)))
    rows = row_count(inputs, x)
    free = unbatched(inputs)
    parts: list[dict[str, np.ndarray]] = []
    for start, stop in _runs([np.asarray(x[name]) for name in sorted(shaped)], rows):
        feed = {name: np.asarray(v)[start] if name in shaped else v if name in free else np.asarray(v)[start:stop]
                for name, v in x.items()}
        answers = call(feed)
        parts.append({name: _per_row(np.asarray(value), stop - start, batched=len(free) < len(inputs))
                      for name, value in answers.items()})
    return {name: np.concatenate([p[name] for p in parts], axis=0) for name in parts[0]}


def answer_rows(inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], x: Arrays,
                call: Callable[[dict[str, np.ndarray]], Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """`call_rows`, with every output one value per row: where the signature answers an output without a batch,
    each row is called alone (in the model's fixed batch when it has one), and that call's answer is the row's."""
    scalars = unbatched_outputs(inputs, outputs)
    if not scalars:
        return call_rows(inputs, x, call)
    rows = row_count(inputs, x)
    step = fixed_batch(inputs) or 1
    parts: list[dict[str, np.ndarray]] = []
    for start in range(0, rows, step):
        count = min(step, rows - start)
        answers = call_rows(inputs, take(inputs, x, start, start + count), call)
        parts.append({name: (np.broadcast_to(value, (count,)).copy() if name in scalars and np.ndim(value) == 0
                             else np.asarray(value)) for name, value in answers.items()})
    return {name: np.concatenate([p[name] for p in parts], axis=0) for name in parts[0]}


def _per_row(value: np.ndarray, rows: int, batched: bool) -> np.ndarray:
    """One answer per row: a batched call's output as it is, any other the run's one answer repeated."""
    if batched and value.ndim and len(value) == rows:
        return value
    return np.broadcast_to(value, (rows, *value.shape)).copy()


def first_row(inputs: Sequence[TensorSpec], x: Arrays) -> dict[str, np.ndarray]:
    """`x` with each row-form input as declared (its first row's value): one call's tensors."""
    shaped = in_row_form(inputs, x)
    return {name: (np.asarray(v)[0] if name in shaped else v) for name, v in x.items()}
