"""`--runtime auto` decision logic, and what an OpenVINO IR image carries, with fake measurements (no runtimes run)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

from builder.errors import InputError
from builder.model.artifact import resolve_artifact
from builder.packaging.runtime_choice import choose_runtime
from tests.report_fixture import write_report
from builder.packaging.context import render_server_context as render_context
from builder.packaging.context import server_requirements as pinned_requirements
from builder.packaging.plan import BaseImage, PackageOptions, plan_package
from builder.packaging.smoke import SmokeFailed, compare_approximate


def _latencies(ms: float) -> list[float]:
    """101 tight samples with median `ms` milliseconds (in seconds), as a quiet host gives."""
    return [ms * 1e-3 * (1 + 0.001 * (i - 50)) for i in range(101)]


def _folder(tmp_path: Path, samples: bool = True) -> Path:
    """An optimize-like folder: chosen int8 model, its fp32 sibling, report, optional samples."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    for name in ("model_int8.tflite", "model_fp32.tflite"):
        (tmp_path / name).write_bytes(b"TFL3")
    write_report(tmp_path, chosen="model_int8.tflite",
                 artifacts=[("model_int8.tflite", "tflite_int8"), ("model_fp32.tflite", "tflite_fp32")])
    if samples:
        np.savez(tmp_path / "samples.npz", **{"x/pixels": np.zeros((4, 8, 8, 1), np.float32)})
    return tmp_path / "model_int8.tflite"


class FakeMeasure:
    """Returns recorded latencies per runtime and remembers what it was asked to measure."""

    def __init__(self, p50_ms: Mapping[str, float], errors: Mapping[str, str] | None = None) -> None:
        self.p50_ms, self.errors, self.asked = p50_ms, dict(errors or {}), {}

    def __call__(self, candidates: Mapping[str, Path], threads: int) -> tuple[dict, dict]:
        self.asked = dict(candidates)
        samples = {n: _latencies(self.p50_ms[n]) for n in candidates if n in self.p50_ms and n not in self.errors}
        return samples, {n: e for n, e in self.errors.items() if n in candidates}


