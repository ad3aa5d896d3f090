"""What the TensorFlow runtime decides without running TensorFlow: which signature a request gets, what a
path serves and on which runtime, the server's options, and the one-line device report."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.errors import InputError
from builder.server import options
from builder.server.__main__ import needed_runtime
from builder.server.config import configure
from builder.model.artifact import Artifact, model_name_for, resolve_artifact
from builder.model.signature import SignatureSpec, TensorSpec
from builder.server.core.call import RequestError, choose_signature, default_signature
from builder.model.tensorflow import device_line
from tests.report_fixture import write_report

ONE = (TensorSpec("x", "float32", (None, 2)),)


def signatures(*names: str) -> dict[str, SignatureSpec]:
    return {name: SignatureSpec(name, ONE, ONE) for name in names}


def saved_model(folder: Path) -> Path:
    """A folder shaped like a SavedModel (resolution only looks for saved_model.pb)."""
    folder.mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(b"graph")
    (folder / "variables").mkdir()
    return folder


def test_default_signature_order_of_preference() -> None:
    both = signatures("serving_default", "serving_xla")
    assert default_signature(both) == "serving_default"
    assert default_signature(both, "serving_xla") == "serving_xla"
    assert default_signature(both, "nope") is None
    assert default_signature(signatures("predict")) == "predict"
    assert default_signature(signatures("a", "b")) is None


def test_requests_get_the_servers_default_and_unknown_names_list_the_real_ones() -> None:
    both = signatures("serving_default", "serving_xla")
    assert choose_signature(None, both, "serving_xla").name == "serving_xla"
    assert choose_signature("serving_default", both, "serving_xla").name == "serving_default"
    with pytest.raises(RequestError, match="unknown signature_name 'x'; this model has: serving_default, serving_xla"):
        choose_signature("x", both, "serving_xla")


def test_a_saved_model_folder_serves_on_tensorflow(tmp_path: Path) -> None:
    folder = saved_model(tmp_path / "gru")
    artifact = resolve_artifact(folder)
    assert artifact.saved_model and artifact.runtime == "tensorflow" and artifact.name == "gru"
    assert artifact.signature is None and artifact.sha256  # digest of saved_model.pb
    version = saved_model(tmp_path / "text" / "3")
    assert resolve_artifact(version).name == "text"  # TF Serving's <name>/<version>/ layout
    assert model_name_for(version) == "text"
    assert needed_runtime(folder) == ("tensorflow", "auto: a SavedModel runs only on TensorFlow")


def test_an_optimize_folder_that_chose_its_saved_model(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    saved_model(out / "saved_model")
    (out / "model_fp32.tflite").write_bytes(b"x")
    write_report(out, chosen="saved_model", chosen_runtime="tensorflow",
                 artifacts=[("saved_model", "saved_model"), ("model_fp32.tflite", "tflite_fp32")])
    artifact = resolve_artifact(out)
    assert artifact.model_path == out / "saved_model" and artifact.runtime == "tensorflow"
    assert artifact.signature == "serving_default" and artifact.chosen_runtime == "tensorflow"
    assert artifact.name == "digits"  # the trained model's name, from the report
    assert resolve_artifact(out, runtime="litert").model_path.name == "model_fp32.tflite"  # as before
    assert resolve_artifact(out / "saved_model").report is not None  # the folder's report and samples go along


def test_a_tflite_optimize_measured_on_tensorflow_needs_tensorflow(tmp_path: Path) -> None:
    from dataclasses import replace

    out = tmp_path / "out"
    out.mkdir()
    (out / "model_select.tflite").write_bytes(b"x")
    report = write_report(out, chosen="model_select.tflite", chosen_runtime="tensorflow",
                          artifacts=[("model_select.tflite", "tflite_fp32")])
    replace(report, artifacts=tuple(replace(a, runtime="tensorflow") for a in report.artifacts)).write(out)
    artifact = resolve_artifact(out)
    assert not artifact.saved_model and artifact.runtime == "tensorflow"
    assert needed_runtime(out)[0] == "tensorflow"  # type: ignore[index]
    plain = Artifact(out / "model_select.tflite", "m")
    assert plain.runtime is None


def test_a_saved_model_named_on_a_tflite_runtime_is_refused_before_loading(tmp_path: Path) -> None:
    folder = saved_model(tmp_path / "gru")
    with pytest.raises(InputError, match="a SavedModel runs only on TensorFlow; use --runtime tensorflow"):
        configure(folder, runtime="litert")
    with pytest.raises(InputError, match="--signature-name must not be empty"):
        configure(folder, runtime="tensorflow", signature_name="")


def test_options_list_tensorflow_and_signature_name_once() -> None:
    args = options.parse(["m", "--runtime", "tensorflow", "--signature-name", "serving_xla"], "python -m builder.server")
    assert args.runtime == "tensorflow" and args.signature_name == "serving_xla"
    assert options.parse(["m"], "x").runtime is None  # what the model needs
    assert options.to_argv({"signature_name": "predict", "runtime": "tensorflow"}) == [
        "--runtime", "tensorflow", "--signature-name", "predict"]
    assert [o.flag for o in options.OPTIONS].count("--signature-name") == 1


def test_the_device_line_is_one_line_either_way() -> None:
    assert device_line("2.21.0", [], 2, 4) == "TensorFlow 2.21.0 runs on the CPU (no GPU visible; 2 intra-op / 4 inter-op threads)"
    line = device_line("2.21.0", ["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"], 1, 2)
    assert line.startswith("TensorFlow 2.21.0 sees 2 GPUs: NVIDIA H100") and "\n" not in line


def test_worker_processes_get_the_default_signature_too() -> None:
    from builder.server.config import ServerConfig, config_from_json, config_to_json

    config = ServerConfig(model_path=Path("/m"), model_name="m", runtime="tensorflow", signature_name="predict",
                          signature_required=True)
    assert config_from_json(config_to_json(config)) == config
