"""Inputs to run a model on when no request is at hand: the model's own samples, or stand-ins that fit its
signature. Used by the server's start-up self-test, `--runtime auto`'s timing and the smoke test alike."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from builder.errors import InputError
from builder.model.rows import unbatched
from builder.model.signature import STRING, SignatureSpec, TensorSpec


def sample_inputs(signature: SignatureSpec, batch: int = 1, seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic stand-in inputs matching a signature (dynamic dimensions taken as 1), for when the model
    came without example inputs. Integer inputs are all 0: for token ids or indices (an embedding lookup, a
    gather) 0 is the one value every model accepts, where random or negative ids may fail the lookup."""
    rng = np.random.default_rng(seed)
    result: dict[str, np.ndarray] = {}
    for spec in signature.inputs:
        shape = [batch if i == 0 and d is None else max(d or 1, 1) for i, d in enumerate(spec.shape)]
        dtype = np.dtype(spec.dtype)
        if spec.dtype == STRING:
            raise ValueError(f"input {spec.name!r} takes strings; no text is made up for it")
        if dtype.kind == "f":
            result[spec.name] = rng.random(shape).astype(dtype)
        else:
            result[spec.name] = np.zeros(shape, dtype=dtype)
    return result


def as_input(rows: np.ndarray, spec: TensorSpec) -> np.ndarray:
    """Sample rows in the input's dtype; text (numpy str or bytes arrays) as the object arrays of bytes the
    server passes for strings."""
    if spec.dtype != STRING:
        return rows.astype(spec.dtype)
    flat = np.empty(rows.size, dtype=object)
    flat[:] = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in rows.reshape(-1).tolist()]
    return flat.reshape(rows.shape)


def example_inputs(signature: SignatureSpec, samples_path: Path | None, batch: int = 1) -> dict[str, np.ndarray]:
    """The model's own example inputs for one call: the first `batch` rows of its samples file, in the
    signature's dtypes; generated stand-ins when there are none or they do not fit the signature."""
    from builder.model.artifact import load_samples

    if samples_path is not None:
        try:
            samples = load_samples(samples_path)
        except InputError:
            samples = None
        if samples is not None and samples.rows >= batch:
            found = {}
            free = unbatched(signature.inputs)
            for spec in signature.inputs:
                rows = samples.inputs.get(spec.name)
                if rows is not None and spec.name in free and rows.ndim == len(spec.shape) + 1:
                    rows = rows[0]  # one value per row (`builder.model.rows`): the first row's, as declared
                elif rows is not None and spec.name not in free:
                    rows = rows[:batch]
                if rows is None or rows.ndim != len(spec.shape):
                    break
                found[spec.name] = as_input(rows, spec)
            else:
                return found
    return sample_inputs(signature, batch)


