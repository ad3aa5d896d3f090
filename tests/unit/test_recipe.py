"""Recipes: parsing (TOML/YAML, unknown keys, impossible values), `auto` decisions from recorded CPU facts, and
pruning-schedule math that really reaches the target sparsity. Pure: no TensorFlow."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from builder.errors import InputError
from builder.hardware.cpu import cpu_facts_from_text
from builder.optimize.planning import adapt_recipe, explain_lines
from builder.optimize.target import TargetFacts
from builder.optimize.recipe import (
    Pruning,
    Schedule,
    auto_recipe,
    load_recipe,
    pruning_schedule,
    recipe_from_mapping,
)

CPUINFO = Path(__file__).resolve().parents[1] / "fixtures" / "cpuinfo"


def flags_of(name: str) -> frozenset[str]:
    return cpu_facts_from_text((CPUINFO / name).read_text()).features


# --- parsing ------------------------------------------------------------------------------------------


def test_full_toml_recipe(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    path.write_text(
        'choose = "tflite_int8"\n'
        "[pruning]\nsparsity = 0.8\nschedule = \"polynomial\"\nepochs = 3\n"
        '[quantization]\nmodes = ["int8", "float16"]\nqat = true\nqat_epochs = 2\ncalibration_samples = 50\n'
        "[export]\ntflite_fp32 = false\nxla = true\n"
    )
    recipe = load_recipe(path)
    assert recipe.name == "r"
    assert recipe.pruning == Pruning(sparsity=0.8, schedule="polynomial", epochs=3)
    assert recipe.quantization.modes == ("float16", "int8")  # canonical order
    assert recipe.quantization.qat and recipe.quantization.qat_epochs == 2
    assert recipe.formats == ("saved_model", "tflite_float16", "tflite_int8", "tflite_qat_int8", "openvino_ir_fp32",
                              "openvino_ir_int8")  # OpenVINO's IR: float, and NNCF int8 where int8 is built
    assert recipe.choose == "tflite_int8"
    assert recipe.export.xla and not recipe.export.tflite_fp32


def test_yaml_recipe_and_default_choice(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text("name: small\npruning:\n  structured: '2:4'\nquantization:\n  modes: [dynamic]\n")
    recipe = load_recipe(path)
    assert recipe.name == "small"
    assert recipe.pruning is not None and recipe.pruning.structured == (2, 4)
    assert recipe.pruning.target_sparsity == pytest.approx(0.5)
    assert recipe.choose == "tflite_dynamic"  # the most compressed artifact produced


def test_qat_is_default_choice_when_asked() -> None:
    recipe = recipe_from_mapping({"quantization": {"modes": ["int8"], "qat": True}})
    assert recipe.choose == "tflite_qat_int8"


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"prunning": {}}, "unknown key 'prunning'"),
        ({"pruning": {"sparsity": 0.5, "sparsty": 0.5}}, "unknown key 'sparsty'"),
        ({"quantization": {"mode": ["int8"]}}, "unknown key 'mode'"),
        ({"export": {"onnx": True}}, "unknown key 'onnx'"),
        ({"pruning": {"sparsity": 1.5}}, "pruning.sparsity: 1.5 is outside (0.0, 1.0)"),
        ({"pruning": {"sparsity": 0}}, "pruning.sparsity: 0 is outside"),
        ({"pruning": {"sparsity": "high"}}, "pruning.sparsity: expected a number"),
        ({"pruning": {"sparsity": 0.5, "epochs": 0}}, "pruning.epochs: 0 is outside"),
        ({"pruning": {"sparsity": 0.5, "epochs": 1.5}}, "pruning.epochs: expected an integer"),
        ({"pruning": {"sparsity": 0.5, "schedule": "cosine"}}, "pruning.schedule must be one of"),
        ({"pruning": {"sparsity": 0.5, "initial_sparsity": 0.6}}, "must be below sparsity"),
        ({"pruning": {"structured": "4:2"}}, "needs 0 < M < N"),
        ({"pruning": {"structured": "two of four"}}, "expected 'M:N'"),
        ({"pruning": {}}, "pruning.sparsity is required"),
        ({"pruning": 0.8}, "pruning: expected a table"),
        ({"quantization": {"modes": ["int4"]}}, "unknown mode 'int4'"),
        ({"quantization": {"modes": "int8"}}, "must be a list"),
        ({"quantization": {"qat": "yes"}}, "quantization.qat: expected true or false"),
        ({"quantization": {"calibration_samples": 0}}, "calibration_samples: 0 is outside"),
        ({"choose": "tflite_float16"}, "choose = 'tflite_float16' is not produced"),
    ],
)
def test_bad_recipes_are_one_line_errors(data: dict, fragment: str) -> None:
    with pytest.raises(InputError) as error:
        recipe_from_mapping(data, source="r.toml")
    message = str(error.value)
    assert fragment in message
    assert "\n" not in message and message.startswith("r.toml")


def test_unparseable_and_missing_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[pruning\nsparsity = ")
    with pytest.raises(InputError, match="not valid TOML"):
        load_recipe(bad)
    with pytest.raises(InputError, match="no such file"):
        load_recipe(tmp_path / "missing.toml")
    other = tmp_path / "r.json"
    other.write_text("{}")
    with pytest.raises(InputError, match="unknown format .json"):
        load_recipe(other)


# --- auto, from recorded facts ------------------------------------------------------------------------


def test_auto_on_this_vm_zen3_without_vnni_picks_dynamic_range() -> None:
    flags = flags_of("this-vm-amd-epyc-zen3")
    assert "avx2" in flags and not flags & {"avx512_vnni", "avx_vnni", "amx_int8"}
    recipe, reasons = auto_recipe(flags, (), "x86_64")
    assert recipe.choose == "tflite_dynamic"
    assert "float16" not in recipe.quantization.modes
    assert not recipe.export.xla
    assert any("lacks int8 dot-product" in r for r in reasons)
    assert any(r.startswith("xla: off on CPU") for r in reasons)


def test_auto_on_sapphire_rapids_guest_picks_int8_and_emits_float16() -> None:
    flags = flags_of("xeon-spr-guest-amx-hidden")
    recipe, reasons = auto_recipe(flags, (), "x86_64")
    assert recipe.choose == "tflite_int8"
    assert "float16" in recipe.quantization.modes  # avx512_bf16/avx512_fp16 present
    assert any("avx512_vnni" in r for r in reasons if r.startswith("quantization:"))


def test_auto_on_graviton3_uses_arm_dot_product_flags() -> None:
    flags = flags_of("aws-graviton3-neoverse-v1-sve")
    recipe, reasons = auto_recipe(flags, (), "aarch64")
    assert recipe.choose == "tflite_int8"
    assert any("asimddp" in r for r in reasons)


def test_auto_on_sandy_bridge_is_dynamic_and_arm_flags_do_not_count_on_x86() -> None:
    recipe, _ = auto_recipe(flags_of("old-xeon-e5-2670-sandybridge") | {"asimddp"}, (), "x86_64")
    assert recipe.choose == "tflite_dynamic"


@pytest.mark.parametrize(("ccs", "tensor_cores"), [(("8.0", "9.0"), True), (("6.1",), False), ((), False)])
def test_auto_gpu_capability_decides_half_precision_and_xla(ccs: tuple[str, ...], tensor_cores: bool) -> None:
    recipe, reasons = auto_recipe(frozenset({"avx2"}), ccs, "x86_64")
    assert ("float16" in recipe.quantization.modes) is tensor_cores
    assert recipe.export.xla is tensor_cores
    assert (recipe.choose == "saved_model") is tensor_cores
    assert len(reasons) >= 5 and all(reasons)


def test_every_auto_choice_has_a_reason() -> None:
    _, reasons = auto_recipe(frozenset(), (), "x86_64")
    topics = {r.split(":")[0] for r in reasons}
    assert {"quantization", "precision", "xla", "pruning", "qat", "export"} <= topics


# --- adapting to the model, explaining --------------------------------------------------------------


def test_a_model_nothing_fine_tunes_drops_pruning_and_qat_and_keeps_a_valid_choice() -> None:
    recipe = recipe_from_mapping({"pruning": {"sparsity": 0.8},
                                  "quantization": {"modes": ["int8"], "qat": True}})
    assert recipe.choose == "tflite_qat_int8"
    adapted, notes = adapt_recipe(recipe, "a SavedModel without a Keras model inside: ...", has_train=True)
    assert adapted.pruning is None and not adapted.quantization.qat
    assert adapted.choose == "tflite_int8"
    assert any("pruning and QAT skipped" in n.line for n in notes)


def test_keras3_model_keeps_pruning_and_drops_only_qat() -> None:
    """tfsmith prunes a Keras 3 model itself; QAT is tfmot's, which takes only tf_keras models."""
    recipe = recipe_from_mapping({"pruning": {"sparsity": 0.8},
                                  "quantization": {"modes": ["int8"], "qat": True}})
    adapted, notes = adapt_recipe(recipe, None, has_train=True, why_not_qat="a Keras 3.15.1 model: ...")
    assert adapted.pruning == recipe.pruning and not adapted.quantization.qat
    assert adapted.choose == "tflite_int8"
    assert [n.step for n in notes if n.step != "choice"] == ["quantization-aware training"]
    assert any(n.line == "QAT skipped: the model is a Keras 3.15.1 model: ..." for n in notes)


