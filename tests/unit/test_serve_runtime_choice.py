"""`--runtime auto` decision logic and the openvino-nncf plumbing, with fake measurements (no runtimes run)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

from builder.errors import InputError
from builder.model.artifact import Artifact, resolve_artifact
from builder.packaging.runtime_choice import auto_candidates, choose_runtime
from builder.model.create import model_for_runtime
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


def test_auto_picks_nncf_when_it_clearly_beats_litert_and_serves_the_fp32_model(tmp_path: Path) -> None:
    model = _folder(tmp_path)
    measure = FakeMeasure({"litert": 7.03, "openvino": 6.5, "openvino-nncf": 4.90})
    choice = choose_runtime("auto", model, threads=2, measure=measure)
    assert choice.runtime == "openvino-nncf"
    assert measure.asked == {"litert": model, "openvino": model, "openvino-nncf": tmp_path / "model_fp32.tflite"}
    assert "openvino-nncf p50 4.900 ms on this host: faster beyond noise than openvino" in choice.reason
    assert "litert 7.030 ms" in choice.reason and "2 threads" in choice.reason
    assert "openvino 6.500 ms" in choice.reason  # every measured number is said
    assert choice.p50_us["openvino-nncf"] == pytest.approx(4.90e3, rel=0.01)
    assert model_for_runtime(choice.runtime, model) == tmp_path / "model_fp32.tflite"


def test_auto_keeps_litert_when_the_others_are_within_noise(tmp_path: Path) -> None:
    choice = choose_runtime("auto", _folder(tmp_path), measure=FakeMeasure(
        {"litert": 1.0, "openvino": 0.9995, "openvino-nncf": 0.9998}))
    assert choice.runtime == "litert"
    assert "within noise of the fastest, openvino" in choice.reason


def test_auto_takes_a_small_win_beyond_noise_there_is_no_fixed_margin(tmp_path: Path) -> None:
    choice = choose_runtime("auto", _folder(tmp_path), measure=FakeMeasure(
        {"litert": 1.0, "openvino": 0.97, "openvino-nncf": 2.0}))
    assert choice.runtime == "openvino"
    assert "faster beyond noise than litert" in choice.reason


def test_auto_takes_the_fastest_of_several_clear_winners(tmp_path: Path) -> None:
    choice = choose_runtime("auto", _folder(tmp_path), measure=FakeMeasure(
        {"litert": 1.0, "openvino": 0.5, "openvino-nncf": 0.7}))
    assert choice.runtime == "openvino"


def test_auto_without_samples_never_measures_nncf_and_says_why(tmp_path: Path) -> None:
    model = _folder(tmp_path, samples=False)
    measure = FakeMeasure({"litert": 1.0, "openvino": 2.0, "openvino-nncf": 0.1})
    choice = choose_runtime("auto", model, measure=measure)
    assert "openvino-nncf" not in measure.asked
    assert choice.runtime == "litert"
    assert "openvino-nncf unavailable" in choice.reason and "calibration samples" in choice.reason


def test_auto_reports_a_runtime_that_failed_to_load(tmp_path: Path) -> None:
    measure = FakeMeasure({"litert": 1.0, "openvino-nncf": 0.5}, errors={"openvino": "RuntimeError: boom"})
    choice = choose_runtime("auto", _folder(tmp_path), measure=measure)
    assert choice.runtime == "openvino-nncf"
    assert "openvino unavailable (RuntimeError: boom)" in choice.reason


def test_named_nncf_needs_samples_and_others_are_taken_as_asked(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="calibration samples"):
        choose_runtime("openvino-nncf", _folder(tmp_path / "a", samples=False))
    model = _folder(tmp_path / "b")
    assert choose_runtime("openvino-nncf", model).reason == "requested"
    assert choose_runtime("openvino", model).runtime == "openvino"
    with pytest.raises(InputError, match="unknown runtime"):
        choose_runtime("tensorrt", model)


def test_a_bare_fp32_tflite_with_samples_is_its_own_nncf_source(tmp_path: Path) -> None:
    model = tmp_path / "m.tflite"
    model.write_bytes(b"TFL3")
    np.savez(tmp_path / "samples.npz", x=np.zeros((2, 3), np.float32))
    candidates, refused = auto_candidates(model)
    assert candidates["openvino-nncf"] == model and not refused


def test_nncf_images_carry_nncf_and_the_samples_others_do_not(tmp_path: Path) -> None:
    model = _folder(tmp_path / "opt")
    artifact = resolve_artifact(model.parent)
    fp32 = Artifact(model_for_runtime("openvino-nncf", artifact.model_path), artifact.name, artifact.report,
                    artifact.samples_path)
    reason = "auto (1 thread): openvino-nncf p50 4.900 ms vs litert 7.030 ms on this host"
    plan = plan_package(fp32, PackageOptions(), kind="litert", base=BaseImage("base:1"), runtime="openvino-nncf",
                        runtime_reason=reason, requirements=pinned_requirements("openvino-nncf"))
    assert plan.labels["io.tfsmith.runtime"] == "openvino-nncf"
    assert plan.labels["io.tfsmith.runtime.reason"] == reason
    assert plan.command[plan.command.index("--runtime") + 1] == "openvino-nncf"
    assert any(r.startswith("nncf==") for r in plan.requirements)
    assert not any(r.startswith("nncf==") for r in pinned_requirements("openvino"))
    context = render_context(plan, fp32, tmp_path / "ctx", None)
    assert (context / "model" / "samples.npz").is_file()
    assert (context / "model" / "model.tflite").read_bytes() == (model.parent / "model_fp32.tflite").read_bytes()
    litert = render_context(plan_package(artifact, PackageOptions(), kind="litert", base=BaseImage("base:1")),
                            artifact, tmp_path / "ctx2", None)
    assert not (litert / "model" / "samples.npz").exists()


def test_int8_answers_are_judged_by_top1_agreement() -> None:
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
    choice = choose_runtime("auto", _folder(tmp_path), measure=FakeMeasure(
        {"litert": 0.05, "openvino": 0.28, "openvino-nncf": 0.25}))
    assert choice.runtime == "litert"
    assert "faster beyond noise than openvino-nncf (5.00x)" in choice.reason
