"""String tensors in any form a runtime or a client holds them (a bare `bytes` scalar, numpy `S`/`U` arrays, object
arrays) are written as DT_STRING and read back as TensorFlow reads them."""

from __future__ import annotations

import numpy as np
import pytest

from builder.wire import tfs_proto as ours
from builder.wire.tensors import ENUM_OF_DTYPE, fill_proto, to_array


@pytest.mark.parametrize(("value", "shape", "values"), [
    (b"ok", (), [b"ok"]),  # a TensorFlow scalar string answer, as `.numpy()` gives it
    (np.array(b"ok"), (), [b"ok"]),
    (np.array("h\u00e9"), (), ["h\u00e9".encode()]),
    (np.array([[b"a", b"bc"]]), (1, 2), [b"a", b"bc"]),
    (np.array(["x", "yz"]), (2,), [b"x", b"yz"]),
    (np.array([b"a", b"\xff"], dtype=object), (2,), [b"a", b"\xff"]),
    (np.array([], dtype="S1").reshape(0, 3), (0, 3), []),
])
@pytest.mark.parametrize("content", [True, False])
def test_strings_in_any_form_are_dt_string(value, shape, values, content: bool) -> None:
    proto = fill_proto(ours.TensorProto(), value, content)
    assert proto.dtype == ENUM_OF_DTYPE["object"] and not proto.tensor_content
    assert list(proto.string_val) == values
    back = to_array(proto, "t")
    assert back.shape == shape and back.dtype == object and back.reshape(-1).tolist() == values

