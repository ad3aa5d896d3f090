"""Backends by runtime name: the one place a registry entry (`builder.model.registry`) becomes a running model.

Each engine is imported only when asked for: a LiteRT serving image has neither OpenVINO nor TensorFlow.
"""

from __future__ import annotations

from pathlib import Path

from builder.model import registry
from builder.model.backend import Backend, LiteRTBackend


def model_for_runtime(runtime: str, model_path: Path) -> Path:
    """The file a runtime serves: openvino-nncf quantizes the float .tflite itself, the others run the chosen one."""
    if registry.calibrates(runtime):
        from builder.model.openvino import nncf_inputs

        return nncf_inputs(model_path)[0]
    return model_path


def create_backends(runtime: str, model_path: Path, workers: int = 1, threads: int = 1) -> list[Backend]:
    """`workers` backends of the named runtime for this model (one per worker thread; TensorFlow shares one
    thread-safe SavedModel among them). InputError for an unknown name or a model the runtime cannot load."""
    entry = registry.runtime(runtime)
    count = max(1, workers)
    if entry.engine == "tensorflow":
        from builder.model.tensorflow import create_tensorflow_backends

        return create_tensorflow_backends(model_path, count, threads, entry.precision, entry.name)
    if entry.engine == "litert":
        return [LiteRTBackend(model_path, threads) for _ in range(count)]
    from builder.model.openvino import OpenVINOBackend, OpenVINONNCFBackend

    if entry.precision == "int8":
        return [OpenVINONNCFBackend(model_path, threads) for _ in range(count)]
    return [OpenVINOBackend(model_path, threads, entry.precision, entry.name) for _ in range(count)]


def create_backend(runtime: str, model_path: Path, threads: int = 1) -> Backend:
    """One backend of the named runtime (openvino-nncf: `model_path` is the float .tflite)."""
    return create_backends(runtime, model_path, 1, threads)[0]
