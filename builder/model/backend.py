"""The backend interface every runtime implements, and LiteRT's interpreter behind it (TensorFlow's own
interpreter, in `builder.model.tensorflow`, is the same class on another interpreter).

A backend is allocated at the shapes it is called with: a .tflite stores a placeholder size (often 1) for each
dimension of any size, and a Conv1D with a kernel of 5 cannot prepare at length 1, while the same file answers
exactly at the lengths it is really called with. So a model whose inputs have open dimensions is allocated at
its first call when its placeholder shapes do not prepare; only a failure at shapes that are the model's own
is a refusal at load.
"""

from __future__ import annotations

import os
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from builder.errors import InputError
from builder.model.failures import ModelInputError, clean_message, fresh_report
from builder.model.rows import (answer_rows, call_rows, contiguous, fixed_batch, in_row_form, unbatched,
                                unbatched_outputs)
from builder.model.signature import DEFAULT_SIGNATURE, STRING, SignatureSpec, TensorSpec

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
        """Rows in, one answer per row out (`builder.model.rows.answer_rows`): what optimize compares and times.
        Unbatched inputs may come one value per row; an output without a batch comes one value per row, each
        row's own call's. For a signature with neither, the same as `answer`."""
        spec = self.signatures[signature]
        if not unbatched_outputs(spec.inputs, spec.outputs):  # every output carries the rows: one call, as asked
            return self.answer(signature, inputs)
        return answer_rows(spec.inputs, spec.outputs, inputs, lambda feed: self.answer(signature, feed))

    def answer(self, signature: str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One call as a client makes it (every input as declared), answered as the model answers it: what a
        server runs. Models with a fixed batch size take a multiple of it one fixed-size slice at a time (not
        one that answers for the whole call: a slice's answer is not the call's). A model that refuses the
        inputs' values or shapes while it computes raises `ModelInputError` (the client's fault)."""
        spec = self.signatures[signature]
        if in_row_form(spec.inputs, inputs):  # rows whose unbatched inputs come one value per row
            return call_rows(spec.inputs, inputs, lambda feed: self.answer(signature, feed))
        free = unbatched(spec.inputs)
        fixed = fixed_batch(spec.inputs)
        batch = next((np.shape(v)[0] for k, v in inputs.items() if k not in free and np.ndim(v)), fixed)
        if fixed is None or fixed == batch:
            return self._invoke(spec, inputs)
        if batch % fixed:
            raise ValueError(f"batch {batch} is not a multiple of the model's fixed batch size {fixed}")
        whole = sorted(unbatched_outputs(spec.inputs, spec.outputs))
        if whole:
            raise ModelInputError(f"the model takes batches of exactly {fixed} rows and answers {whole[0]!r} for "
                                  f"the whole batch: a batch of {batch} rows has no such answer")
        parts = [
            self._invoke(spec, {k: v if k in free else v[i : i + fixed] for k, v in inputs.items()})
            for i in range(0, batch, fixed)
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
    dtype = np.dtype(detail["dtype"])  # type: ignore[call-overload]
    # a string tensor (LiteRT reports numpy's bytes_) is the one string spelling every backend and the wire share
    name_of_dtype = STRING if dtype.kind in "SUO" else dtype.name
    return TensorSpec(name=name, dtype=name_of_dtype, shape=tuple(None if int(d) == -1 else int(d) for d in shape))  # type: ignore[union-attr, arg-type]


def _litert_signatures(interpreter: object) -> tuple[dict[str, SignatureSpec], dict[str, dict[str, int]]]:
    """Signature specs plus, per signature, the tensor index of every input and output name."""
    signatures: dict[str, SignatureSpec] = {}
    indices: dict[str, dict[str, int]] = {}
    listing = interpreter.get_signature_list()  # type: ignore[attr-defined]
    for key, names in listing.items():
        runner = interpreter.get_signature_runner(key)  # type: ignore[attr-defined]
        ins, outs = runner.get_input_details(), runner.get_output_details()
        # dropped at once: allocate_tensors refuses to run while anything else holds the interpreter's wrapper
        # (LiteRT counts references). A SignatureRunner is in no cycle, so no gc.collect() is needed (one took
        # 0.44 s with TensorFlow loaded, for every LiteRT file opened)
        del runner
        signatures[key] = SignatureSpec(
            name=key,
            inputs=tuple(_spec(n, ins[n]) for n in names["inputs"]),
            outputs=tuple(_spec(n, outs[n]) for n in names["outputs"]),
        )
        indices[key] = {n: int(d["index"]) for n, d in {**ins, **outs}.items()}
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
    """`ai_edge_litert` interpreter with the default resolver (XNNPACK delegate on) and N threads.

    Every signature of the file is served: a .tflite converted from several SavedModel signatures keeps each
    in a subgraph of its own, and each call resizes, allocates, fills and runs the subgraph of the signature
    it names (the interpreter's plain methods reach only the first one). What the interpreter refuses while
    computing a request (a gather index out of bounds, a length a kernel cannot prepare) is `ModelInputError`."""

    runtime = "litert"

    def __init__(self, model_path: Path, threads: int = 1) -> None:
        self._interpreter = _open_litert(model_path, threads, self._interpreter_class())
        self.signatures, self._indices = _litert_signatures(self._interpreter)
        self._subgraphs = litert_subgraphs(self._interpreter, self.signatures)
        self._model_path = model_path
        self._shapes: dict[tuple[int, int], tuple[int, ...]] = {
            (0, int(d["index"])): tuple(int(x) for x in d["shape"])
            for d in self._interpreter.get_input_details()  # type: ignore[attr-defined]
        }
        self._reported = ""  # the interpreter's last error text (`_fresh`)
        self._ready: set[int] = {0} if self._allocate(load=True) else set()

    def _allocate(self, load: bool = False, subgraph: int = 0) -> bool:
        """Prepare a subgraph at its current input shapes. At load (the first subgraph), a model with open
        dimensions whose placeholder shapes do not prepare is left for its first call (False), and any other
        failure is refused in one line keeping the interpreter's own words; at a call, the shapes are the
        request's, so a failure is the request's (`ModelInputError`)."""
        try:
            if load or subgraph == 0:  # the interpreter's own call: it applies the XNNPACK delegate, if not yet
                self._interpreter.allocate_tensors()  # type: ignore[attr-defined]
            else:
                self._native.AllocateTensors(subgraph)  # type: ignore[attr-defined]
        except RuntimeError as error:  # e.g. Select TF ops: keep LiteRT's own words, say what serves it
            if load and self._open_dimensions() and SELECT_OPS_MARKER not in str(error):
                self._reported = str(error)  # the reporter keeps it in front of the next error's text
                return False
            if not load and SELECT_OPS_MARKER not in str(error) and not _ours(error):
                raise ModelInputError(clean_message(self._fresh(error))) from None
            if _ours(error):
                raise
            raise InputError(self._refusal(self._model_path, error)) from None
        return True

    def output_quantization(self, signature: str) -> dict[str, tuple[float, int]]:
        """(scale, zero point) of each quantized output of a signature: a full-integer file answers uint8/int8
        scores whose real values are (q - zero_point) * scale; float outputs are left out."""
        runner = self._interpreter.get_signature_runner(signature)  # type: ignore[attr-defined]
        details = runner.get_output_details()
        del runner  # it holds tensor views (see `_litert_signatures`)
        return {name: (float(d["quantization"][0]), int(d["quantization"][1])) for name, d in details.items()
                if np.dtype(d["dtype"]).kind in "iu" and d["quantization"][0]}

    def _fresh(self, error: BaseException) -> str:
        """This error's own text, without the earlier errors LiteRT's reporter keeps in front of it."""
        text = str(error)
        fresh, self._reported = fresh_report(self._reported, text), text
        return fresh

    @property
    def _native(self) -> object:
        """The interpreter's wrapper, whose calls take the subgraph to act on (what LiteRT's own signature
        runner uses)."""
        return self._interpreter._interpreter  # type: ignore[attr-defined]

    def _open_dimensions(self) -> bool:
        return any(d is None for sig in self.signatures.values() for spec in sig.inputs for d in spec.shape[1:])

    def _interpreter_class(self) -> type:
        from ai_edge_litert.interpreter import Interpreter

        return Interpreter

    def _refusal(self, model_path: Path, error: BaseException) -> str:
        return litert_refusal(model_path, error)

    def _invoke(self, signature: SignatureSpec, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        # `self._native` each time, never kept in a local: the interpreter refuses to allocate while anything
        # else holds its wrapper (it takes that for a numpy view of its buffers)
        subgraph = self._subgraphs.get(signature.name, 0)
        index = self._indices[signature.name]
        try:
            resized = False
            for name, value in inputs.items():
                i = index[name]
                if self._shapes.get((subgraph, i)) != value.shape:
                    self._native.ResizeInputTensor(i, np.array(value.shape, dtype=np.int32), False, subgraph)  # type: ignore[attr-defined]
                    self._shapes[(subgraph, i)] = value.shape
                    resized = True
            if resized or subgraph not in self._ready:
                self._ready.discard(subgraph)
                self._allocate(subgraph=subgraph)
                self._ready.add(subgraph)
            for name, value in inputs.items():
                self._native.SetTensor(index[name], contiguous(value), subgraph)  # type: ignore[attr-defined]
            self._native.Invoke(subgraph)  # type: ignore[attr-defined]
        except (ModelInputError, RuntimeError, ValueError) as error:  # the kernels refusing these values or shapes
            self._shapes = {k: v for k, v in self._shapes.items() if k[0] != subgraph}  # resize again next time
            self._ready.discard(subgraph)
            if isinstance(error, ModelInputError) or _ours(error):
                raise
            raise ModelInputError(clean_message(self._fresh(error))) from None
        return {spec.name: self._native.GetTensor(index[spec.name], subgraph)  # type: ignore[attr-defined]
                for spec in signature.outputs}


#: What the interpreter says when the server itself misused it (it holds a view of the interpreter's buffers):
#: never the request's fault.
_MISUSE = ("reference to internal data",)


def _ours(error: BaseException) -> bool:
    """An interpreter error that is the server's own fault, whatever the request carried."""
    return any(marker in str(error) for marker in _MISUSE)


def litert_subgraphs(interpreter: object, signatures: Mapping[str, SignatureSpec]) -> dict[str, int]:
    """The subgraph each signature runs in (0 for a file converted without signatures, or from one)."""
    native = interpreter._interpreter  # type: ignore[attr-defined]
    found = {}
    for key in signatures:
        try:
            found[key] = int(native.GetSubgraphIndexFromSignature(key))
        except (RuntimeError, ValueError, AttributeError):  # no signature defs: the default name is ours
            found[key] = 0
    return found
