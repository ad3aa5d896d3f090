"""The files `tfsmith optimize --out` writes, by artifact format, and the order rules fall back in."""

from __future__ import annotations



from builder.model.registry import IR_FORMATS
from builder.report import SAMPLES_NPZ

__all__ = ["FILE_NAMES", "IR_FORMATS", "RULE_ORDER", "SAMPLES_NAME", "SAMPLE_ROWS", "TF", "TF_FORMATS", "XLA_SIGNATURE",
           "evaluated_on"]

SAMPLES_NAME = SAMPLES_NPZ
SAMPLE_ROWS = 32
FILE_NAMES = {
    "saved_model": "saved_model",
    "tflite_fp32": "model_fp32.tflite",
    "tflite_dynamic": "model_dynamic.tflite",
    "tflite_float16": "model_float16.tflite",
    "tflite_int8": "model_int8.tflite",
    "tflite_qat_int8": "model_qat_int8.tflite",
    "tflite_original": "model.tflite",
    "tflite_select_tf": "model_select_tf.tflite",
    # OpenVINO's IR: the .xml graph named here, its .bin weights beside it (same stem)
    "openvino_ir_fp32": "openvino_fp32.xml",
    "openvino_ir_int8": "openvino_int8.xml",
}

#: formats that TensorFlow itself serves (a SavedModel; a .tflite with Select TF ops on TensorFlow's interpreter)
TF_FORMATS = ("saved_model", "tflite_select_tf")
TF = "tensorflow"
XLA_SIGNATURE = "serving_xla"
#: rule order when nothing was measured (int8 first: 4x smaller; the recipe's own choice goes first anyway)
RULE_ORDER = ("tflite_qat_int8", "tflite_int8", "tflite_dynamic", "tflite_fp32", "tflite_float16", "tflite_original")


def evaluated_on(format: str) -> str:
    """The runtime an artifact is evaluated on (its table row): TensorFlow for what only TensorFlow runs,
    OpenVINO at f32 for its IR (int8 where the file is), LiteRT for every other .tflite."""
    from builder.model import registry

    if format in TF_FORMATS:
        return TF
    return registry.IR_DEFAULT if registry.is_ir(format) else registry.TFLITE_DEFAULT
