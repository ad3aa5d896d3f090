"""OpenVINO as a runtime: its own IR (`.xml` + `.bin`, what `tfsmith optimize` converts from the SavedModel, float
or NNCF int8), or the same .tflite LiteRT serves, at the precision the registry entry names.

OpenVINO was measured faster than LiteRT on larger CNNs (an int8 ResNet50 at 2 threads: 9.2 vs 14.0 ms on a
Xeon, 29.6 vs 51.8 ms on an AMD EPYC), and its inference precision matters as much: bf16 ran ResNet50 4.0x
faster than f32 on a Xeon with AMX, and MobileNetV2 1.5x slower than f32 on an AMD EPYC with AVX512-BF16 and no
AMX. So `openvino` (f32; int8 where the file is int8) and `openvino-bf16` are candidates that optimize times on
the host; nothing here decides between them, and nothing here quantizes: an int8 model is a file the quality
gate judged (`openvino_int8.xml`), never one made when a server starts.

Shapes: a model compiled for a dynamic batch runs every shape, but slower than one compiled for the shape it
gets: MobileNetV2 on an AMD EPYC (2 threads, batch 1) ran 6.4 ms dynamic against 5.1 ms static at f32, 3.6
against 3.2 ms at bf16. Compiling per new shape on first sight costs ~75 ms (MobileNetV2) to a few hundred
(ResNet50): a stall for the request that meets it. So each backend compiles two at load, when the batch is
open and every other dimension fixed: the batch-1 shape (a request alone: the latency path) and the dynamic
model for every other shape (the batches a batcher forms, whose first call at a new size costs ~10-20 ms, not
a compile). Anything with an open length compiles dynamic only.

Each call binds the caller's arrays to the request without a copy and runs `start_async()` + `wait()`:
`infer(inputs)` also builds a dict of copied outputs on every call, and measured ~4% slower on MobileNetV2
(bf16, 2 threads, AMD EPYC; 4.12 against 3.93 ms in one interleaved minute on a busy host).

The IR carries its serving signature in its runtime info (`rt_info["tfsmith"]`: the signature key and the
names of its inputs and outputs in the model's order), so reading it back needs neither TensorFlow nor LiteRT;
an IR made elsewhere is served under `serving_default` with OpenVINO's own tensor names and order.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from builder.errors import InputError
from builder.model.backend import Backend, _litert_signatures, _open_litert, litert_subgraphs
from builder.model.failures import ModelInputError, clean_message
from builder.model.rows import contiguous
from builder.model.signature import DEFAULT_SIGNATURE, SignatureSpec, TensorSpec

#: Where the IR keeps its serving signature (`ov.Model.get_rt_info([RT_INFO, key])`).
RT_INFO = "tfsmith"
#: Output ports are addressed as ("out", k) beside input positions (ints).
Position = Any


def import_openvino(runtime: str = "openvino") -> Any:
    """The openvino module; InputError in one line when it is not installed."""
    try:
        import openvino as ov
    except ImportError:
        raise InputError(f"runtime {runtime} needs the openvino package (pip install 'tfsmith[bench]')") from None
    return ov


class OpenVINOBackend(Backend):
    """OpenVINO at an explicit inference precision (never OpenVINO's own default, which differs from CPU to CPU:
    the candidate's name says what it computes in), compiled at the shapes it is called with (module
    docstring). Subclasses say how the file is read (`_open`)."""

    runtime = "openvino"

    def __init__(self, model_path: Path, threads: int = 1, precision: str = "f32", runtime: str = "") -> None:
        self.runtime = runtime or self.runtime
        ov = import_openvino(self.runtime)
        self._tensor = ov.Tensor
        core = ov.Core()
        model, self.signatures, self._positions = self._open(ov, core, model_path)
        config = {"INFERENCE_PRECISION_HINT": precision, "INFERENCE_NUM_THREADS": str(threads), "NUM_STREAMS": "1"}
        try:
            dynamic = core.compile_model(model, "CPU", config)
            single = batch_one(model)
            static = core.compile_model(single[0], "CPU", config) if single is not None else None
        except RuntimeError as error:
            raise InputError(f"{model_path}: OpenVINO cannot compile this model: {_first(error)}") from None
        self._requests: dict[tuple[tuple[int, ...], ...] | None, Any] = {None: dynamic.create_infer_request()}
        if static is not None and single is not None:
            self._requests[single[1]] = static.create_infer_request()

    def _open(self, ov: Any, core: Any, model_path: Path) -> tuple[Any, dict[str, SignatureSpec],
                                                                    dict[str, dict[str, Position]]]:
        """(the OpenVINO model, its signatures, per signature each name's input index or ("out", k))."""
        raise NotImplementedError

    def _invoke(self, signature: SignatureSpec, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        pos = self._positions[signature.name]
        feed = {pos[name]: contiguous(value) for name, value in inputs.items()}
        shapes = tuple(feed[i].shape for i in sorted(feed))
        request = self._requests.get(shapes) or self._requests[None]
        try:
            for index, value in feed.items():  # the caller's arrays wrapped, not copied (alive until wait() returns);
                # a read-only one (gRPC's tensor_content, read in place) is copied: OpenVINO shares writable memory only
                request.set_input_tensor(index, self._tensor(value, shared_memory=bool(value.flags.writeable)))
            request.start_async()  # with wait(): no dict of copied outputs built per call, as infer() does
            request.wait()
        except RuntimeError as error:  # a kernel refusing these values or shapes: the request's, said in one line
            raise ModelInputError(clean_message(_first(error))) from None
        result: dict[str, np.ndarray] = {}
        for spec in signature.outputs:
            _, k = pos[spec.name]
            result[spec.name] = np.array(request.get_output_tensor(k).data, dtype=spec.dtype, copy=True)
        return result


def batch_one(model: Any) -> tuple[Any, tuple[tuple[int, ...], ...]] | None:
    """(a copy of `model` reshaped to batch 1, its input shapes in input order) when the batch is the only
    open dimension of every input; None otherwise (a fixed batch is static already; an open length is not)."""
    shapes = []
    for port in model.inputs:
        shape = port.get_partial_shape()
        if shape.rank.is_dynamic or len(shape) == 0 or not shape[0].is_dynamic:
            return None
        rest = [shape[i] for i in range(1, len(shape))]
        if any(d.is_dynamic for d in rest):
            return None
        shapes.append((1, *(d.get_length() for d in rest)))
    copy = model.clone()
    copy.reshape({copy.inputs[i]: list(s) for i, s in enumerate(shapes)})
    return copy, tuple(shapes)


def _first(error: BaseException) -> str:
    """OpenVINO's reason without its source-location lines (`builder.model.backend.cause` keeps the rest)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip() and not line.strip().startswith(
        ("Exception from src", "Check '", "[ GENERAL_ERROR ]"))]
    return lines[0] if lines else type(error).__name__


# --- OpenVINO's IR ---------------------------------------------------------------------------------------


class OpenVINOIRBackend(OpenVINOBackend):
    """OpenVINO's own IR, the file optimize converted from the SavedModel (float, or int8 by NNCF)."""

    platform = "openvino"  # the Open Inference Protocol's name for an OpenVINO IR model (Triton's too)

    def _open(self, ov: Any, core: Any, model_path: Path) -> tuple[Any, dict[str, SignatureSpec],
                                                                    dict[str, dict[str, Position]]]:
        try:
            model = core.read_model(str(model_path))
        except RuntimeError as error:
            raise InputError(f"{model_path}: not a loadable OpenVINO IR ({_first(error)})") from None
        signature, positions = ir_signature(model)
        return model, {signature.name: signature}, {signature.name: positions}


def ir_signature(model: Any) -> tuple[SignatureSpec, dict[str, Position]]:
    """The serving signature an IR carries (its rt_info, written by `signature_info`), or, for an IR made
    elsewhere, `serving_default` over OpenVINO's own names and order; with each name's port."""
    recorded = _rt_info(model)
    inputs = _ports(model.inputs, recorded.get("inputs"))
    outputs = _ports(model.outputs, recorded.get("outputs"))
    key = recorded.get("signature") or DEFAULT_SIGNATURE
    signature = SignatureSpec(key, tuple(_tensor(name, port) for name, (_, port) in inputs.items()),
                              tuple(_tensor(name, port) for name, (_, port) in outputs.items()))
    positions: dict[str, Position] = {name: i for name, (i, _) in inputs.items()}
    positions.update({name: ("out", k) for name, (k, _) in outputs.items()})
    return signature, positions


def signature_info(signature: str, inputs: list[str], outputs: list[str]) -> dict[str, str]:
    """What an IR records of its serving signature (`model.set_rt_info(value, [RT_INFO, key])` each): the
    signature key and the input and output names in the model's order, comma-separated."""
    for name in (*inputs, *outputs):
        if "," in name:
            raise InputError(f"tensor name {name!r} has a comma: the IR cannot record it")
    return {"signature": signature, "inputs": ",".join(inputs), "outputs": ",".join(outputs)}


def _rt_info(model: Any) -> dict[str, str]:
    found = {}
    for key in ("signature", "inputs", "outputs"):
        if model.has_rt_info([RT_INFO, key]):
            found[key] = str(model.get_rt_info([RT_INFO, key]).astype(str))
    return found


def _ports(ports: Any, order: str | None) -> dict[str, tuple[int, Any]]:
    """name -> (index, port), in the recorded order when there is one (each recorded name must be a port's)."""
    own = {_port_name(port, i): (i, port) for i, port in enumerate(ports)}
    if not order:
        return own
    by_name = {name: (i, port) for i, port in enumerate(ports) for name in port.get_names()}
    missing = [name for name in order.split(",") if name not in by_name]
    if missing:
        raise InputError(f"the IR records tensors it does not have: {', '.join(missing)}")
    return {name: by_name[name] for name in order.split(",")}


def _port_name(port: Any, index: int) -> str:
    """A port's name (the first of its tensor names, sorted), or its position for an unnamed one."""
    names = sorted(port.get_names())
    return names[0] if names else f"output_{index}"


def _tensor(name: str, port: Any) -> TensorSpec:
    shape = port.get_partial_shape()
    if shape.rank.is_dynamic:
        raise InputError(f"tensor {name!r} has an unknown rank in the IR; the server needs at least the rank")
    dims = tuple(None if shape[i].is_dynamic else int(shape[i].get_length()) for i in range(len(shape)))
    return TensorSpec(name=name, dtype=np.dtype(port.get_element_type().to_dtype()).name, shape=dims)


# --- a .tflite on OpenVINO -------------------------------------------------------------------------------


class OpenVINOTFLiteBackend(OpenVINOBackend):
    """OpenVINO reading the same .tflite LiteRT serves; names and order come from LiteRT, so every runtime
    exposes the identical signature."""

    def _open(self, ov: Any, core: Any, model_path: Path) -> tuple[Any, dict[str, SignatureSpec],
                                                                    dict[str, dict[str, Position]]]:
        from ai_edge_litert.interpreter import Interpreter

        probe = _open_litert(model_path, 1, Interpreter)
        signatures, indices = _litert_signatures(probe)
        # OpenVINO reads a .tflite's first subgraph only: the signatures converted into other subgraphs (a
        # SavedModel's `embed` beside its `serving_default`) are not served here rather than answered wrongly.
        first = {key for key, subgraph in litert_subgraphs(probe, signatures).items() if subgraph == 0}
        signatures = {key: spec for key, spec in signatures.items() if key in first}
        indices = {key: found for key, found in indices.items() if key in first}
        graph_inputs = [int(d["index"]) for d in probe.get_input_details()]  # type: ignore[attr-defined]
        graph_outputs = [int(d["index"]) for d in probe.get_output_details()]  # type: ignore[attr-defined]
        del probe
        model = core.read_model(str(model_path))
        dynamic = _dynamic_shapes(signatures, indices, graph_inputs)
        if dynamic:  # every dimension the signature leaves open (batch, lengths) stays open in OpenVINO too
            model.reshape({model.inputs[i]: ov.PartialShape(shape) for i, shape in dynamic.items()})
        positions = {
            key: {
                **{n: graph_inputs.index(i) for n, i in idx.items() if i in graph_inputs},
                **{n: ("out", graph_outputs.index(i)) for n, i in idx.items() if i in graph_outputs},
            }
            for key, idx in indices.items()
        }
        return model, signatures, positions


def _dynamic_shapes(signatures: Mapping[str, SignatureSpec], indices: Mapping[str, Mapping[str, int]],
                    graph_inputs: list[int]) -> dict[int, list[int]]:
    """Graph input position -> its shape with -1 for each dimension some signature leaves open, for the inputs
    that have one. (The .tflite stores a placeholder size there, often 1, which OpenVINO would otherwise fix.)"""
    shapes: dict[int, list[int]] = {}
    for key, signature in signatures.items():
        for spec in signature.inputs:
            index = indices[key].get(spec.name)
            if index in graph_inputs and any(d is None for d in spec.shape):
                shapes[graph_inputs.index(index)] = [-1 if d is None else int(d) for d in spec.shape]
    return shapes
