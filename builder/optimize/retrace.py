"""A second conversion for a SavedModel whose traced graph lost static dimensions that its signature declares.

Why: Keras 3's `UpSampling2D` (and other layers that compute a shape from `tf.shape`) leaves height, width and
even channels unknown in the saved graph (`tensor<?x?x16x32xf32>`), and TFLite has no builtin `Conv2D` for an
input of unknown channels: the conversion fails although only the batch is really dynamic. Here the signature's
function is traced again with every input's declared dimensions (all but the batch, which stays dynamic), its
variables frozen, and TensorFlow's graph optimizer (constant folding and shape optimization) folds the shape
arithmetic, so every tensor after it has its static shape. Measured on a conditional GAN generator (Embedding x
latent, Dense, Reshape, 2x UpSampling2D + Conv2D): the first conversion fails, this one converts fp32, dynamic
range and int8, and the file answers batch 5 on LiteRT within 1e-6 of the SavedModel. A trace at batch 1
converts too, but LiteRT cannot resize it (XNNPACK "failed to reshape": the batch is folded into Reshape's
constants), so the batch is kept dynamic.

The folded graph converts only through the converter's GraphDef path (the SavedModel path traces the shape
arithmetic again, unfolded), which writes no SignatureDef; `add_signature` writes the original's signature
back (its key, input and output names), so the file keeps the contract like every other .tflite.
Everything is read from the SavedModel folder and the arguments: a conversion may run in a process of its own.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from builder.optimize import tfenv

#: The note for the ledger when a file was converted from the re-traced graph.
NOTE = ("{mode}: converted from the model traced with its signature's static shapes (every dimension but the "
        "batch fixed as the contract declares it): the saved graph had lost them ({cause})")


def lost_static_dimensions(converter_text: str) -> bool:
    """Whether the converter's own words show a tensor with an unknown dimension past the first
    (`tensor<?x?x16x32xf32>`): only then can a trace with the declared shapes help; any other failure (string
    ops, tensor lists) stands without a second try (it would cost a load and a freeze of the weights)."""
    for body in re.findall(r"tensor<([^<>]*)>", converter_text):
        dims = body.split("x")[:-1]  # the last part is the element type
        if len(dims) > 1 and "?" in dims[1:]:
            return True
    return False


def static_specs(shapes: Mapping[str, tuple[int, ...]], names: list[str]) -> dict[str, list[int | None]] | None:
    """Each input's trace shape: the batch (first dimension) left open, every other as declared; None when an
    input leaves a dimension past the batch unknown (nothing more is known than the saved graph knew)."""
    out: dict[str, list[int | None]] = {}
    for name in names:
        shape = shapes.get(name)
        if shape is None or any(d < 0 for d in shape[1:]):
            return None
        out[name] = [None, *shape[1:]] if shape else []
    return out


def _folded(tf: Any, function: Any) -> tuple[Any, list[tuple[str, list[int]]], list[str]]:
    """The frozen function's graph after constant folding and shape optimization: (GraphDef, its inputs as
    (placeholder, shape with -1 for the batch), its output tensors' node names)."""
    from tensorflow.core.protobuf import config_pb2  # type: ignore[import-not-found]
    from tensorflow.python.framework import convert_to_constants  # type: ignore[import-not-found]
    from tensorflow.python.grappler import tf_optimizer  # type: ignore[import-not-found]

    frozen = convert_to_constants.convert_variables_to_constants_v2(function)
    meta = tf.compat.v1.train.export_meta_graph(graph_def=frozen.graph.as_graph_def(), graph=frozen.graph)
    meta.collection_def["train_op"].node_list.value.extend([t.name for t in frozen.outputs])
    config = config_pb2.ConfigProto()
    rewrite = config.graph_options.rewrite_options
    rewrite.optimizers.extend(["constfold", "shape", "constfold"])
    rewrite.meta_optimizer_iterations = 2
    graph_def = tf_optimizer.OptimizeGraph(config, meta)
    inputs = [(t.name.split(":")[0], [-1 if d is None else int(d) for d in t.shape.as_list()]) for t in frozen.inputs]
    return graph_def, inputs, [t.name.split(":")[0] for t in frozen.outputs]