def _ir_folder(tmp_path: Path) -> Path:
    """An optimize-like folder whose chosen artifact is OpenVINO's int8 IR (graph and weights), beside a .tflite."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    for name in ("openvino_int8.xml", "openvino_int8.bin", "openvino_fp32.xml", "openvino_fp32.bin",
                 "model_fp32.tflite"):
        (tmp_path / name).write_bytes(b"<net/>" if name.endswith(".xml") else b"\0" * 16)
    write_report(tmp_path, chosen="openvino_int8.xml", chosen_runtime="openvino",
                 artifacts=[("openvino_int8.xml", "openvino_ir_int8"), ("openvino_fp32.xml", "openvino_ir_fp32"),
                            ("model_fp32.tflite", "tflite_fp32")])
    np.savez(tmp_path / "samples.npz", **{"x/pixels": np.zeros((4, 8, 8, 1), np.float32)})
    return tmp_path / "openvino_int8.xml"


def test_auto_picks_openvino_when_it_clearly_beats_litert_on_the_same_file(tmp_path: Path) -> None:
    model = _folder(tmp_path)
    measure = FakeMeasure({"litert": 7.03, "openvino": 4.90})
    choice = choose_runtime("auto", model, threads=2, measure=measure)
    assert choice.runtime == "openvino"
    assert measure.asked == {"litert": model, "openvino": model}  # bf16 computes only float files
    assert "openvino p50 4.900 ms on this host: faster beyond noise than litert" in choice.reason
    assert "litert 7.030 ms" in choice.reason and "2 threads" in choice.reason
    assert choice.p50_us["openvino"] == pytest.approx(4.90e3, rel=0.01)


def test_auto_measures_bf16_on_a_float_file(tmp_path: Path) -> None:
    _folder(tmp_path)
    fp32 = tmp_path / "model_fp32.tflite"
    measure = FakeMeasure({"litert": 1.0, "openvino": 2.0, "openvino-bf16": 0.5})
    assert choose_runtime("auto", fp32, measure=measure).runtime == "openvino-bf16"
    assert set(measure.asked) == {"litert", "openvino", "openvino-bf16"}


def test_auto_keeps_litert_when_the_others_are_within_noise(tmp_path: Path) -> None:
    choice = choose_runtime("auto", _folder(tmp_path), measure=FakeMeasure({"litert": 1.0, "openvino": 0.9995}))
    assert choice.runtime == "litert"
    assert "within noise of the fastest, openvino" in choice.reason


def test_auto_takes_a_small_win_beyond_noise_there_is_no_fixed_margin(tmp_path: Path) -> None:
    choice = choose_runtime("auto", _folder(tmp_path), measure=FakeMeasure({"litert": 1.0, "openvino": 0.97}))
    assert choice.runtime == "openvino"
    assert "faster beyond noise than litert" in choice.reason


def test_auto_reports_a_runtime_that_failed_to_load(tmp_path: Path) -> None:
    measure = FakeMeasure({"litert": 1.0}, errors={"openvino": "RuntimeError: boom"})
    choice = choose_runtime("auto", _folder(tmp_path), measure=measure)
    assert choice.runtime == "litert"
    assert "openvino unavailable (RuntimeError: boom)" in choice.reason


def test_auto_on_openvinos_ir_measures_only_what_reads_it(tmp_path: Path) -> None:
    model = _ir_folder(tmp_path)
    measure = FakeMeasure({"openvino": 2.0, "openvino-bf16": 1.0})
    choice = choose_runtime("auto", model, measure=measure)
    assert measure.asked == {"openvino": model}  # an int8 IR: no bf16 candidate, never LiteRT
    assert choice.runtime == "openvino"
    fp32 = tmp_path / "openvino_fp32.xml"
    assert choose_runtime("auto", fp32, measure=measure).runtime == "openvino-bf16"
    assert set(measure.asked) == {"openvino", "openvino-bf16"}


def test_named_runtimes_are_taken_as_asked_and_what_cannot_read_the_file_is_refused(tmp_path: Path) -> None:
    model = _folder(tmp_path / "a")
    assert choose_runtime("openvino", model).reason == "requested"
    with pytest.raises(InputError, match="unknown runtime"):
        choose_runtime("tensorrt", model)
    ir = _ir_folder(tmp_path / "b")
    assert choose_runtime("openvino-bf16", ir).runtime == "openvino-bf16"
    with pytest.raises(InputError, match="an OpenVINO IR runs on runtime openvino or openvino-bf16, not litert"):
        choose_runtime("litert", ir)


def test_the_retired_runtime_is_refused_saying_what_serves_its_models_now(tmp_path: Path) -> None:
    with pytest.raises(InputError) as refused:
        choose_runtime("openvino-nncf", _folder(tmp_path))
    assert "'openvino-nncf' is gone" in str(refused.value) and "openvino_int8.xml" in str(refused.value)
    assert "\n" not in str(refused.value)


def test_an_ir_image_carries_openvino_alone_and_the_irs_two_files(tmp_path: Path) -> None:
    model = _ir_folder(tmp_path / "opt")
    artifact = resolve_artifact(model.parent)
    assert artifact.model_path == model and artifact.runtime == "openvino" and artifact.format == "openvino_ir_int8"
    requirements = pinned_requirements("openvino", artifact.format)
    plan = plan_package(artifact, PackageOptions(), kind="openvino", base=BaseImage("base:1"), runtime="openvino",
                        requirements=requirements)
    assert any(r.startswith("openvino==") for r in requirements)
    assert not any(r.startswith(("ai-edge-litert==", "nncf==", "tensorflow")) for r in requirements)
    assert any(r.startswith("ai-edge-litert==") for r in pinned_requirements("openvino", "tflite_fp32"))
    assert plan.command[0] == "/models/digits/1/model.xml"
    context = render_context(plan, artifact, tmp_path / "ctx", None)
    assert (context / "model" / "model.xml").read_bytes() == model.read_bytes()
    assert (context / "model" / "model.bin").read_bytes() == model.with_suffix(".bin").read_bytes()
    assert not (context / "model" / "samples.npz").exists()  # nothing in an image calibrates
    assert "--kind openvino" in (context / "Dockerfile").read_text()


def test_a_runtime_that_reads_no_ir_gets_the_folders_fastest_tflite(tmp_path: Path) -> None:
    model = _ir_folder(tmp_path)
    assert resolve_artifact(tmp_path, runtime="litert").model_path == tmp_path / "model_fp32.tflite"
    assert resolve_artifact(tmp_path, runtime="openvino-bf16").model_path == model


def test_lower_precision_answers_are_judged_by_top1_agreement() -> None:
    want = np.eye(10, dtype=np.float32)[np.arange(20) % 10]
    close = want * 0.9 + 0.01
    diff, agreement = compare_approximate(close, want)
    assert agreement == 1.0 and diff == pytest.approx(0.09, abs=1e-6)
    wrong = np.roll(want, 1, axis=1)
    with pytest.raises(SmokeFailed, match="top-1 agreement 0.000"):
        compare_approximate(wrong, want)
    with pytest.raises(SmokeFailed, match="shape"):
        compare_approximate(want[:3], want)


def test_fidelity_uses_each_outputs_metric() -> None:
    from builder.packaging.smoke import fidelity

    scores = np.eye(4, dtype=np.float32)[np.arange(20) % 4]
    assert fidelity("probs", scores * 0.5, scores).metric == "top-1 agreement"
    assert fidelity("probs", scores * 0.5, scores).passed
    assert not fidelity("probs", np.roll(scores, 1, axis=1), scores).passed
    target = np.linspace(25, 346, 20, dtype=np.float32)[:, None]  # a regression output (diabetes-like range)
    near = fidelity("target", target * 1.01, target)
    assert near.metric == "relative error" and near.passed and near.value == pytest.approx(0.01, rel=1e-3)
    off = fidelity("target", target + 49.0, target)  # an int8 file off by up to 49 must fail
    assert not off.passed
    ids = np.arange(20, dtype=np.int64)
    assert fidelity("ids", ids, ids).metric == "exact agreement" and fidelity("ids", ids, ids).passed
    with pytest.raises(SmokeFailed, match="signature changed"):
        fidelity("probs", scores[:, :3], scores)
def test_smoke_sends_only_as_many_big_examples_as_fit_the_servers_body_limit() -> None:
    from builder.packaging.smoke import SERVER_MAX_BODY_BYTES, fit_body

    big = {"image": np.full((16, 224, 224, 3), 0.123456789, np.float32)}  # ~3 MB of JSON per example
    keep = fit_body(big)
    assert 1 <= keep < 16
    assert len(json.dumps({"inputs": {"image": big["image"][:keep].tolist()}})) < SERVER_MAX_BODY_BYTES
    assert fit_body({"image": np.zeros((16, 8, 8, 1), np.float32), "ids": np.zeros((16, 4), np.int32)}) == 16
    from builder.server.options import DEFAULT_MAX_BODY_BYTES

    assert SERVER_MAX_BODY_BYTES == DEFAULT_MAX_BODY_BYTES


def test_auto_says_plainly_when_every_peer_is_slower(tmp_path: Path) -> None:
    choice = choose_runtime("auto", _folder(tmp_path), measure=FakeMeasure({"litert": 0.05, "openvino": 0.28}))
    assert choice.runtime == "litert"
    assert "faster beyond noise than openvino (5.60x)" in choice.reason
