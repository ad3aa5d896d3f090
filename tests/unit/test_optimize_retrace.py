"""The second conversion from a trace with the contract's static shapes: when it is tried, what it is traced with,
how calibration rows reach it, and that the first conversion is unchanged and its error stands when the second
cannot help. The TensorFlow side is replaced by fakes here (the GAN generator converts for real in
tests/e2e/test_optimize_static_shapes.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from builder.optimize import quantize, retrace

GAN_TEXT = ('error: \'tf.Conv2D\' op is neither a custom op nor a flex op\n\ttf.Conv2D(tensor<?x?x16x16xf32>, '
            'tensor<3x3x16x1xf32>) -> (tensor<?x?x16x1xf32>)')


@pytest.mark.parametrize(("text", "lost"), [
    (GAN_TEXT, True),
    ("tf.Reshape(tensor<?x4x4x32xf32>, tensor<4xi32>) -> tensor<?x?x?x?xf32>", True),
    ("tf.Conv2D(tensor<?x8x8x16xf32>, tensor<3x3x16x1xf32>)", False),  # only the batch unknown
    ("tf.StringSplit(tensor<?x!tf_type.string>) -> tensor<?xi64>", False),
    ("'tf.TensorListReserve' op is neither a custom op nor a flex op: tensor<!tf_type.variant<tensor<?x4xf32>>>",
     False),
    ("", False),
])
def test_a_second_trace_is_tried_only_when_the_converter_shows_a_lost_dimension_past_the_batch(
        text: str, lost: bool) -> None:
    assert retrace.lost_static_dimensions(text) is lost


def test_the_trace_keeps_the_batch_open_and_fixes_every_declared_dimension() -> None:
    shapes = {"class_id": (-1, 1), "latent": (-1, 16), "image": (-1, 16, 16, 1)}
    assert retrace.static_specs(shapes, ["class_id", "latent"]) == {"class_id": [None, 1], "latent": [None, 16]}
    assert retrace.static_specs({"temperature": ()}, ["temperature"]) == {"temperature": []}
    # a sequence of any length: nothing is known that the saved graph did not know
    assert retrace.static_specs({"tokens": (-1, -1)}, ["tokens"]) is None
    assert retrace.static_specs({"x": (-1, 4)}, ["x", "missing"]) is None


def test_calibration_rows_reach_the_graph_path_as_a_list_in_the_files_input_order() -> None:
    rows = [{"latent": np.ones((1, 16), np.float32), "class_id": np.zeros((1, 1), np.int32)}]
    got = list(retrace.ordered_rows(lambda: iter(rows), ["class_id", "latent"])())
    assert [a.dtype for a in got[0]] == [np.int32, np.float32]
    assert list(retrace.ordered_rows(lambda: iter([[np.ones(2)]]), ["x"])())[0][0].tolist() == [1.0, 1.0]


def failed(text: str) -> quantize.ConversionFailed:
    return quantize.ConversionFailed("TFLite fp32 conversion failed: 'tf.Conv2D' op is neither a custom op nor a "
                                     "flex op; ...", "'tf.Conv2D' op is neither a custom op nor a flex op", text)


def test_the_first_conversion_stands_when_it_works(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(quantize, "_convert_saved", lambda *a: b"first")
    monkeypatch.setattr(quantize, "_convert_retraced", lambda *a: pytest.fail("no second trace"))
    notes: list[str] = []
    assert quantize._convert(Path("m"), "dynamic", None, notes, ["serving_default"], None) == b"first"
    assert notes == []


def test_a_failed_conversion_is_converted_again_from_the_static_trace_with_a_note(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def first(*a: object) -> bytes:
        raise failed(GAN_TEXT)

    monkeypatch.setattr(quantize, "_convert_saved", first)
    monkeypatch.setattr(quantize, "_convert_retraced", lambda path, mode, calib, notes, key: b"second")
    notes: list[str] = []
    assert quantize._convert(Path("m"), "dynamic", None, notes, ["serving_default"], None) == b"second"
    assert len(notes) == 1 and notes[0].startswith("dynamic: converted from the model traced with its signature's "
                                                   "static shapes")
    assert "'tf.Conv2D' op is neither a custom op nor a flex op" in notes[0]


@pytest.mark.parametrize(("text", "mode", "keys", "second"), [
    (GAN_TEXT, "fp32", ["serving_default"], None),  # the signature leaves a dimension unknown: nothing to fix
    (GAN_TEXT, "fp32", ["serving_default"], RuntimeError("still fails")),
    ("tensor<?x!tf_type.string>", "fp32", ["serving_default"], b"never asked"),
    (GAN_TEXT, "select_tf", ["serving_default"], b"never asked"),
    (GAN_TEXT, "fp32", ["serving_default", "embed"], b"never asked"),  # the caller retries one signature
])
def test_the_first_error_stands_when_the_second_trace_cannot_help(monkeypatch: pytest.MonkeyPatch, text: str,
                                                                  mode: str, keys: list[str], second: object) -> None:
    error = failed(text)

    def first(*a: object) -> bytes:
        raise error

    def retraced(*a: object) -> bytes | None:
        if second == b"never asked":
            pytest.fail("a second trace that cannot help was tried")
        if isinstance(second, Exception):
            raise second
        return second  # type: ignore[return-value]

    monkeypatch.setattr(quantize, "_convert_saved", first)
    monkeypatch.setattr(quantize, "_convert_retraced", retraced)
    notes: list[str] = []
    with pytest.raises(quantize.ConversionFailed) as raised:
        quantize._convert(Path("m"), mode, None, notes, keys, None)
    assert raised.value is error and notes == []
