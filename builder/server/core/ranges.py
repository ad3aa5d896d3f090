"""The values of integer inputs that the original model refuses, refused here too, before the model runs.

An id outside an embedding or lookup table is refused by the original model on TensorFlow (TF Serving: 400 /
INVALID_ARGUMENT, `indices[0,0] = 7 is not in [0, 3)`); OpenVINO's IR answers it with a row the model does
not have, and LiteRT refuses it with some kernels only. `tfsmith optimize` measures the range the original accepts of each
integer input (`builder.optimize.accepted`) and records it in report.json's contract (`input_ranges`); the
server reads it beside the model it serves and checks every call against it, whatever the protocol
(`ServedModel.predict`), with a `RequestError` 400 that every protocol answers and counts as its refusals.

The check is two numpy reductions per ranged input (min and max): nothing per element in Python.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from builder.model.signature import SignatureSpec, is_integer
from builder.report import REPORT_JSON, InputRange, Report, ReportError
from builder.server.core.call import Call, RequestError

#: signature name -> the ranges of its inputs the original accepts.
Ranges = Mapping[str, tuple[InputRange, ...]]


@dataclass(frozen=True)
class Refused:
    """The first value of an input outside its range: where it is and what the range is."""

    name: str
    value: int
    index: tuple[int, ...]
    low: int | None
    high: int | None

    def message(self) -> str:
        """TF's wording (`indices[0,0] = 7 is not in [0, 3)`), naming the input the client sent."""
        low = "-inf" if self.low is None else str(self.low)
        high = "inf" if self.high is None else str(self.high)
        rows = (f" (its table has {self.high} rows)" if self.high is not None and self.high > 0
                and self.low in (0, -self.high) else "")
        return (f"input {self.name!r}: value {self.value} at {list(self.index)} is not in [{low}, {high}), the values "
                f"the original model accepts{rows}")


def first_refused(name: str, values: np.ndarray, low: int | None, high: int | None) -> Refused | None:
    """The first value (in C order) outside [low, high), or None when all are inside."""
    if values.size == 0:
        return None
    below = low is not None and int(values.min()) < low
    above = high is not None and int(values.max()) >= high
    if not (below or above):
        return None
    outside = np.zeros(values.shape, dtype=bool)
    if low is not None:
        outside |= values < low
    if high is not None:
        outside |= values >= high
    index = tuple(int(i) for i in np.unravel_index(int(np.argmax(outside)), values.shape))
    return Refused(name, int(values[index]), index, low, high)


def check_ranges(call: Call, ranges: Ranges) -> None:
    """RequestError 400 for a call with an integer value the original model refuses (see the module)."""
    for spec in ranges.get(call.signature, ()):
        values = call.inputs.get(spec.name)
        if values is None or values.dtype.kind not in "iu":
            continue
        refused = first_refused(spec.name, values, spec.low, spec.high)
        if refused is not None:
            raise RequestError(refused.message())


def served_ranges(model_path: Path, signatures: Mapping[str, SignatureSpec]) -> dict[str, tuple[InputRange, ...]]:
    """The ranges report.json beside the served model records for its contract's signature, kept only for inputs
    that signature has with an integer dtype; {} without a report (a plain SavedModel or .tflite: TensorFlow
    refuses by itself, and a bare .tflite carries no measurement) or with one that cannot be read."""
    report_path = model_path.parent / REPORT_JSON
    if not report_path.is_file():
        return {}
    try:
        contract = Report.load(report_path).model.contract
    except (ReportError, OSError, ValueError):
        return {}
    signature = signatures.get(contract.signature)
    if signature is None or not contract.input_ranges:
        return {}
    integers = {s.name for s in signature.inputs if is_integer(s.dtype)}
    kept = tuple(r for r in contract.input_ranges if r.name in integers)
    return {signature.name: kept} if kept else {}
