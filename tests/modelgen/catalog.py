"""What users build, as data: the layer families, Keras flavours, save formats, I/O forms, dtypes, precisions and
label kinds the generator composes models from.

Pure (no TensorFlow): the composer draws from these tables and the unit tests check them, so coverage is a fact
that can be read and asserted without building anything. A family names the constraints that make a model
valid (a QAT model is tf_keras only; a `tf.Module` is a SavedModel; segmentation needs a per-pixel head), so the
composer never has to discover an impossible combination by building it.
"""

from __future__ import annotations

from dataclasses import dataclass

KERAS3 = "keras3"  #: `import keras` (Keras 3)
TF_KERAS = "tf_keras"  #: Keras 2 (`tf_keras`), what tfmot needs
NO_KERAS = "tf"  #: plain TensorFlow (`tf.Module`)

#: save formats, named by what the user hands to `tfsmith optimize`
KERAS_FILE, H5, SAVED_MODEL, TFLITE = "keras", "h5", "saved_model", "tflite"
#: a user's own full-integer .tflite: uint8 (or int8) in, uint8 (or int8) scores out
TFLITE_UINT8, TFLITE_INT8 = "tflite_uint8", "tflite_int8"
FORMATS = (KERAS_FILE, H5, SAVED_MODEL, TFLITE, TFLITE_UINT8, TFLITE_INT8)
TFLITE_FORMATS = (TFLITE, TFLITE_UINT8, TFLITE_INT8)

#: how a model takes its inputs and gives its outputs
SINGLE, LIST, DICT = "single", "list", "dict"
IO_FORMS = (SINGLE, LIST, DICT)

#: heads (output tasks) and the labels DATA carries for them
CLASSIFICATION, BINARY, REGRESSION, SEGMENTATION = "classification", "binary", "regression", "segmentation"
TAGGING = "tagging"  #: a softmax per step (per token, per frame): (N, T, classes)
TASKS = (CLASSIFICATION, BINARY, REGRESSION, SEGMENTATION, TAGGING)
LABELS_FOR = {
    CLASSIFICATION: ("ids", "onehot", "none"),
    BINARY: ("ids", "none"),
    REGRESSION: ("targets", "none"),
    SEGMENTATION: ("pixel_ids", "pixel_onehot", "none"),
    TAGGING: ("step_ids", "step_onehot", "none"),
}

FLOAT32, MIXED = "float32", "mixed_float16"
#: mixed_float16 with the last layers left in the policy's float16 (Keras's guide says float32; users forget):
#: the model then answers float16
MIXED_HALF_OUT = "mixed_float16_half_out"

#: the dtype of a second input in list/dict forms (cast to float inside the model) and of the extra output
#: "scalar" is one float per row, rank 1: (N,)
AUX_INPUTS = ("float32", "bool", "int64", "uint8", "scalar")
#: a regression column (float32), a thresholded yes/no (bool), an argmax class id (integers: judged exactly) or one
#: float per row at rank 1, (N,); all but `score` are ops without a layer name, so only a dict key names them
AUX_OUTPUTS = ("score", "flag", "class_id", "rank1")


@dataclass(frozen=True)
class Family:
    """One kind of model body a user builds, and what it may be combined with.

    `modality` is the main input's kind (it decides the synthetic data), `layers` the Keras layers the body
    exercises (listed in the sweep's table and checked for coverage), `variants` the forms of the body
    (bidirectional, masking, stateful...). Every tuple is the full set the composer may draw from.
    """

    name: str
    modality: str
    layers: tuple[str, ...]
    kerases: tuple[str, ...] = (KERAS3, TF_KERAS)
    formats: tuple[str, ...] = (KERAS_FILE, H5, SAVED_MODEL, TFLITE)
    tasks: tuple[str, ...] = (CLASSIFICATION, BINARY, REGRESSION)
    variants: tuple[str, ...] = ("plain",)
    input_forms: tuple[str, ...] = IO_FORMS
    output_forms: tuple[str, ...] = IO_FORMS
    precisions: tuple[str, ...] = (FLOAT32, MIXED, MIXED_HALF_OUT)
    #: fixed-size batch: a stateful RNN is built for batches of exactly this many rows (None: any)
    fixed_batch: int | None = None
    #: the float dtype of the main input, the weights and the answers (a scientist's float64 network)
    dtypes: tuple[str, ...] = ("float32",)


#: any_length: the time axis is None (sequences of any length; DATA has one length)
_RNN_VARIANTS = ("plain", "bidirectional", "masking", "stateful", "any_length")
_SEQUENCE_TASKS = (CLASSIFICATION, BINARY, REGRESSION, TAGGING)

