"""The backend interface every runtime implements, and LiteRT's interpreter behind it (TensorFlow's own
interpreter, in `builder.model.tensorflow`, is the same class on another interpreter).

A backend is allocated at the shapes it is called with: a .tflite stores a placeholder size (often 1) for each
dimension of any size, and a Conv1D with a kernel of 5 cannot prepare at length 1, while the same file answers
exactly at the lengths it is really called with. So a model whose inputs have open dimensions is allocated at
its first call when its placeholder shapes do not prepare; only a failure at shapes that are the model's own
is a refusal at load.
"""

from __future__ import annotations

import gc
import os
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from builder.errors import InputError
from builder.model.signature import DEFAULT_SIGNATURE, SignatureSpec, TensorSpec

#: What LiteRT (and TensorFlow's interpreter without the Flex delegate) says for a Select-TF-ops model.
SELECT_OPS_MARKER = "Select TensorFlow op(s)"


def cause(error: BaseException, what: str) -> str:
    """The error's own first line, whole; when it has more, the whole text goes to a log file this names."""
    text = str(error).strip() or type(error).__name__
    first = text.splitlines()[0].strip()
    if "\n" not in text:
        return first
    handle, name = tempfile.mkstemp(prefix=f"tfsmith-serve-{what}-", suffix=".log")
    with os.fdopen(handle, "w") as log_file:
        log_file.write(text + "\n")
    return f"{first} (whole message in {name})"


def litert_refusal(model_path: Path, error: BaseException) -> str:
    """One line for a .tflite LiteRT cannot prepare: LiteRT's own first line, then what to do about it."""
    text = cause(error, "litert")
    if SELECT_OPS_MARKER in text:
        hint = "; it needs TensorFlow's kernels: use --runtime tensorflow"
    else:
        hint = ("; try --runtime openvino, or serve the SavedModel it was converted from with --runtime tensorflow")
    return f"{model_path}: LiteRT cannot run this model: {text}{hint}"


class Backend(ABC):
    """One model instance; NOT thread-safe: use it from one thread at a time (see BackendPool)."""

    runtime: str
    signatures: Mapping[str, SignatureSpec]
    #: what the Open Inference Protocol's model metadata calls the model's format, by runtime
    platform: str = ""

    @abstractmethod
    def _invoke(self, signature: SignatureSpec, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run one batch whose size the model accepts; returns arrays the caller may keep."""

    def predict(self, signature: str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run a batch; models with a fixed batch size take it one fixed-size slice at a time."""
        spec = self.signatures[signature]
        batch = next(iter(inputs.values())).shape[0]
        fixed = spec.inputs[0].shape[0] if spec.inputs and spec.inputs[0].shape else None
        if fixed is None or fixed == batch:
            return self._invoke(spec, inputs)
        if batch % fixed:
            raise ValueError(f"batch {batch} is not a multiple of the model's fixed batch size {fixed}")
        parts = [
            self._invoke(spec, {k: v[i : i + fixed] for k, v in inputs.items()}) for i in range(0, batch, fixed)
        ]
        return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}


