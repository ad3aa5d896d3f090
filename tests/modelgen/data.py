"""Synthetic, seeded inputs and labels per modality: pure numpy, nothing downloads.

Labels come from a fixed random "teacher" projection of the main input, so a briefly trained model learns
something (its answers differ from row to row and mean something) and a bad artifact shows up. DATA is written
in the form tfsmith reads (builder/optimize/data.py): `x_train/<input>`, `y_train/<output>`, `x_val/...`,
`y_val/...`, `x_calib/<input>`, or the plain names for a one-input, one-output model; class ids int64, one-hot
float32, per-pixel ids (N, H, W) int64, regression targets float32, strings as fixed-width UTF-8 bytes.
"""

from __future__ import annotations

import numpy as np

ROWS, VAL, CALIB = 288, 64, 32
CLASSES = 4
VOCAB = 50
SEQ = (10, 3)
IMAGE = (8, 8, 1)
VOLUME = (4, 6, 6, 1)
FRAMES = (4, 6, 6, 1)
TOKENS = 12
TABULAR = 6
CITIES = ("paris", "oslo", "lima", "rome", "kyiv", "atlantis")  # the last is not in the lookup's vocabulary
CODES = (3, 7, 11, 19, 23, 99)  # 99 is out of vocabulary


def main_input(modality: str, variant: str, rng: np.random.Generator, n: int = ROWS) -> dict[str, np.ndarray]:
    """The model's own inputs (before an auxiliary one), by input name."""
    if modality == "tabular":
        return {"features": rng.normal(size=(n, TABULAR)).astype(np.float32)}
    if modality == "sequence":
        x = rng.normal(size=(n, *SEQ)).astype(np.float32)
        if variant == "masking":  # padded sequences: trailing steps are zeros (the Masking layer's value)
            lengths = rng.integers(4, SEQ[0] + 1, size=n)
            x[np.arange(SEQ[0])[None, :] >= lengths[:, None]] = 0.0
        return {"sequence": x}
    if modality == "image":
        if variant == "uint8":
            return {"image": rng.integers(0, 256, size=(n, *IMAGE), dtype=np.uint8)}
        return {"image": rng.random((n, *IMAGE), dtype=np.float32)}
    if modality == "volume":
        return {"volume": rng.random((n, *VOLUME), dtype=np.float32)}
    if modality == "frames":
        return {"frames": rng.random((n, *FRAMES), dtype=np.float32)}
    if modality == "tokens":
        ids = rng.integers(1, VOCAB, size=(n, TOKENS))
        if variant == "mask_zero":
            lengths = rng.integers(4, TOKENS + 1, size=n)
            ids[np.arange(TOKENS)[None, :] >= lengths[:, None]] = 0
        return {"tokens": ids.astype(np.int64 if variant == "int64" else np.int32)}
    if modality == "features":
        city = np.array(CITIES, dtype=np.bytes_)[rng.integers(0, len(CITIES), size=(n, 1))]
        out = {"city": city, "amount": rng.normal(3.0, 2.0, size=(n, 3)).astype(np.float32)}
        if variant == "wide_deep":
            out["code"] = np.array(CODES, dtype=np.int64)[rng.integers(0, len(CODES), size=(n, 1))]
        return out
    if modality == "text":
        words = np.array(["good", "bad", "fine", "awful", "great", "meh", "ok"], dtype=object)
        texts = [" ".join(words[rng.integers(0, len(words), size=rng.integers(1, 6))]) for _ in range(n)]
        return {"text": np.array([t.encode() for t in texts], dtype=np.bytes_)}
    raise ValueError(f"unknown modality {modality!r}")


def aux_input(dtype: str, rng: np.random.Generator, n: int = ROWS) -> tuple[str, np.ndarray]:
    """The second input of list/dict models: (name, values)."""
    if dtype == "float32":
        return "meta", rng.normal(size=(n, 4)).astype(np.float32)
    if dtype == "bool":
        return "flag_in", rng.random((n, 1)) < 0.5
    if dtype == "int64":
        return "count", rng.integers(0, 5, size=(n, 1)).astype(np.int64)
    if dtype == "uint8":
        return "raw_bytes", rng.integers(0, 256, size=(n, 4), dtype=np.uint8)
    if dtype == "scalar":
        return "scalar_in", rng.normal(size=n).astype(np.float32)
    raise ValueError(f"unknown aux input dtype {dtype!r}")