def test_auto_without_training_rows_skips_pruning() -> None:
    recipe, _ = auto_recipe(frozenset(), (), "x86_64")
    adapted, notes = adapt_recipe(recipe, None, has_train=False)
    assert adapted.pruning is None and notes


def test_auto_without_training_rows_keeps_pruning_where_it_can_be_one_shot() -> None:
    recipe, _ = auto_recipe(frozenset(), (), "x86_64")
    adapted, notes = adapt_recipe(recipe, None, has_train=False, one_shot=True)
    assert adapted.pruning == recipe.pruning and not [n for n in notes if n.step == "pruning"]


def test_explain_lists_artifacts_choice_and_reasons() -> None:
    recipe, reasons = auto_recipe(frozenset({"avx512_vnni"}), (), "x86_64")
    lines = explain_lines(recipe, reasons, TargetFacts("icelake", "x86_64", frozenset({"avx512_vnni"}), ()), None)
    text = "\n".join(lines)
    assert "chosen: model_int8.tflite" in text
    assert sum(line.startswith("why: ") for line in lines) == len(reasons)


# --- schedule math ----------------------------------------------------------------------------------


def polynomial_sparsity(step: int, s: Schedule, initial: float, final: float) -> float:
    """tfmot's PolynomialDecay (power 3) value at `step`."""
    if s.end_step == s.begin_step:  # a one-step run: prune_model uses ConstantSparsity
        return final
    progress = min(1.0, max(0.0, (min(step, s.end_step) - s.begin_step) / (s.end_step - s.begin_step)))
    return final + (initial - final) * (1 - progress) ** 3


