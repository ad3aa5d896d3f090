"""Backends by runtime name: the one place a registry entry (`builder.model.registry`) becomes a running model.

Each engine is imported only when asked for: a LiteRT serving image has neither OpenVINO nor TensorFlow, an
OpenVINO image serving its IR has no LiteRT.
"""

from __future__ import annotations

from pathlib import Path

from builder.errors import InputError
from builder.model import registry
from builder.model.artifact import is_ir
from builder.model.backend import Backend, LiteRTBackend



def check_reads(runtime: str, model_path: Path) -> None:
    """InputError in one line when the runtime cannot read this kind of file (an IR off OpenVINO, a .tflite
    or a SavedModel on what reads only IR): before any engine is imported."""
    entry = registry.runtime(runtime)
    if is_ir(model_path) and not entry.ir:
        raise InputError(f"{model_path}: an OpenVINO IR runs on runtime {' or '.join(registry.IR_RUNTIMES)}, "
                         f"not {runtime}")
    if is_ir(model_path) and not model_path.with_suffix(registry.IR_WEIGHTS_SUFFIX).is_file():
        raise InputError(f"{model_path}: its weights {model_path.with_suffix(registry.IR_WEIGHTS_SUFFIX).name} "
                         "are missing (an IR is the .xml and the .bin beside it)")


def create_backends(runtime: str, model_path: Path, workers: int = 1, threads: int = 1) -> list[Backend]:
    """`workers` backends of the named runtime for this model (one per worker thread; TensorFlow shares one
    thread-safe SavedModel among them). InputError for an unknown name or a model the runtime cannot load."""
    entry = registry.runtime(runtime)
    check_reads(runtime, model_path)
    count = max(1, workers)
    if entry.engine == "tensorflow":
        from builder.model.tensorflow import create_tensorflow_backends

        return create_tensorflow_backends(model_path, count, threads, entry.precision, entry.name)
    if entry.engine == "litert":
        return [LiteRTBackend(model_path, threads) for _ in range(count)]
    from builder.model.openvino import OpenVINOIRBackend, OpenVINOTFLiteBackend

    kind = OpenVINOIRBackend if is_ir(model_path) else OpenVINOTFLiteBackend
    return [kind(model_path, threads, entry.precision, entry.name) for _ in range(count)]


def create_backend(runtime: str, model_path: Path, threads: int = 1) -> Backend:
    """One backend of the named runtime."""
    return create_backends(runtime, model_path, 1, threads)[0]