FAMILIES: tuple[Family, ...] = (
    Family("dense", "tabular", ("Dense", "Dropout")),
    Family("conv1d", "sequence", ("Conv1D", "GlobalMaxPooling1D"), tasks=(CLASSIFICATION, BINARY, REGRESSION, TAGGING)),
    Family("conv2d", "image", ("Conv2D", "MaxPooling2D", "Flatten"), variants=("float", "uint8")),
    Family("conv3d", "volume", ("Conv3D", "GlobalAveragePooling3D")),
    Family("conv2d_transpose", "image", ("Conv2D", "Conv2DTranspose"),
           tasks=(SEGMENTATION, CLASSIFICATION, REGRESSION), variants=("fixed_size", "any_size")),
    Family("depthwise_conv2d", "image", ("DepthwiseConv2D", "Conv2D", "GlobalAveragePooling2D")),
    Family("separable_conv2d", "image", ("SeparableConv2D", "GlobalAveragePooling2D")),
    Family("simple_rnn", "sequence", ("SimpleRNN", "Bidirectional", "Masking"), variants=_RNN_VARIANTS,
           tasks=_SEQUENCE_TASKS),
    Family("gru", "sequence", ("GRU", "Bidirectional", "Masking"), variants=_RNN_VARIANTS,
           tasks=_SEQUENCE_TASKS),
    Family("lstm", "sequence", ("LSTM", "Bidirectional", "Masking"), variants=_RNN_VARIANTS,
           tasks=_SEQUENCE_TASKS),
    Family("attention", "sequence", ("MultiHeadAttention", "LayerNormalization", "GlobalAveragePooling1D"),
           tasks=_SEQUENCE_TASKS),
    Family("embedding", "tokens", ("Embedding", "GlobalAveragePooling1D"), variants=("int32", "int64", "mask_zero", "any_length"),
           tasks=_SEQUENCE_TASKS),
    Family("preprocessing", "features", ("StringLookup", "IntegerLookup", "Normalization", "CategoryEncoding"),
           input_forms=(DICT,), precisions=(FLOAT32,), variants=("wide_deep", "string_only")),
    Family("augmentation", "image", ("RandomFlip", "RandomRotation", "RandomContrast", "Conv2D")),
    Family("time_distributed", "frames", ("TimeDistributed", "Conv2D", "GlobalAveragePooling2D"),
           variants=("conv", "dense")),
    Family("subclassed", "tabular", ("Model subclass", "Dense"), formats=(SAVED_MODEL,)),
    Family("tf_module", "tabular", ("tf.Module", "tf.function"), kerases=(NO_KERAS,), formats=(SAVED_MODEL,),
           variants=("one_signature", "signatures", "text"), input_forms=(SINGLE,), output_forms=(DICT,),
           precisions=(FLOAT32,), tasks=(CLASSIFICATION,), dtypes=("float32", "float64")),
    Family("user_tflite", "image", ("Conv2D", "TFLiteConverter"), formats=(TFLITE, TFLITE_UINT8, TFLITE_INT8),
           tasks=(CLASSIFICATION,), input_forms=(SINGLE,), output_forms=(SINGLE,), precisions=(FLOAT32,)),
    # QAT as .keras is left out: tf_keras cannot load its own file back, in quantize_scope or not ("Layer
    # 'quantize_layer' expected 5 variables, but received 3 variables during loading"), so no user has one that runs
    Family("qat", "image", ("tfmot.quantize_model", "Conv2D", "Dense"), kerases=(TF_KERAS,),
           formats=(H5, SAVED_MODEL), input_forms=(SINGLE,), output_forms=(SINGLE,),
           precisions=(FLOAT32,), tasks=(CLASSIFICATION, REGRESSION)),
)

FAMILY = {f.name: f for f in FAMILIES}

#: families the TFLite builtins cannot express (an RNN's tensor lists: "'tf.TensorListReserve' op requires
#: element_shape to be static"; seen with Keras 3 and tf_keras alike): a user has no plain .tflite of them, so
#: none is generated
NO_TFLITE = ("simple_rnn", "gru", "lstm")


@dataclass(frozen=True)
class ModelSpec:
    """One generated model: everything the builder needs, nothing it must guess. Its `id` is what `-k` takes.

    `aux_input` / `aux_output` are the second input / output of list and dict forms (`"none"` for single).
    `labels` says what DATA carries for the main head. `data_form` is DATA's layout: `single` (plain `x_val`,
    `y_val`) only for a one-input, one-output model, else `named` (`x_val/<input>`).
    """

    seed: int
    index: int
    family: str
    variant: str
    keras: str
    fmt: str
    inputs: str
    outputs: str
    task: str
    labels: str
    precision: str
    aux_input: str = "none"
    aux_output: str = "none"
    data_form: str = "named"
    #: a Keras model saved as a SavedModel with a second signature of its own (`scores`: the main head alone)
    signatures: int = 1
    #: the float dtype of the main input, weights and answers (`Family.dtypes`)
    dtype: str = "float32"

    @property
    def id(self) -> str:
        flavour = {KERAS3: "k3", TF_KERAS: "k2", NO_KERAS: "tf"}[self.keras]
        mixed = {MIXED: "-mixed", MIXED_HALF_OUT: "-mixed16out"}.get(self.precision, "")
        return (f"s{self.seed}-{self.index:03d}-{self.family}-{self.variant}-{flavour}-{self.fmt}-"
                f"{self.inputs}{'+' + self.aux_input if self.aux_input != 'none' else ''}-"
                f"{self.outputs}{'+' + self.aux_output if self.aux_output != 'none' else ''}-"
                f"{self.task}-{self.labels}{mixed}{'-sigs' + str(self.signatures) if self.signatures > 1 else ''}"
                f"{'-' + self.dtype if self.dtype != 'float32' else ''}")

    @property
    def fixed_batch(self) -> int | None:
        return FAMILY[self.family].fixed_batch or (1 if self.variant == "stateful" else None)

    def describe(self) -> str:
        """What the model is made of, one line (the sweep's table)."""
        family = FAMILY[self.family]
        parts = [f"{'+'.join(family.layers)} [{self.variant}]", f"{self.keras} .{self.fmt}",
                 f"in={self.inputs}" + (f"+{self.aux_input}" if self.aux_input != "none" else ""),
                 f"out={self.outputs}" + (f"+{self.aux_output}" if self.aux_output != "none" else ""),
                 f"{self.task}/{self.labels}"]
        if self.precision != FLOAT32:
            parts.append(self.precision)
        if self.signatures > 1:
            parts.append(f"{self.signatures} signatures")
        if self.dtype != "float32":
            parts.append(self.dtype)
        return ", ".join(parts)

    def as_dict(self) -> dict[str, object]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}