def read_signatures(model_path: Path) -> dict[str, SignatureSpec]:
    """The model's signatures as LiteRT reports them (a single `serving_default` when the file has none)."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = _open_litert(model_path, threads=1, interpreter_cls=Interpreter)
    return _litert_signatures(interpreter)[0]


def _open_litert(model_path: Path, threads: int, interpreter_cls: type) -> object:
    try:
        return interpreter_cls(model_path=str(model_path), num_threads=threads)
    except (ValueError, RuntimeError) as error:
        raise InputError(f"{model_path}: not a loadable .tflite model ({str(error).splitlines()[0]})") from None


def _spec(name: str, detail: Mapping[str, object]) -> TensorSpec:
    shape = detail.get("shape_signature")
    if shape is None or len(shape) == 0:  # type: ignore[arg-type]
        shape = detail["shape"]
    return TensorSpec(name=name, dtype=np.dtype(detail["dtype"]).name, shape=tuple(None if int(d) == -1 else int(d) for d in shape))  # type: ignore[union-attr, arg-type]


def _litert_signatures(interpreter: object) -> tuple[dict[str, SignatureSpec], dict[str, dict[str, int]]]:
    """Signature specs plus, per signature, the tensor index of every input and output name."""
    signatures: dict[str, SignatureSpec] = {}
    indices: dict[str, dict[str, int]] = {}
    listing = interpreter.get_signature_list()  # type: ignore[attr-defined]
    for key, names in listing.items():
        runner = interpreter.get_signature_runner(key)  # type: ignore[attr-defined]
        ins, outs = runner.get_input_details(), runner.get_output_details()
        del runner  # it holds tensor views; allocate_tensors refuses to run while they live
        signatures[key] = SignatureSpec(
            name=key,
            inputs=tuple(_spec(n, ins[n]) for n in names["inputs"]),
            outputs=tuple(_spec(n, outs[n]) for n in names["outputs"]),
        )
        indices[key] = {n: int(d["index"]) for n, d in {**ins, **outs}.items()}
    gc.collect()
    if not signatures:  # converted without signatures: expose the graph's inputs/outputs under the default name
        ins = interpreter.get_input_details()  # type: ignore[attr-defined]
        outs = interpreter.get_output_details()  # type: ignore[attr-defined]
        in_names = [_clean(d["name"]) for d in ins]
        out_names = [_clean(d["name"]) for d in outs]
        signatures[DEFAULT_SIGNATURE] = SignatureSpec(
            name=DEFAULT_SIGNATURE,
            inputs=tuple(_spec(n, d) for n, d in zip(in_names, ins)),
            outputs=tuple(_spec(n, d) for n, d in zip(out_names, outs)),
        )
        indices[DEFAULT_SIGNATURE] = {
            **{n: int(d["index"]) for n, d in zip(in_names, ins)},
            **{n: int(d["index"]) for n, d in zip(out_names, outs)},
        }
    return signatures, indices


def _clean(tensor_name: str) -> str:
    return tensor_name.split(":")[0].removeprefix("serving_default_")


class LiteRTBackend(Backend):
    """`ai_edge_litert` interpreter with the default resolver (XNNPACK delegate on) and N threads."""

    runtime = "litert"

    def __init__(self, model_path: Path, threads: int = 1) -> None:
        self._interpreter = _open_litert(model_path, threads, self._interpreter_class())
        self.signatures, self._indices = _litert_signatures(self._interpreter)
        self._model_path = model_path
        self._shapes: dict[int, tuple[int, ...]] = {
            int(d["index"]): tuple(int(x) for x in d["shape"])
            for d in self._interpreter.get_input_details()  # type: ignore[attr-defined]
        }
        self._allocated = self._allocate(load=True)

    def _allocate(self, load: bool = False) -> bool:
        """Prepare the interpreter at the current input shapes. At load, a model with open dimensions whose
        placeholder shapes do not prepare is left for its first call (False); any other failure is refused
        in one line keeping the interpreter's own words."""
        try:
            self._interpreter.allocate_tensors()  # type: ignore[attr-defined]
        except RuntimeError as error:  # e.g. Select TF ops: keep LiteRT's own words, say what serves it
            if load and self._open_dimensions() and SELECT_OPS_MARKER not in str(error):
                return False
            raise InputError(self._refusal(self._model_path, error)) from None
        return True

    def _open_dimensions(self) -> bool:
        return any(d is None for sig in self.signatures.values() for spec in sig.inputs for d in spec.shape[1:])

    def _interpreter_class(self) -> type:
        from ai_edge_litert.interpreter import Interpreter

        return Interpreter

    def _refusal(self, model_path: Path, error: BaseException) -> str:
        return litert_refusal(model_path, error)

    def _invoke(self, signature: SignatureSpec, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        it = self._interpreter
        index = self._indices[signature.name]
        resized = False
        for name, value in inputs.items():
            i = index[name]
            if self._shapes.get(i) != value.shape:
                it.resize_tensor_input(i, list(value.shape))  # type: ignore[attr-defined]
                self._shapes[i] = value.shape
                resized = True
        if resized or not self._allocated:
            self._allocated = self._allocate()
        for name, value in inputs.items():
            it.set_tensor(index[name], np.ascontiguousarray(value))  # type: ignore[attr-defined]
        it.invoke()  # type: ignore[attr-defined]
        return {spec.name: it.get_tensor(index[spec.name]) for spec in signature.outputs}  # type: ignore[attr-defined]