def as_floats(x: np.ndarray) -> np.ndarray:
    """Any input as float64 rows, for the teacher: strings by a stable byte sum, everything else by value."""
    if x.dtype.kind == "S":
        flat = np.array([sum(v) % 97 for v in x.reshape(-1).tolist()], dtype=np.float64).reshape(x.shape)
        return flat.reshape(len(x), -1) / 97.0
    return x.astype(np.float64).reshape(len(x), -1)


def teacher(x: np.ndarray, columns: int, seed: int) -> np.ndarray:
    """A fixed random projection of the input rows, standardized: the signal the labels come from."""
    flat = as_floats(x)
    w = np.random.default_rng(seed + 7919).normal(size=(flat.shape[1], columns))
    z = flat @ w
    return (z - z.mean(axis=0)) / (z.std(axis=0) + 1e-9)


def labels_for(task: str, x: np.ndarray, seed: int) -> np.ndarray:
    """Training targets for a head, as its loss takes them: ids (N,), 0/1 (N,1), values (N,2), pixel ids (N,H,W),
    step ids (N,T)."""
    if task == "classification":
        return np.argmax(teacher(x, CLASSES, seed), axis=1).astype(np.int64)
    if task == "binary":
        z = teacher(x, 1, seed)[:, 0]
        return (z > np.median(z)).astype(np.int64)[:, None]
    if task == "regression":
        return teacher(x, 2, seed).astype(np.float32)
    if task == "tagging":  # per-step class: the teacher on each step alone (a token's id decides its tag)
        if x.ndim == 2:
            return (x.astype(np.int64) * 7 // 3 % CLASSES).astype(np.int64)
        steps = x.astype(np.float64)
        w = np.random.default_rng(seed + 15485863).normal(size=(steps.shape[-1], CLASSES))
        return np.argmax(steps @ w, axis=-1).astype(np.int64)
    if task == "segmentation":  # per-pixel class from the first channel's brightness
        first = x.astype(np.float64)[..., 0]
        edges = np.quantile(first, [0.25, 0.5, 0.75])
        return np.digitize(first, edges).astype(np.int64)
    raise ValueError(task)


def as_given(task: str, labels: str, y: np.ndarray) -> np.ndarray | None:
    """The labels as DATA carries them for the user's label kind (None: DATA has no labels for the head)."""
    if labels == "none":
        return None
    if labels == "onehot":
        return np.eye(CLASSES, dtype=np.float32)[y]
    if labels in ("pixel_onehot", "step_onehot"):
        return np.eye(CLASSES, dtype=np.float32)[y]
    if task == "binary":
        return y.reshape(len(y))
    return y


def split_rows(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(train, val, calib) row indices: disjoint, calibration rows out of training, never held-out rows."""
    order = np.random.default_rng(seed + 104729).permutation(n)
    return order[VAL + CALIB:], order[:VAL], order[VAL:VAL + CALIB]


def npz_arrays(x: dict[str, np.ndarray], y: dict[str, np.ndarray], seed: int, single: bool) -> dict[str, np.ndarray]:
    """DATA's arrays: named per input/output, or plain `x_val` etc. when `single` (one input, one output)."""
    train, val, calib = split_rows(len(next(iter(x.values()))), seed)
    arrays: dict[str, np.ndarray] = {}
    for split, rows in (("train", train), ("val", val), ("calib", calib)):
        for name, values in x.items():
            arrays[f"x_{split}" if single else f"x_{split}/{name}"] = values[rows]
        if split != "calib":
            for name, values in y.items():
                arrays[f"y_{split}" if single else f"y_{split}/{name}"] = values[rows]
    return arrays
