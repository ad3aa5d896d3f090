"""OpenVINO as a runtime: it reads the same .tflite LiteRT serves, at the precision its registry entry names.

OpenVINO was measured faster than LiteRT on larger CNNs (an int8 ResNet50 at 2 threads: 9.2 vs 14.0 ms on a
Xeon, 29.6 vs 51.8 ms on an AMD EPYC), and its inference precision matters as much: bf16 ran ResNet50 4.0x
faster than f32 on a Xeon with AMX, and MobileNetV2 1.5x slower than f32 on an AMD EPYC with AVX512-BF16 and no
AMX. So `openvino` (f32) and `openvino-bf16` are two candidates that optimize times on the host; nothing here
decides between them. `openvino-nncf` quantizes the float .tflite to int8 with NNCF at start, calibrated on
the folder's samples.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from builder.errors import InputError
from builder.model.backend import Backend, _litert_signatures, _open_litert, litert_subgraphs
from builder.model.signature import SignatureSpec


class OpenVINOBackend(Backend):
    """OpenVINO reading the same .tflite, at an explicit inference precision (never OpenVINO's own default,
    which differs from CPU to CPU: the candidate's name says what it computes in)."""

    runtime = "openvino"

    def __init__(self, model_path: Path, threads: int = 1, precision: str = "f32", runtime: str = "") -> None:
        self.runtime = runtime or self.runtime
        ov = _import_openvino(self.runtime)
        from ai_edge_litert.interpreter import Interpreter

        # Names and order come from LiteRT so every runtime exposes the identical signature.
        probe = _open_litert(model_path, 1, Interpreter)
        self.signatures, indices = _litert_signatures(probe)
        # OpenVINO reads a .tflite's first subgraph only: the signatures converted into other subgraphs (a
        # SavedModel's `embed` beside its `serving_default`) are not served here rather than answered wrongly.
        first = {key for key, subgraph in litert_subgraphs(probe, self.signatures).items() if subgraph == 0}
        self.signatures = {key: spec for key, spec in self.signatures.items() if key in first}
        indices = {key: found for key, found in indices.items() if key in first}
        graph_inputs = [int(d["index"]) for d in probe.get_input_details()]  # type: ignore[attr-defined]
        graph_outputs = [int(d["index"]) for d in probe.get_output_details()]  # type: ignore[attr-defined]
        del probe
        core = ov.Core()  # type: ignore[attr-defined]
        model = self._read_model(core, model_path)
        dynamic = _dynamic_shapes(self.signatures, indices, graph_inputs)
        if dynamic:  # every dimension the signature leaves open (batch, lengths) stays open in OpenVINO too
            model.reshape({model.inputs[i]: ov.PartialShape(shape) for i, shape in dynamic.items()})  # type: ignore[attr-defined]
        config = {"INFERENCE_PRECISION_HINT": precision, "INFERENCE_NUM_THREADS": str(threads), "NUM_STREAMS": "1"}
        self._compiled = core.compile_model(model, "CPU", config)
        self._request = self._compiled.create_infer_request()
        self._positions = {
            key: {
                **{n: graph_inputs.index(i) for n, i in idx.items() if i in graph_inputs},
                **{n: ("out", graph_outputs.index(i)) for n, i in idx.items() if i in graph_outputs},
            }
            for key, idx in indices.items()
        }

    def _read_model(self, core: object, model_path: Path) -> object:
        """The OpenVINO model to compile, fresh (the caller reshapes it); openvino-nncf overrides this only."""
        return core.read_model(str(model_path))  # type: ignore[attr-defined]

    def _invoke(self, signature: SignatureSpec, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        pos = self._positions[signature.name]
        feed = {pos[name]: np.ascontiguousarray(value) for name, value in inputs.items()}
        self._request.infer(feed)
        result: dict[str, np.ndarray] = {}
        for spec in signature.outputs:
            _, k = pos[spec.name]
            result[spec.name] = np.array(self._request.get_output_tensor(k).data, dtype=spec.dtype, copy=True)
        return result


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


class OpenVINONNCFBackend(OpenVINOBackend):
    """OpenVINO reading the fp32 .tflite, quantized to int8 by NNCF at server start from calibration samples.

    bench measured this fastest for MobileNetV2 here (4.90 ms vs LiteRT int8 7.03 ms). The shipped artifact
    stays the fp32 .tflite plus its samples; the int8 graph exists only in OpenVINO's memory. Quantization runs
    once per process (cached), each worker compiles its own copy. Answers are int8-approximate: compare them
    with the fp32 model by agreement, not bit for bit (smoke.py does).
    """

    runtime = "openvino-nncf"

    def __init__(self, model_path: Path, threads: int = 1) -> None:
        self._samples_path = nncf_inputs(model_path)[1]
        super().__init__(model_path, threads, "f32", self.runtime)

    def _read_model(self, core: object, model_path: Path) -> object:
        quantized = _nncf_quantized(str(model_path), str(self._samples_path), _mtimes(model_path, self._samples_path))
        return quantized.clone()  # type: ignore[attr-defined]


#: Calibration samples NNCF uses at most (more barely moves int8 ranges and slows every server start).
NNCF_CALIBRATION_SAMPLES = 128
#: The float model in a `tfsmith optimize --out` folder (builder/optimize/__init__.py).
FP32_TFLITE = "model_fp32.tflite"


def _import_openvino(runtime: str) -> object:
    try:
        import openvino as ov
    except ImportError:
        raise InputError(f"runtime {runtime} needs the openvino package (pip install 'tfsmith[bench]')") from None
    return ov


def _mtimes(*paths: Path) -> tuple[float, ...]:
    return tuple(p.stat().st_mtime for p in paths)


@functools.lru_cache(maxsize=4)
def _nncf_quantized(model_path: str, samples_path: str, _stamp: tuple[float, ...]) -> object:
    """The fp32 .tflite read by OpenVINO and quantized by NNCF with up to NNCF_CALIBRATION_SAMPLES of `x`."""
    ov = _import_openvino("openvino-nncf")
    try:
        import nncf
    except ImportError:
        raise InputError("runtime openvino-nncf needs the nncf package (pip install 'tfsmith[bench]')") from None
    inputs = load_calibration(Path(samples_path))
    model = ov.Core().read_model(model_path)  # type: ignore[attr-defined]
    from ai_edge_litert.interpreter import Interpreter

    signature = next(iter(_litert_signatures(_open_litert(Path(model_path), 1, Interpreter))[0].values()))
    if len(signature.inputs) != 1:
        raise InputError(f"{model_path}: runtime openvino-nncf quantizes one-input models; this one has "
                         f"{len(signature.inputs)} inputs (serve it with litert or openvino)")
    spec = signature.inputs[0]
    if np.dtype(spec.dtype).kind != "f":
        raise InputError(f"{model_path}: runtime openvino-nncf needs a float input, not {spec.dtype}")
    x = inputs.get(spec.name)
    if x is None:
        raise InputError(f"{samples_path}: no samples for input {spec.name!r}")
    items = [x[i : i + 1].astype(spec.dtype) for i in range(min(len(x), NNCF_CALIBRATION_SAMPLES))]
    return nncf.quantize(model, nncf.Dataset(items), subset_size=len(items))


def load_calibration(samples_path: Path) -> dict[str, np.ndarray]:
    """The held-out inputs of an optimize samples file, by input name; InputError when it has none."""
    from builder.model.artifact import load_samples

    samples = load_samples(samples_path)
    if not samples.inputs or samples.rows == 0:
        raise InputError(f"{samples_path}: no calibration samples (`x/<input>`) for runtime openvino-nncf")
    return samples.inputs


def nncf_inputs(model_path: Path) -> tuple[Path, Path]:
    """(fp32 .tflite, calibration samples) for serving `model_path`'s folder with openvino-nncf.

    The fp32 model is `model_fp32.tflite` beside the chosen model (optimize's layout), else the model itself;
    the samples are the folder's report `samples` (default samples.npz). Without samples the backend is
    refused: NNCF without calibration would have to guess int8 ranges.
    """
    from builder.model.artifact import calibration_samples

    fp32 = model_path.parent / FP32_TFLITE
    source = fp32 if fp32.is_file() else model_path
    samples = calibration_samples(model_path)
    if samples is None:
        raise InputError(
            f"runtime openvino-nncf needs calibration samples (samples.npz, as `tfsmith optimize --out` "
            f"writes) beside {model_path}; none found"
        )
    return source, samples


