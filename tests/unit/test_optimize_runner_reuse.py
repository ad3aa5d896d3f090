"""Runners opened once (`builder.optimize.steps.runner_for`): the race takes over the evaluation's runner for
the same file, runtime and signature, and TensorFlow's other runtimes share a SavedModel's load."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from builder.model.tensorflow import SavedModelBackend
from builder.optimize.steps import runner_for, runner_key


class FakeRunner:
    def __init__(self, runtime: str, saved_model: bool, backend: Any = None) -> None:
        self.runtime, self.holds_saved_model, self.backend = runtime, saved_model, backend

    def shared_load(self, runtime: str) -> Any:
        return ("shared", self, runtime) if self.holds_saved_model else None


def opener(runtime: str, saved_model: bool, made: list[Any]) -> Any:
    def open_runner(backend: Any) -> FakeRunner:
        runner = FakeRunner(runtime, saved_model, backend)
        made.append(runner)
        return runner

    return open_runner


def test_the_evaluations_runner_is_taken_over_once(tmp_path: Path) -> None:
    path = tmp_path / "model_int8.tflite"
    evaluated = FakeRunner("litert", saved_model=False)
    opened = {runner_key(path, "litert", None): evaluated}
    made: list[Any] = []
    assert runner_for("litert", path, None, opened, {}, opener("litert", False, made)) is evaluated
    assert opened == {} and made == []
    again = runner_for("litert", path, None, opened, {}, opener("litert", False, made))
    assert again is not evaluated and made == [again]  # a second candidate never shares the first's runner


def test_another_signature_or_runtime_is_not_the_evaluations(tmp_path: Path) -> None:
    path = tmp_path / "model_fp32.tflite"
    evaluated = FakeRunner("litert", saved_model=False)
    opened = {runner_key(path, "litert", None): evaluated}
    made: list[Any] = []
    other = runner_for("openvino", path, None, opened, {}, opener("openvino", False, made))
    assert other is not evaluated and other.backend is None and len(opened) == 1  # loads its own file


def test_tensorflow_runtimes_share_one_load_of_a_folder(tmp_path: Path) -> None:
    folder = tmp_path / "saved_model"
    evaluated = FakeRunner("tensorflow", saved_model=True)
    opened = {runner_key(folder, "tensorflow", "serving_default"): evaluated}
    loaded: dict[str, Any] = {}
    made: list[Any] = []
    assert runner_for("tensorflow", folder, "serving_default", opened, loaded, opener("tensorflow", True, made)) \
        is evaluated
    xla = runner_for("tensorflow", folder, "serving_xla", opened, loaded, opener("tensorflow", True, made))
    bf16 = runner_for("tensorflow-bf16", folder, "serving_default", opened, loaded,
                      opener("tensorflow-bf16", True, made))
    assert xla.backend == ("shared", evaluated, "tensorflow")
    assert bf16.backend == ("shared", evaluated, "tensorflow-bf16")
    other = runner_for("tensorflow", tmp_path / "baseline", "serving_default", opened, loaded,
                       opener("tensorflow", True, made))
    assert other.backend is None  # another folder: its own load


def test_a_saved_model_backend_at_bf16_shares_the_functions_not_the_runtime() -> None:
    backend = SavedModelBackend.__new__(SavedModelBackend)
    backend._tf, backend.runtime, backend._precision = object(), "tensorflow", contextlib.nullcontext
    backend._loaded, backend._functions, backend.signatures = object(), {"serving_default": object()}, {}
    twin = backend.at("bf16", "tensorflow-bf16")
    assert twin is not backend and twin.runtime == "tensorflow-bf16" and backend.runtime == "tensorflow"
    assert twin._functions is backend._functions and twin._loaded is backend._loaded
    assert backend._precision is contextlib.nullcontext and twin._precision is not contextlib.nullcontext
    assert backend.at("f32", "tensorflow")._precision is contextlib.nullcontext
