"""One line per library error, its cause whole (builder/optimize/causes.py): pure text, recorded messages."""

from __future__ import annotations

from pathlib import Path

from builder.optimize.causes import cause, keep_log, log_text, logged

# What TensorFlow 2.21's converter raised for a Keras 3 GRU (ConverterError's text, trimmed to its first lines).
GRU = ("<unknown>:0: error: loc(callsite(fused[\"TensorListReserve:\", \"functional_1/gru_1/TensorArrayV2_1@"
       "__inference___call___2443\"] at callsite(fused[\"StatefulPartitionedCall:\", \"StatefulPartitionedCall@"
       "__inference_signature_wrapper___call___2474\"] at fused[\"StatefulPartitionedCall:\", "
       "\"StatefulPartitionedCall_1\"]))): 'tf.TensorListReserve' op requires element_shape to be static during TF "
       "Lite transformation pass\n<unknown>:0: note: loc(callsite(fused[\"StatefulPartitionedCall:\", \"x\"] at "
       "fused[\"y\", \"z\"])): called from\n<unknown>:0: error: Lowering tensor list ops is failed. Please consider "
       "using Select TF ops and disabling `_experimental_lower_tensor_list_ops` flag in the TFLite converter object.")
# ... for a TextVectorization model: the first line starts with the converter's own summary.
TEXT = ("Could not translate MLIR to FlatBuffer.<unknown>:0: error: loc(callsite(fused[\"StringLower:\", "
        "\"functional_1/text_vectorization_1/StringLower@__inference_serve_1255\"] at fused[\"a\", \"b\"])): "
        "'tf.StringLower' op is neither a custom op nor a flex op\n<unknown>:0: note: called")
# What Keras 3.15 raised loading a .keras file whose custom layer's module was not imported.
KERAS = ("<class 'keras.src.models.functional.Functional'> could not be deserialized properly. Please ensure that "
         "components that are Python object instances (layers, models, etc.) returned by `get_config()` are "
         "explicitly deserialized in the model's `from_config()` method.\n\nconfig={'module': "
         "'keras.src.models.functional', 'class_name': 'Functional'}.\n\nException encountered: Could not locate "
         "class 'Doubler'. Make sure custom classes and functions are decorated with "
         "`@keras.saving.register_keras_serializable()`. If they are already decorated, make sure they are all "
         "imported so that the decorator is run before trying to load them. Full object config: {'module': "
         "'mylayers', 'class_name': 'Doubler', 'config': {'name': 'doubler'}}")


def test_a_converter_error_is_its_first_diagnostic_whole_without_the_location() -> None:
    assert cause(GRU) == ("'tf.TensorListReserve' op requires element_shape to be static during TF Lite "
                          "transformation pass")
    assert cause(TEXT) == "'tf.StringLower' op is neither a custom op nor a flex op"


def test_a_keras_load_error_is_its_inner_cause_without_the_config_dump() -> None:
    said = cause(KERAS)
    assert said.startswith("Could not locate class 'Doubler'. Make sure custom classes")
    assert said.endswith("before trying to load them.") and "Full object config" not in said


def test_other_errors_are_their_first_line_whole() -> None:
    long_line = "word " * 100 + "end"
    assert cause(ValueError(f"\n  {long_line}\nsecond line")) == long_line  # never cut
    assert cause(RuntimeError("")) == "RuntimeError"


def test_the_whole_text_goes_to_a_log_the_message_names(tmp_path: Path) -> None:
    path = keep_log("convert-fp32", log_text(GRU, "TFLite fp32 conversion"), tmp_path)
    assert path == tmp_path / "logs" / "convert-fp32.log"
    assert GRU in path.read_text() and path.read_text().startswith("TFLite fp32 conversion")
    try:
        raise ValueError(KERAS)
    except ValueError as error:
        line = logged("load-model", error)
    temp = Path(line.split("(full text: ", 1)[1].rstrip(")"))
    assert line.startswith("Could not locate class 'Doubler'.") and "\n" not in line
    assert "Traceback" in temp.read_text() and "Full object config" in temp.read_text()


def test_an_openvino_error_is_its_reason_not_its_source_locations() -> None:
    text = ("Exception from src/inference/src/cpp/core.cpp:95:\n"
            "Exception from src/frontends/tensorflow_lite/src/frontend.cpp:130:\n"
            "FrontEnd API failed with OpConversionFailure:\n"
            "Model wasn't fully converted. Failed operations detailed log:\n-- DENSIFY with a message:\n")
    said = cause(RuntimeError(text))
    assert said == ("FrontEnd API failed with OpConversionFailure: Model wasn't fully converted. Failed operations "
                    "detailed log: -- DENSIFY with a message:")
    check = "Check 'shape.rank().is_static()' failed at src/core/shape_util.cpp:65:\nrank of input must be static\n"
    assert cause(check) == "rank of input must be static"