def last_mask_update(begin: int, end: int, frequency: int, total_steps: int) -> int:
    """The last training step on which tfmot moves the masks (it prunes when (step - begin) % f == 0)."""
    steps = [t for t in range(total_steps) if begin <= t <= end and (t - begin) % frequency == 0]
    return steps[-1]


def test_default_frequency_100_stops_short_of_the_target() -> None:
    # A 0.80 target stopped at 0.786 with the default frequency=100 and end_step = the number of steps (150 here):
    # the last update happens at step 100, two thirds of the way, and masks never move again.
    end, total = 150, 150
    last = last_mask_update(0, end, 100, total)
    assert last == 100
    assert polynomial_sparsity(last, Schedule(0, end, 100), 0.0, 0.8) < 0.79


@given(steps_per_epoch=st.integers(1, 400), epochs=st.integers(1, 30),
       final=st.floats(0.05, 0.95), initial=st.floats(0.0, 0.04))
def test_schedule_last_update_lands_on_end_and_reaches_target(steps_per_epoch: int, epochs: int,
                                                              final: float, initial: float) -> None:
    s = pruning_schedule(steps_per_epoch, epochs)
    total = steps_per_epoch * epochs
    assert 0 <= s.begin_step <= s.end_step <= total - 1
    assert (s.end_step - s.begin_step) % s.frequency == 0
    assert last_mask_update(s.begin_step, s.end_step, s.frequency, total) == s.end_step
    assert s.updates[-1] == s.end_step
    assert polynomial_sparsity(s.updates[-1], s, initial, final) == pytest.approx(final)


def test_schedule_refuses_no_training_steps() -> None:
    with pytest.raises(InputError, match="at least one training step"):
        pruning_schedule(0, 3)
