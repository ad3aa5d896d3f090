"""A model's callable signatures as every runtime reports them: named inputs and outputs, in the model's order.

The one tensor description is `builder.report.TensorSpec` (None for a dimension of any size), shared with the
optimize report, so a signature means the same thing in the report, in a backend and on the wire.
"""

from __future__ import annotations

from dataclasses import dataclass

from builder.report import TensorSpec

DEFAULT_SIGNATURE = "serving_default"
#: The numpy dtype name of a string tensor (TensorFlow's `.numpy()` answers object arrays of bytes).
STRING = "object"

__all__ = ["DEFAULT_SIGNATURE", "STRING", "SignatureSpec", "TensorSpec", "batched"]


def batched(spec: TensorSpec) -> bool:
    """True when the leading dimension takes any batch size (what dynamic batching needs)."""
    return len(spec.shape) > 0 and spec.shape[0] is None


@dataclass(frozen=True)
class SignatureSpec:
    """A callable signature of the model: its named inputs and outputs, in the model's order."""

    name: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    def input(self, name: str) -> TensorSpec:
        for spec in self.inputs:
            if spec.name == name:
                return spec
        raise KeyError(name)

    @property
    def fixed_shapes(self) -> bool:
        """Every input dimension, batch included, has one size: a per-shape compiler compiles once."""
        return all(d is not None for spec in self.inputs for d in spec.shape)


def is_integer(dtype: str) -> bool:
    """An integer dtype by its numpy name (ids, counts); False for floats, bool, strings and names numpy does
    not know."""
    import numpy as np

    try:
        return np.dtype(dtype).kind in "iu"
    except TypeError:
        return False
