"""optimize's memory budget as decisions (`builder.optimize.budget`, the race's groups in `builder.optimize.steps`):
what a step is expected to need, when it does not fit and what the line says, how artifacts are grouped for
the race, and how a later group's timings are put on the first group's scale."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.optimize import budget as budgets
from builder.optimize import steps
from builder.report import ArtifactResult, Candidate, Latency, ModelContract, OutputSpec, TensorSpec

MIB = 1024 * 1024


class FixedRoom(budgets.Budget):
    """A budget whose process holds a known amount (the decisions, without this process's own memory)."""

    held = 0

    def room(self, share: float = 1.0) -> int | None:
        return None if self.limit is None else int(self.limit * share) - self.held


def test_the_first_step_of_a_kind_is_sized_by_its_rule_and_later_ones_by_what_the_last_one_took() -> None:
    budget = budgets.Budget(limit=8 * 1024 * MIB, weights=400 * MIB)
    assert budget.need("convert") == int(budgets.RULES["convert"] * 400 * MIB)
    budget.learn("convert", before=1000 * MIB, peak=2000 * MIB)  # took 1000 MiB reading 400 MiB: 2.5x
    assert budget.need("convert") == int(2.5 * 400 * MIB)
    assert budget.need("convert", size=100 * MIB) == int(2.5 * 100 * MIB)  # per byte read, not a fixed amount
    budget.learn("runner:litert", before=1000 * MIB, peak=1001 * MIB, size=100 * MIB)  # a load it shared: nothing
    assert budget.need("runner:litert", size=100 * MIB) == int(budgets.RULES["runner:litert"] * 100 * MIB)


def test_a_runner_is_sized_by_what_a_runner_of_its_own_format_took_else_by_its_runtimes_last() -> None:
    budget = budgets.Budget(limit=8 * 1024 * MIB, weights=400 * MIB)
    fp32, float16, dynamic = (steps.runner_kind("litert", f) for f in ("tflite_fp32", "tflite_float16", "tflite_dynamic"))
    assert (fp32, steps.runner_kind("openvino-bf16")) == ("runner:litert/tflite_fp32", "runner:openvino")
    assert budget.need(float16, 200 * MIB) == int(budgets.RULES["runner:litert"] * 200 * MIB)  # nothing learned: the rule
    budget.learn(float16, before=0, peak=970 * MIB, size=200 * MIB)  # widened to float32 beside its own copy: 4.85x
    budget.learn(dynamic, before=0, peak=205 * MIB, size=100 * MIB)  # 2.05x, learned last
    assert budget.need(float16, 200 * MIB) == int(4.85 * 200 * MIB)  # its own format's, not the last runner's
    assert budget.need(fp32, 400 * MIB) == int(2.05 * 400 * MIB)  # a format not opened yet: the runtime's last
    assert budget.need("runner:litert", 400 * MIB) == int(2.05 * 400 * MIB)


def test_a_step_that_does_not_fit_says_what_it_needs_beside_what_is_in_use_and_what_is_usable() -> None:
    assert budgets.Budget(limit=None, weights=10**12).refusal("convert") is None  # no limit known: no refusal
    tiny = budgets.Budget(limit=64 * MIB, weights=400 * MIB)
    line = tiny.refusal("convert")
    need = budgets.memory.text(int(budgets.RULES["convert"] * 400 * MIB))
    assert line is not None and f"it needs about {need} beside the" in line and "64 MiB is usable" in line
    assert budgets.Budget(limit=10**15, weights=400 * MIB).refusal("convert") is None


def _result(path: str, fmt: str, runtime: str) -> ArtifactResult:
    return ArtifactResult(path=path, format=fmt, runtime=runtime, size_bytes=100 * MIB, gzip_bytes=90 * MIB, threads=2,
                          latency_us=Latency(0.0, 0.0, 0), throughput={}, inputs=(), outputs=(), metrics=(),
                          contract_kept=True, accepted=True, reason="")


CONTRACT = ModelContract(inputs=(TensorSpec("x", "float32", (None, 4)),),
                         outputs=(OutputSpec("y", "float32", (None, 2), "regression", "test"),))


def _pairs(tmp_path: Path, runtimes: tuple[str, ...] = ("litert",)) -> list[steps.Pair]:
    files = [_result(f"m{i}.tflite", "tflite_fp32", "litert") for i in range(4)]
    for f in files:
        (tmp_path / f.path).write_bytes(b"\0" * 1024)
    return [(f, runtime, "") for f in files for runtime in runtimes]


def test_pairs_are_raced_in_groups_that_fit_and_in_one_race_where_everything_does(tmp_path: Path) -> None:
    pairs = _pairs(tmp_path)
    everything = FixedRoom(limit=10**12, weights=0)
    assert steps.race_groups(pairs, tmp_path, {}, everything) == [pairs]
    assert steps.race_groups(pairs, tmp_path, {}, None) == [pairs]
    # each file's runners are learned to take 1000x its size (about 1 MiB each); room for two at a time
    tight = FixedRoom(limit=2 * 5 * MIB, weights=0, taken={"runner:litert": 1000.0, "runner:openvino": 1000.0})
    tight.held = 2 * MIB
    groups = steps.race_groups(pairs, tmp_path, {}, tight)
    assert [g for g in groups if g] and sum(len(g) for g in groups) == 4 and len(groups) > 1
    assert [p for g in groups for p in g] == pairs  # in order, every one once
    nothing = FixedRoom(limit=MIB, weights=0, taken={"runner:litert": 1000.0, "runner:openvino": 1000.0})
    nothing.held = 10 * MIB  # over the budget already: still one pair a group, never none
    assert all(len(g) == 1 for g in steps.race_groups(pairs, tmp_path, {}, nothing))


def test_one_files_runtimes_are_split_between_groups_when_together_they_do_not_fit(tmp_path: Path) -> None:
    pairs = _pairs(tmp_path, ("litert", "openvino"))[:2]  # one file on two runtimes, each its own copy
    tight = FixedRoom(limit=2 * 5 * MIB, weights=0, taken={"runner:litert": 1000.0, "runner:openvino": 1000.0})
    tight.held = 3 * MIB  # room for one runner of about 1 MiB, not two
    assert steps.race_groups(pairs, tmp_path, {}, tight) == [[pairs[0]], [pairs[1]]]


def test_groups_after_one_that_grew_beyond_its_estimate_are_sized_by_that_growth(tmp_path: Path) -> None:
    pairs = _pairs(tmp_path)
    room_for_four = FixedRoom(limit=2 * 5 * MIB, weights=0, taken={"runner:litert": 1000.0})
    room_for_four.held = int(10 * MIB * steps.RACE_SHARE) - 4 * 1000 * 1024  # the share's room: four of 1000 KiB
    assert len(steps.race_groups(pairs, tmp_path, {}, room_for_four)[0]) == 4
    room_for_four.learn_race_growth(expected=1000, before=10_000, after=9_000)  # it shrank: nothing learned
    room_for_four.learn_race_growth(expected=1000, before=None, after=9_000)  # not measured: nothing learned
    assert room_for_four.race_growth == 1.0
    room_for_four.learn_race_growth(expected=1000, before=10_000, after=12_000)  # held twice what it opened at
    assert room_for_four.race_growth == 2.0
    assert [len(g) for g in steps.race_groups(pairs, tmp_path, {}, room_for_four)] == [2, 2]
    room_for_four.learn_race_growth(expected=1000, before=10_000, after=11_500)  # less than the most seen
    assert room_for_four.race_growth == 2.0


def test_pairs_whose_runners_the_evaluation_kept_open_are_raced_in_the_first_group(tmp_path: Path) -> None:
    pairs = _pairs(tmp_path)
    tight = FixedRoom(limit=2 * 5 * MIB, weights=0, taken={"runner:litert": 1000.0, "runner:openvino": 1000.0})
    tight.held = 2 * MIB
    opened = {(str((tmp_path / "m3.tflite").resolve()), "litert", None): object()}
    groups = steps.race_groups(pairs, tmp_path, opened, tight)
    assert groups[0][0][0].path == "m3.tflite"  # open already: it costs nothing to race now
    assert [p[0].path for g in groups for p in g] == ["m3.tflite", "m0.tflite", "m1.tflite", "m2.tflite"]


def test_a_later_group_is_put_on_the_first_groups_scale_through_the_best_so_far() -> None:
    best = Candidate("a.tflite", "litert", 100.0, 50, 10, "", "serving_default", 95.0, 105.0)
    first = Latency(100.0, 150.0, 50, 95.0, 105.0)
    # in the later group the machine was twice as busy: the best took 200 us, the newcomer 160
    found = [Candidate("a.tflite", "litert", 200.0, 50, 10, "", "serving_default", 190.0, 210.0),
             Candidate("b.tflite", "litert", 160.0, 50, 10, "", "serving_default", 150.0, 170.0)]
    timing = {"a.tflite@litert": Latency(200.0, 300.0, 50, 190.0, 210.0),
              "b.tflite@litert": Latency(160.0, 240.0, 50, 150.0, 170.0)}
    rows, times = steps._on_reference_scale(found, timing, (_result("a.tflite", "tflite_fp32", "litert"), best, first),
                                            CONTRACT)
    assert [c.artifact for c in rows] == ["b.tflite"]  # the shared candidate keeps its first row only
    assert rows[0].p50_us == pytest.approx(80.0) and rows[0].ci_low_us == pytest.approx(75.0)
    assert set(times) == {"b.tflite@litert"} and times["b.tflite@litert"].p50 == pytest.approx(80.0)


def test_a_runner_stays_open_for_the_race_only_with_room_for_the_next_evaluations_peak(tmp_path: Path) -> None:
    ir, small = tmp_path / "openvino_fp32.xml", tmp_path / "model_int8.tflite"
    ir.write_bytes(b"x" * 1000)
    ir.with_suffix(".bin").write_bytes(b"x" * (400 * MIB - 1000))  # a 400 MiB float IR still to evaluate
    small.write_bytes(b"x" * MIB)
    budget = FixedRoom(limit=8 * 1024 * MIB, weights=400 * MIB)
    budget.held = 2 * 1024 * MIB  # 2 GiB of the race's 4 GiB share in use
    # OpenVINO compiling the float IR is expected to take 7x its file (2.7 GiB): more than the 2 GiB left
    assert not steps.keeps_room(budget, (("openvino_ir_fp32", ir),))
    assert steps.keeps_room(budget, (("tflite_int8", small),))  # a 1 MiB .tflite next: room enough
    assert steps.keeps_room(budget, ())  # nothing left to evaluate: kept while the share has room
    budget.held = 4 * 1024 * MIB + 1
    assert not steps.keeps_room(budget, ())
    assert steps.keeps_room(None, (("openvino_ir_fp32", ir),))  # no budget: every runner stays open


def test_a_big_models_files_are_asked_two_rows_again_and_a_small_ones_eight() -> None:
    from types import SimpleNamespace

    import numpy as np

    def plan(weights: int, batch: int | None) -> object:
        ledger = SimpleNamespace(budget=budgets.Budget(limit=None, weights=weights))
        loaded = SimpleNamespace(inputs=(TensorSpec("x", "float32", (batch, 4)),))
        return SimpleNamespace(ledger=ledger, loaded=loaded, gate_x={"x": np.zeros((65, 4), np.float32)})

    assert len(steps.repeated_rows(plan(436 * MIB, None))["x"]) == 2
    assert len(steps.repeated_rows(plan(4 * MIB, None))["x"]) == steps.REPEAT_ROWS
    assert len(steps.repeated_rows(plan(436 * MIB, 4))["x"]) == steps.REPEAT_ROWS  # whole fixed batches, as ever


def test_a_call_that_judges_a_model_gets_few_image_rows_and_many_small_ones() -> None:
    import numpy as np

    images = {"image": np.zeros((65, 224, 224, 3), np.float32)}  # 602 KB a row
    assert budgets.rows_by_input_bytes(images) == budgets.CALL_INPUT_BYTES // (224 * 224 * 3 * 4) == 13
    assert budgets.rows_by_input_bytes({"x": np.zeros((65, 64), np.float32)}) == budgets.MANY_ROWS
    assert budgets.rows_by_input_bytes({"x": np.zeros((2, 4096, 4096), np.float32)}) == 1  # never none