def declared_inputs(saved_model_dir: Path, key: str) -> list[str]:
    """The signature's input names, read from saved_model.pb without loading the model."""
    from builder.optimize.model_io import declared_signatures

    signatures = declared_signatures(saved_model_dir)
    return list(signatures[key].inputs) if key in signatures else []


def converter(saved_model_dir: Path, key: str, shapes: Mapping[str, tuple[int, ...]]
              ) -> tuple[Any, list[tuple[str, str]], list[str]] | None:
    """(a converter of the folded re-trace, its inputs as (tensor name in the file, the signature's name), its
    output names in the file's order), or None when the signature leaves a non-batch dimension unknown."""
    tf = tfenv.tensorflow()
    if static_specs(shapes, declared_inputs(saved_model_dir, key)) is None:  # before any load
        return None
    loaded = tf.saved_model.load(str(saved_model_dir))
    function = loaded.signatures[key]
    _, declared = function.structured_input_signature
    specs = static_specs(shapes, list(declared))
    if specs is None:
        return None
    fixed = {name: tf.TensorSpec(specs[name], spec.dtype, name=name) for name, spec in declared.items()}
    traced = tf.function(lambda **kw: function(**kw)).get_concrete_function(**fixed)
    graph_def, placeholders, tensors = _folded(tf, traced)
    # TensorFlow flattens a dict in the order of its keys: the placeholders are the inputs by sorted name, and
    # the outputs likewise
    inputs = [(placeholder, name) for (placeholder, _), name in zip(placeholders, sorted(declared))]
    outputs = sorted(function.structured_outputs)
    # the graph's own converter: 1.6 s and 1.7 GB peak on a 9.6M-parameter generator, where a function pruned
    # from the imported graph took 16 s and 2.5 GB (it imports, freezes and optimizes the graph again)
    made = tf.compat.v1.lite.TFLiteConverter(graph_def, None, None, input_arrays_with_shape=placeholders,
                                             output_arrays=tensors)
    return made, inputs, outputs


def ordered_rows(rows: Callable[[], Iterator[Any]], inputs: list[str]) -> Callable[[], Iterator[list[Any]]]:
    """Calibration rows as the graph path takes them: a list in the graph's input order (`inputs`: the
    signature's names in that order; dict rows are by those names)."""
    def each() -> Iterator[list[Any]]:
        for row in rows():
            yield [row[name] for name in inputs] if isinstance(row, Mapping) else list(row)
    return each


def add_signature(blob: bytes, key: str, inputs: list[tuple[str, str]], outputs: list[str]) -> bytes:
    """The file with one SignatureDef `key` over its first subgraph: each input found by its tensor's name in
    the file and named as the original names it (`inputs`: (tensor name, signature name) in the graph's order,
    which is the subgraph's when names do not match), outputs named in the subgraph's order; a file that has
    signatures already is returned as it is."""
    from tensorflow.lite.python import schema_py_generated as schema  # type: ignore[import-not-found]
    from tensorflow.lite.tools import flatbuffer_utils  # type: ignore[import-not-found]

    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(blob))
    if model.signatureDefs:
        return blob
    subgraph = model.subgraphs[0]
    if len(subgraph.inputs) != len(inputs) or len(subgraph.outputs) != len(outputs):
        raise ValueError(f"the re-traced file has {len(subgraph.inputs)} inputs and {len(subgraph.outputs)} "
                         f"outputs, the signature {len(inputs)} and {len(outputs)}")
    signature = schema.SignatureDefT()
    signature.signatureKey = key
    signature.subgraphIndex = 0
    signature.inputs, signature.outputs = [], []
    def tensor_name(index: int) -> str:
        name = subgraph.tensors[index].name
        return name.decode() if isinstance(name, bytes) else str(name)

    by_name = {tensor_name(i): int(i) for i in subgraph.inputs}
    tensors = [tensor for tensor, _ in inputs]
    in_order = [by_name[t] for t in tensors] if set(by_name) == set(tensors) else list(subgraph.inputs)
    for names, indices, into in (([name for _, name in inputs], in_order, signature.inputs),
                                 (outputs, subgraph.outputs, signature.outputs)):
        for name, index in zip(names, indices):
            tensor_map = schema.TensorMapT()
            tensor_map.name = name
            tensor_map.tensorIndex = int(index)
            into.append(tensor_map)
    model.signatureDefs = [signature]
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))
