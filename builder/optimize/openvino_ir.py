"""OpenVINO's own format (IR: `.xml` graph + `.bin` weights) from the SavedModel, float and NNCF int8.

THE IR converter of tfsmith, as `builder.optimize.quantize` is THE .tflite converter: `tfsmith optimize` and
`tfsmith bench` both call it, so bench times the files optimize ships. OpenVINO's own converter does the work
(`ov.convert_model` on the contract's signature function, `ov.save_model`), and NNCF's post-training
quantization (`nncf.quantize`) makes the int8 IR from the float one on the calibration rows, at optimize time:
the int8 model a server runs is the file the quality gate judged, and nothing is quantized when a container
starts. This module only wraps them:

- the IR keeps the contract: each input and output port is named exactly as the original names it, and the IR
  records the signature key and the names in the model's order (`builder.model.openvino.signature_info`), so
  the server reads it back without TensorFlow; dtypes and shapes are what the converter made of the
  signature, and the quality gate refuses the IR if they differ from the original's;
- one IR holds one function, so a model with several signatures gets none (one `IRRefused` line says which
  would be lost), never an IR that silently lacks a signature;
- the float IR keeps float32 weights (`compress_to_fp16=False`): `ov.save_model`'s default would store them in
  float16, and its answers would then not be the float model's;
- the converted model owns its weights (`share_weights=False`): by default `ov.convert_model` reuses the memory of
  the TensorFlow variables it was given, and once they are freed NNCF quantized whatever had taken their place
  (seen: an int8 IR agreeing with the original on 8-50% of rows after other models had run in the same process,
  its float IR, written before, intact).
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from builder.errors import IncompatibleError

#: Calibration rows NNCF uses at most: more barely moves int8 ranges and lengthens every optimize run.
NNCF_MAX_ROWS = 300


class IRRefused(IncompatibleError):
    """No IR for this model: `str()` says why in one line (a library's own first line kept whole);
    `full_text` is everything the library said, for a log file."""

    def __init__(self, message: str, full_text: str = "") -> None:
        super().__init__(message)
        self.cause = message
        self.full_text = full_text or message


def _ov() -> Any:
    import openvino as ov

    return ov


def convert_saved_model(saved_model: Path, signature: str, others: Sequence[str] = (),
                        load: Callable[[Path], Any] | None = None) -> Any:
    """The float `ov.Model` of the SavedModel's `signature`, its ports named as that signature names its inputs
    and outputs and the signature recorded in the model's order (`signature_info`); IRRefused when the model has
    other signatures (`others`: an IR holds one function), when OpenVINO's converter refuses, or when a name has
    no port. (The SavedModel optimize exported keeps the original's names, so those are the contract's.)
    `load`: the SavedModel as the TFLite conversions loaded it (`builder.optimize.loads.shared`), else loaded
    here."""
    from builder.model.openvino import RT_INFO, signature_info
    from builder.model.tensorflow import signature_spec
    from builder.optimize import tfenv
    from builder.optimize.causes import cause

    if others:
        raise IRRefused(f"OpenVINO's IR holds one function, and this model has {len(others) + 1} signatures "
                        f"({', '.join((signature, *others))}): an IR would lose {', '.join(others)}")
    ov = _ov()
    tf = tfenv.tensorflow()
    try:
        # held while converting: the function uses its variables
        loaded = load(saved_model) if load is not None else tf.saved_model.load(str(saved_model))
        function = loaded.signatures[signature]
        spec = signature_spec(signature, function)
        with _quiet():  # weights copied: by default the model would point into TensorFlow's variables, freed below
            model = ov.convert_model(function, share_weights=False)
        del function, loaded
    except Exception as error:  # noqa: BLE001 - the converter's own words, one line; the rest to a log
        raise IRRefused(f"OpenVINO's converter refused the model: {cause(error)}", _text(error)) from None
    inputs, outputs = [t.name for t in spec.inputs], [t.name for t in spec.outputs]
    _name_ports(model.inputs, inputs, "input")
    _name_ports(model.outputs, outputs, "output")
    for key, value in signature_info(signature, inputs, outputs).items():
        model.set_rt_info(value, [RT_INFO, key])
    return model


def _name_ports(ports: Any, names: list[str], what: str) -> None:
    """Each port named exactly as the contract names its tensor (the converter adds names of its own, e.g.
    `serving_default_x:0`); IRRefused when a contract name has no port, or ports and names differ in number."""
    by_name = {}
    for port in ports:
        for name in port.get_names():
            by_name.setdefault(name, port)
    missing = [name for name in names if name not in by_name]
    if missing or len(ports) != len(names):
        found = sorted(by_name)
        raise IRRefused(f"OpenVINO's converter did not keep the {what} names {', '.join(missing) or names} "
                        f"(its ports: {', '.join(found) or 'unnamed'})")
    for name in names:
        by_name[name].get_tensor().set_names({name})


def quantize_int8(model: Any, calibration: Mapping[str, np.ndarray], rows: int = NNCF_MAX_ROWS) -> Any:
    """NNCF's post-training int8 of the float IR on up to `rows` calibration rows (arrays by input name, in
    their own dtypes: token ids stay integers); the IR keeps its names and recorded signature. IRRefused when
    NNCF refuses or there are no rows."""
    from builder.optimize.causes import cause

    names = [port.get_any_name() for port in model.inputs]
    missing = [name for name in names if name not in calibration]
    count = min((len(calibration[n]) for n in names if n in calibration), default=0)
    if missing or count == 0:
        raise IRRefused(f"no calibration rows for input(s) {', '.join(missing) or ', '.join(names)}: NNCF needs "
                        "them to set int8 ranges (DATA's x_calib or x_train)")
    items = [{name: np.ascontiguousarray(np.asarray(calibration[name])[i : i + 1]) for name in names}
             for i in range(min(count, rows))]
    try:
        import nncf

        nncf.set_log_level(logging.ERROR)
        with _quiet():
            return nncf.quantize(model, nncf.Dataset(items), subset_size=len(items))
    except ImportError:
        raise IRRefused("the int8 IR needs the nncf package (pip install 'tfsmith[bench]')") from None
    except Exception as error:  # noqa: BLE001 - NNCF's own words, one line; the rest to a log
        raise IRRefused(f"NNCF could not quantize the model: {cause(error)}", _text(error)) from None


def convert_to_file(saved_model: Path, signature: str, others: Sequence[str], xml: Path) -> Path:
    """The float IR of the SavedModel written as `xml` (`convert_saved_model`, then `write_ir`): what the
    conversion in a process of its own runs (`builder.optimize.isolated`)."""
    return write_ir(convert_saved_model(saved_model, signature, others), xml)


def quantize_file(float_xml: Path, calibration: Mapping[str, np.ndarray], rows: int, xml: Path) -> Path:
    """NNCF's int8 of the float IR read from `float_xml`, written as `xml` (`quantize_int8`, then `write_ir`)."""
    return write_ir(quantize_int8(read_ir(float_xml), calibration, rows), xml)


def read_ir(xml: Path) -> Any:
    """An IR written by `write_ir`, as an `ov.Model` (its names and recorded signature kept)."""
    return _ov().Core().read_model(str(xml))


def write_ir(model: Any, xml: Path) -> Path:
    """`model` as `xml` and its `.bin` beside it, float32 weights kept (never compressed to float16). Written
    in place: callers write into a staging folder (optimize's --out, bench's work folder)."""
    xml.parent.mkdir(parents=True, exist_ok=True)
    _ov().save_model(model, str(xml), compress_to_fp16=False)
    return xml


@contextlib.contextmanager
def _quiet() -> Any:
    """The converter's and NNCF's progress output kept off the user's terminal (their errors still raise)."""
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        yield


def _text(error: BaseException) -> str:
    import traceback

    return "".join(traceback.format_exception(type(error), error, error.__traceback__))
