"""Memory is a budget, like cores: how much optimize may hold, and whether the next step fits in it.

The budget is the memory this process may use (`tfsmith detect`'s usable figure: the machine's, or its cgroup's
limit where lower), or less where `--memory` says so. A step beyond the model's own SavedModel (a conversion,
a quantizer, pruning, a runner in the race) is tried only where what is resident now plus what the step needs
fits; one that does not fit drops out with a note giving both figures, and the model is still served. When not
even the floor fits (the model loaded and its SavedModel on TensorFlow), optimize stops at once with one line
saying what it needs and what it may use, instead of being killed by the kernel's OOM killer midway.

What a step needs is measured where it can be: each step's resident memory is read before it and at its peak
(`builder.measure.memory`), and the next step of the same kind is expected to need what the last one took. The
first of each kind has no measurement yet, so it is expected to need `RULES[kind]` times the size of what it
reads (the model's float32 weights, or the file a runner opens): multiples measured on this toolchain (a
BERT-base-sized classifier, 436 MB of float32 weights; TensorFlow 2.21, LiteRT, OpenVINO 2025-2026 on
x86-64), and only a rule on any other stack.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from builder.measure import memory
from builder.optimize import isolated

#: What the first step of a kind is expected to need, in multiples of the size of what it reads. Measured at
#: each step's peak over what was resident before it, on a BERT-base-sized classifier (436 MB of float32
#: weights; TensorFlow 2.21, LiteRT and OpenVINO on x86-64, 2 cores): a conversion in its own process took 4.2x
#: (dynamic-range) to 4.8x (float16) and 8.5x for int8 with its calibration, the IR 2.7x; opening a runner and
#: its first calls took 2.75x the SavedModel on TensorFlow, 3.6x (int8) to 8.7x (float16, widened to float32)
#: a .tflite on LiteRT, 6.9x (float) to 11.8x (int8) an IR on OpenVINO, which compiles it. Small models take
#: less than these multiples; a rule on any other stack.
RULES: dict[str, float] = {
    "load": 3.0,  # reading the user's file, and the SavedModel made from a Keras model to serve it
    "prune": 4.0,  # a second model, its optimizer's two moments and the masks, while fine-tuning
    "export": 2.0,  # the SavedModel written from the Keras model
    "convert": 4.5,  # TFLite's converter: the graph's constants, the MLIR module and the flatbuffer
    "ir": 2.7,  # OpenVINO's converter: the graph and the IR's weights
    "nncf": 3.0,  # NNCF's int8: the float IR, the calibration statistics and the quantized copy
    "qat": 4.0,  # like pruning, with fake-quantization layers
    "runner:tensorflow": 2.75,  # a SavedModel on TensorFlow: its variables and the traced functions' constants
    "runner:litert": 5.0,  # a .tflite read into memory, XNNPACK's packed copy of its weights, its tensor arena
    "runner:openvino": 7.0,  # the IR or .tflite read, and the compiled model's own copy of its weights
}


#: Models with at least this many bytes of weights are called a few rows at a time (`rows_per_call`).
BIG_WEIGHTS = 100 << 20
#: Rows per call for such a model, and for any other.
FEW_ROWS, MANY_ROWS = 8, 256


#: A Keras call that judges a model's answers gets at most this many bytes of input rows at once.
CALL_INPUT_BYTES = 8 << 20


def rows_by_input_bytes(x: Mapping[str, np.ndarray], most: int = MANY_ROWS) -> int:
    """Rows per call so that one call's inputs stay under CALL_INPUT_BYTES (at least one row, at most `most`).
    Why: activations grow with each row's size, not the weights'; EfficientNet-B0 (16 MB of weights) judged on
    65 rows of 224x224x3 images in one Keras call peaked at 7.5 GiB while its one-shot pruning searched."""
    row = sum(int(np.asarray(v).nbytes // max(1, len(v))) for v in x.values() if np.ndim(v))
    return max(1, min(most, CALL_INPUT_BYTES // max(1, row)))


def rows_per_call(weight_bytes: int | None) -> int:
    """How many rows optimize passes in one call when it only wants a model's answers (the original's on the
    held-out rows, an artifact's for the gate): few for a big model. Why: TensorFlow's oneDNN allocator keeps
    the largest activations a process ever held for the rest of its life; a BERT-base-sized classifier answering
    64 rows of 128 tokens at once left 1.26 GiB resident once its SavedModel was released, against 1.04 GiB at 8
    rows a call (the same rows in about the same time; measured with oneDNN's pool, before optimize took
    TensorFlow's tensors from malloc: `tfenv.setup`). Small models keep the speed of big calls."""
    return FEW_ROWS if weight_bytes is not None and weight_bytes >= BIG_WEIGHTS else MANY_ROWS


@dataclass
class Budget:
    """The memory a run may use (`limit`, bytes; None: unknown, nothing is held back) and what each kind of step
    was measured to take so far (`taken`: by kind, its peak over what was resident before it, in multiples of
    the size it read)."""

    limit: int | None
    #: the model's float32 weights in bytes: what the first step of each kind that reads the model is sized by
    weights: int = 0
    taken: dict[str, float] = field(default_factory=dict)
    #: how much more than their opening the race's runners held once timed (first calls at new shapes, arenas,
    #: caches), the most any group showed so far; the race sizes its next groups by it (`learn_race_growth`)
    race_growth: float = 1.0

    def need(self, kind: str, size: int | None = None) -> int:
        """What a step of `kind` reading `size` bytes (default: the model's weights) is expected to need. A kind
        may name what it reads after a slash (`runner:litert/tflite_float16`, `runner_kind`): what that kind
        took, else what its family (`runner:litert`) took last, else the family's rule."""
        base = size if size is not None else self.weights
        family = kind.split("/", 1)[0]
        ratio = self.taken.get(kind) or self.taken.get(family) or RULES.get(kind) or RULES.get(family, 2.0)
        return int(ratio * base)

    def in_a_process(self, kind: str, size: int | None = None) -> bool:
        """Whether a step of `kind` runs in a process of its own: where it is expected to need a real share of
        the memory (`builder.optimize.isolated.worth_a_process`), so that what it takes is given back."""
        return isolated.worth_a_process(self.need(kind, size), self.limit)

    def refusal(self, kind: str, size: int | None = None) -> str | None:
        """Why a step of `kind` does not fit now, in one line with both figures; None when it fits."""
        if self.limit is None:
            return None
        held = memory.rss_bytes() or 0
        need = self.need(kind, size)
        if held + need <= self.limit:
            return None
        return (f"it needs about {memory.text(need)} beside the {memory.text(held)} in use, and "
                f"{memory.text(self.limit)} is usable")

    def room(self, share: float = 1.0) -> int | None:
        """What is left of `share` of the budget beside what is resident now (None: no limit known)."""
        if self.limit is None:
            return None
        return int(self.limit * share) - (memory.rss_bytes() or 0)

    def learn(self, kind: str, before: int | None, peak: int | None, size: int | None = None) -> None:
        """What a step of `kind` that read `size` bytes (default: the weights) took: its peak over what was
        resident before it. A step that took almost nothing (a file read while planning, a runner sharing a
        load) teaches nothing: the rule stays."""
        base = size if size is not None else self.weights
        if before is not None and peak is not None and base > 0 and peak - before > base * 0.05:
            self.taken[kind] = self.taken[kind.split("/", 1)[0]] = (peak - before) / base

    def learn_race_growth(self, expected: int, before: int | None, after: int | None) -> None:
        """A race group expected to add `expected` bytes (its runners' opening, as measured) held `after` with
        its runners open and timed, from `before`: the next groups are sized by the larger ratio. A BERT-base-
        sized classifier's groups held up to 1.4 GiB where opening them had taken about half that."""
        if expected > 0 and before is not None and after is not None and after - before > expected:
            self.race_growth = max(self.race_growth, (after - before) / expected)

    @contextlib.contextmanager
    def measured(self, kind: str, size: int | None = None) -> Iterator[None]:
        """Run a step of `kind` (reading `size` bytes) and learn what it took: its peak over what was resident
        before it."""
        before = memory.rss_bytes()
        with memory.watch() as peak:
            try:
                yield
            finally:
                self.learn(kind, before, peak(), size)

    def describe(self) -> str:
        return "unknown" if self.limit is None else memory.text(self.limit)
