"""OpenVINO's IR as an artifact, without TensorFlow: what the registry says reads it and what an image needs for
it, how an optimize folder whose choice is an IR resolves, which image kind it gets, and the backend on a tiny
IR built with OpenVINO's own opset (names and order from the IR's runtime info, batch 1 compiled apart from the
dynamic shape, the same answers at every batch size)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from builder.errors import InputError
from builder.model import registry
from builder.model.artifact import Artifact, resolve_artifact
from builder.packaging.kinds import OpenVINOKind, check_artifact, choose_kind, kind_named
from tests.report_fixture import write_report

W = np.arange(12, dtype=np.float32).reshape(4, 3) / 10


def test_the_registry_says_who_reads_an_ir_and_what_an_image_needs_for_it() -> None:
    assert registry.IR_RUNTIMES == ("openvino", "openvino-bf16") == OpenVINOKind.runtimes
    assert registry.runtime("openvino").serves("openvino_ir_int8")  # int8 where the file is: not a bf16 file
    assert not registry.runtime("openvino-bf16").serves("openvino_ir_int8")
    assert not any(registry.runtime(n).serves("openvino_ir_fp32") for n in ("litert", "tensorflow"))
    assert registry.distributions("openvino", "openvino_ir_fp32") == ("openvino",)  # no LiteRT, no TensorFlow
    assert set(registry.distributions("openvino", "tflite_int8")) == {"openvino", "ai-edge-litert"}
    assert registry.needs("openvino-bf16", "openvino_ir_fp32")[0] == ("openvino",)
    assert "openvino-nncf" not in registry.NAMES
    with pytest.raises(InputError, match="openvino_int8.xml.*--runtime openvino serves it"):
        registry.check("openvino-nncf", allow_auto=True, what="--runtime")


def _ir_files(folder: Path, *names: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(b"<net/>")
        (folder / name).with_suffix(".bin").write_bytes(name.encode() * 4)


def test_an_optimize_folder_choosing_an_ir_resolves_to_its_two_files(tmp_path: Path) -> None:
    _ir_files(tmp_path, "openvino_int8.xml")
    (tmp_path / "model_fp32.tflite").write_bytes(b"TFL3")
    (tmp_path / "saved_model").mkdir()
    (tmp_path / "saved_model" / "saved_model.pb").write_bytes(b"graph")
    write_report(tmp_path, chosen="openvino_int8.xml", chosen_runtime="openvino-bf16",
                 artifacts=[("openvino_int8.xml", "openvino_ir_int8"), ("model_fp32.tflite", "tflite_fp32"),
                            ("saved_model", "saved_model")])
    artifact = resolve_artifact(tmp_path)
    assert artifact.model_path == tmp_path / "openvino_int8.xml" and artifact.ir
    assert artifact.runtime == "openvino-bf16" and artifact.format == "openvino_ir_int8"  # what optimize measured
    before = artifact.sha256
    (tmp_path / "openvino_int8.bin").write_bytes(b"other weights")  # the digest covers the weights too
    assert resolve_artifact(tmp_path).sha256 != before
    assert resolve_artifact(tmp_path, runtime="litert").model_path == tmp_path / "model_fp32.tflite"
    assert resolve_artifact(tmp_path, runtime="tensorflow").model_path == tmp_path / "saved_model"
    assert Artifact(tmp_path / "openvino_int8.xml", "m").runtime == "openvino"  # no report: f32, its exact answer


def test_an_ir_gets_the_openvino_kind_and_no_other(tmp_path: Path) -> None:
    _ir_files(tmp_path, "m.xml")
    ir = Artifact(tmp_path / "m.xml", "m")
    assert choose_kind("auto", ir, None)[0] == "openvino"
    check_artifact(kind_named("openvino"), ir)
    with pytest.raises(InputError, match="OpenVINO's IR: a litert image cannot serve it; use --kind openvino"):
        check_artifact(kind_named("litert"), ir)
    tflite = tmp_path / "m.tflite"
    tflite.write_bytes(b"TFL3")
    with pytest.raises(InputError, match="--kind litert --runtime openvino for OpenVINO on the .tflite"):
        check_artifact(kind_named("openvino"), Artifact(tflite, "m"))


def _tiny_ir(path: Path, recorded: bool = True) -> Path:
    """features [?, 4] float32 -> scores [?, 3] (x @ W) and label [?] int64 (argmax), saved as an IR."""
    import openvino as ov
    import openvino.opset13 as ops

    from builder.model.openvino import RT_INFO, signature_info

    x = ops.parameter([-1, 4], np.float32, name="features")
    scores = ops.matmul(x, ops.constant(W), False, False)
    label = ops.squeeze(ops.topk(scores, 1, axis=1, mode="max", sort="none", index_element_type="i64").output(1), [1])
    scores.output(0).get_tensor().set_names({"scores"})
    label.output(0).get_tensor().set_names({"label"})
    model = ov.Model([label, scores], [x], "tiny")  # OpenVINO's order: label first
    if recorded:  # the model's own order, as optimize records it
        for key, value in signature_info("predict", ["features"], ["scores", "label"]).items():
            model.set_rt_info(value, [RT_INFO, key])
    ov.save_model(model, str(path), compress_to_fp16=False)
    return path


def test_the_ir_backend_serves_the_recorded_signature_at_every_batch(tmp_path: Path) -> None:
    pytest.importorskip("openvino")
    from builder.model.create import create_backend

    backend = create_backend("openvino", _tiny_ir(tmp_path / "tiny.xml"), 1)
    (key, spec), = backend.signatures.items()
    assert key == "predict"
    assert [(t.name, t.dtype, t.shape) for t in spec.outputs] == [("scores", "float32", (None, 3)),
                                                                  ("label", "int64", (None,))]
    assert spec.inputs[0].shape == (None, 4)
    assert set(backend._requests) == {None, ((1, 4),)}  # batch 1 compiled apart from the dynamic shape
    x = np.random.default_rng(0).random((5, 4), dtype=np.float32)
    for rows in (x[:1], x):
        answer = backend.predict("predict", {"features": rows})
        assert np.allclose(answer["scores"], rows @ W, rtol=1e-5)
        assert answer["label"].dtype == np.int64 and list(answer["label"]) == list((rows @ W).argmax(1))
    unrecorded = create_backend("openvino", _tiny_ir(tmp_path / "plain.xml", recorded=False), 1)
    assert list(unrecorded.signatures) == ["serving_default"]  # an IR made elsewhere: OpenVINO's names and order
    assert [t.name for t in unrecorded.signatures["serving_default"].outputs] == ["label", "scores"]


def test_bench_judges_answers_that_are_not_floats_by_exact_agreement() -> None:
    from builder.bench.harness import _exact_quality
    from builder.bench.runtimes import as_answer

    labels = np.array([b"cat", b"dog", b"fish", b"dog"], dtype=object)
    assert as_answer(labels) is labels and as_answer(np.ones(2, np.float64)).dtype == np.float32
    assert _exact_quality(labels, labels, None) == (None, 1.0, None)
    other = labels.copy()
    other[0] = b"dog"
    accuracy, agreement, _ = _exact_quality(other, labels, labels)
    assert agreement == 0.75 and accuracy == 0.75
