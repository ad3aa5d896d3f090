"""What pruning bought, as the report says it (`builder.optimize.pruning_gains`): the pruned float .tflite against
the unpruned one, each pruned file's speed per runtime, and sparse kernels per runtime as this host has them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from builder.optimize.pruning_gains import lines, sparse_kernels, unpruned_float
from tests.unit.test_optimize_report import artifact, candidate, make_report

AVX512_HOST = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16")
AMX_HOST = (*AVX512_HOST, "amx_tile", "amx_int8", "amx_bf16")


def test_each_runtime_timed_says_whether_sparse_kernels_ran_and_openvino_follows_the_cpu() -> None:
    said = sparse_kernels(["litert", "openvino", "openvino-int8", "tensorflow", "litert"], AVX512_HOST)
    assert list(said) == ["litert", "openvino", "tensorflow"]  # each family once, in the order timed
    assert all(text.startswith("not used: ") for text in said.values())
    assert "Intel AMX" in said["openvino"] and "this CPU has no AMX" in said["openvino"]
    assert "EXPERIMENTAL_SPARSITY" in said["litert"] and "dense" in said["litert"]
    with_amx = sparse_kernels(["openvino"], AMX_HOST)["openvino"]
    assert "this CPU has Intel AMX" in with_amx and "compiled without it" in with_amx
    assert sparse_kernels(["tensorflow"], AMX_HOST) == {"tensorflow": said["tensorflow"]}
    stored = sparse_kernels(["litert"], AVX512_HOST, "model_fp32.tflite")["litert"]
    assert stored.startswith("not used: model_fp32.tflite stores the pruned weights sparse")
    assert "densifies once when the model loads" in stored and "smaller, not faster" in stored


def test_the_unpruned_float_tflite_is_measured_as_artifacts_are(tmp_path: Path) -> None:
    import gzip

    blob = bytes(4000) + bytes(range(256)) * 8
    measured = unpruned_float(blob, tmp_path)
    assert measured["size_bytes"] == len(blob)
    assert abs(measured["gzip_bytes"] - len(gzip.compress(blob, 9))) <= 16
    assert unpruned_float(tmp_path / "unpruned_fp32.tflite", tmp_path) == measured  # a file the probe wrote
    assert unpruned_float(None, tmp_path) is None


def test_the_section_sets_the_pruned_float_file_against_the_unpruned_and_times_each_runtime() -> None:
    fp32 = replace(artifact("model_fp32.tflite", "tflite_fp32", 40960), gzip_bytes=10240)
    int8 = artifact("model_int8.tflite", "tflite_int8", 10240)
    sparsity = {"target": 0.8, "achieved": 0.8012, "unpruned_fp32": {"size_bytes": 40960, "gzip_bytes": 37888},
                "sparse_kernels": sparse_kernels(["litert"], AVX512_HOST), "one_shot": False}
    timed = (candidate("model_fp32.tflite", "litert", 12.5, 40960), candidate("model_int8.tflite", "litert", 8.0, 10240),
             candidate("model_int8.tflite", "openvino", None, 10240, error="cannot run here"))
    text = lines(sparsity, [fp32, int8], timed)
    assert text[0] == "- sparsity: 80.1% of the pruned layers' weights are zero (target 80.0%)"
    assert text[1] == ("- float .tflite: 40.0 KiB (gzip 10.0 KiB) pruned, against 40.0 KiB (gzip 37.0 KiB) unpruned: "
                       "1.00x the size, 0.27x the gzip size")
    assert "- model_fp32.tflite (pruned): 40.0 KiB, gzip 10.0 KiB; batch-1 p50: litert 12.5 us" in text
    assert "- model_int8.tflite (pruned): 10.0 KiB, gzip 5.0 KiB; batch-1 p50: litert 8.0 us" in text  # untimed: left out
    assert any(t.startswith("- sparse kernels, litert: not used") for t in text)
    assert "no speed is set against them" in " ".join(text)
    without = lines({**sparsity, "unpruned_fp32": None, "unpruned_why": "the model has no plain .tflite"}, [int8], ())
    assert "- no unpruned float .tflite to set against: the model has no plain .tflite" in without
    assert "- model_int8.tflite (pruned): 10.0 KiB, gzip 5.0 KiB; batch-1 p50: not timed" in without


def test_report_md_has_the_section_only_for_a_pruned_model(tmp_path: Path) -> None:
    from builder.optimize.report import write_markdown

    plain = replace(make_report(), host={"threads": 2, "tensorflow": "2.21"})
    write_markdown(plain, tmp_path / "plain.md")
    assert "What pruning bought" not in (tmp_path / "plain.md").read_text()
    pruned = replace(plain, sparsity={"target": 0.5, "achieved": 0.5, "layers": {}, "schedule": None,
                                              "structured": None, "one_shot": True, "unpruned_fp32": None,
                                              "unpruned_why": "the model has no plain .tflite",
                                              "sparse_kernels": {"litert": "not used: x"}})
    write_markdown(pruned, tmp_path / "pruned.md")
    text = (tmp_path / "pruned.md").read_text()
    assert "## What pruning bought" in text and "one-shot by magnitude" in text
    assert "- sparse kernels, litert: not used: x" in text
