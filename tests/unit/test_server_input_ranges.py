"""The values the original model refuses, kept: the probe that measures what it accepts of an integer input
(`builder.optimize.accepted`, against fake originals that refuse as TensorFlow's kernels do), the range's
place in report.json, and the server's check of a call against it (`builder.server.core.ranges`)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from builder.model.failures import ModelInputError
from builder.model.signature import SignatureSpec
from builder.optimize.accepted import measure_range, measure_ranges, parse_bound, range_note
from builder.report import InputRange, Report, TensorSpec
from builder.server.core.call import Call, RequestError
from builder.server.core.outcome import outcome_of
from builder.server.core.ranges import check_ranges, first_refused, served_ranges
from builder.server.core.dataplane import ServedModel
from tests.report_fixture import make_report

TF_MESSAGE = ("Graph execution error:\n\nDetected at node functional_1/embedding_1/GatherV2 defined at (most recent "
              "call last):\n<stack traces unavailable>\nindices[0,0] = 7 is not in [0, 3)\n\t [[{{node "
              "functional_1/embedding_1/GatherV2}}]] [Op:__inference_signature_wrapper___call___428]")
CLASS_ID = TensorSpec("class_id", "int32", (None, 1))
ROW = {"class_id": np.array([[1]], dtype=np.int32), "z": np.zeros((1, 4), dtype=np.float32)}


class InvalidArgumentError(Exception):
    """Named as TensorFlow's is: what its kernels raise for an index outside a table."""


class Table:
    """A fake original with a `rows`-row table behind `class_id`: TensorFlow's refusal and wording; `wrap`:
    negative ids counted from the end first, as Keras 3's `Embedding` (`ops.take`) does."""

    def __init__(self, rows: int, wrap: bool = False, say_bound: bool = True) -> None:
        self.rows, self.wrap, self.say_bound, self.calls = rows, wrap, say_bound, 0

    def __call__(self, x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.calls += 1
        ids = x["class_id"].astype(np.int64)
        if self.wrap:
            ids = np.where(ids < 0, ids + self.rows, ids)
        bad = (ids < 0) | (ids >= self.rows)
        if bad.any():
            value = int(ids[bad][0])
            raise InvalidArgumentError(f"indices[0,0] = {value} is not in [0, {self.rows})" if self.say_bound
                                       else "gather index out of bounds")
        return {"out": ids.astype(np.float32)}


# --- the probe ---------------------------------------------------------------------------------------------


def test_the_bound_is_read_from_tensorflows_message() -> None:
    assert parse_bound(TF_MESSAGE) == (0, 3)
    assert parse_bound("indices[2] = -1 is not in [0, 30522)") == (0, 30522)
    assert parse_bound("gather index out of bounds. Node number 3 (GATHER) failed to invoke.") is None


def test_a_table_of_three_rows_is_measured_in_a_few_calls() -> None:
    table = Table(3)
    found, note = measure_range(table, ROW, CLASS_ID, np.array([[0], [2], [1]], dtype=np.int32))
    assert (found, note) == (InputRange("class_id", 0, 3), None)
    assert table.calls <= 8, table.calls


def test_keras3_wrapped_negative_ids_are_accepted_as_the_original_accepts_them() -> None:
    found, _ = measure_range(Table(3, wrap=True), ROW, CLASS_ID, np.array([[0], [2]], dtype=np.int32))
    assert found == InputRange("class_id", -3, 3)


def test_a_refusal_without_a_bound_in_its_message_is_bisected() -> None:
    table = Table(1000, say_bound=False)
    found, _ = measure_range(table, ROW, TensorSpec("class_id", "int64", (None, 1)), np.array([[5]]))
    assert found == InputRange("class_id", 0, 1000)
    assert table.calls <= 2 * 64 + 16, table.calls


def test_a_small_dtype_climbs_to_its_own_limit() -> None:
    found, _ = measure_range(Table(100), ROW, TensorSpec("class_id", "int8", (None, 1)), np.array([[3]]))
    assert found == InputRange("class_id", 0, 100)
    found, _ = measure_range(Table(1000), ROW, TensorSpec("class_id", "uint8", (None, 1)), np.array([[3]]))
    assert found is None  # every uint8 is in a 1000-row table, and none is negative


def test_int64_is_probed_no_farther_than_int32s_limit() -> None:
    asked: list[int] = []

    def original(x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        asked.append(int(x["class_id"].max()))
        return {}

    assert measure_range(original, ROW, TensorSpec("class_id", "int64", (None, 1)), np.array([[1]])) == (None, None)
    assert max(asked) == 2**31 - 1 and min(asked) == -(2**31) and len(asked) <= 20, asked


def test_an_input_without_a_table_records_nothing() -> None:
    found, note = measure_range(lambda x: {"out": x["class_id"] * 2}, ROW, CLASS_ID, np.array([[1]]))
    assert (found, note) == (None, None)


def test_a_probe_failing_for_another_cause_records_nothing_with_one_line() -> None:
    def original(x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if int(x["class_id"].max()) > 100:
            raise MemoryError("cannot allocate\nsecond line")
        return {}

    found, note = measure_range(original, ROW, CLASS_ID, np.array([[1]]))
    assert found is None and note is not None and "'class_id'" in note and "MemoryError: cannot allocate" in note
    assert "\n" not in note


def test_an_input_that_drives_the_work_stops_the_climb() -> None:
    now = [0.0]  # a clock the model moves: no test of ours reads the machine's

    def original(x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:  # a length: the larger, the slower
        size = abs(int(x["class_id"].max()))
        now[0] += 0.001 + min(size, 4096) / 4096 * 0.4
        if size >= 2 ** 20:  # only reached when the climb goes on past a slow value
            raise InvalidArgumentError("indices[0] = 1048576 is not in [0, 1048576)")
        return {}

    assert measure_range(original, ROW, CLASS_ID, np.array([[1]]), clock=lambda: now[0]) == (None, None)


def test_only_integer_inputs_are_probed_and_the_note_names_the_range() -> None:
    table = Table(3)
    inputs = (CLASS_ID, TensorSpec("z", "float32", (None, 4)))
    x = {"class_id": np.array([[0], [1]], dtype=np.int32), "z": np.zeros((2, 4), dtype=np.float32)}
    ranges, notes = measure_ranges(table, inputs, x)
    assert ranges == (InputRange("class_id", 0, 3),) and notes == []
    assert range_note(ranges) == ("the original refuses integer values outside 'class_id' in [0, 3) (measured); the "
                                  "server refuses them too, with 400")
    assert measure_ranges(table, (TensorSpec("z", "float32", (None, 4)),), x) == ((), [])


def test_the_range_travels_in_report_json_and_old_reports_read_without_it(tmp_path: Path) -> None:
    report = make_report(chosen="model.tflite", artifacts=[("model.tflite", "tflite_fp32")],
                         inputs=(("class_id", "int32", (None, 1)),))
    ranged = dataclasses.replace(report, model=dataclasses.replace(report.model, contract=dataclasses.replace(
        report.model.contract, input_ranges=(InputRange("class_id", -3, 3), InputRange("n", None, 10)))))
    ranged.write(tmp_path)
    assert Report.load(tmp_path).model.contract.input_ranges == (InputRange("class_id", -3, 3),
                                                                InputRange("n", None, 10))
    data = json.loads((tmp_path / "report.json").read_text())
    del data["model"]["contract"]["input_ranges"]
    assert Report.from_dict(data).model.contract.input_ranges == ()


# --- the server's check ------------------------------------------------------------------------------------


def test_the_first_value_outside_is_named_with_its_place() -> None:
    values = np.array([[0, 1], [2, 7], [-9, 3]], dtype=np.int32)
    refused = first_refused("ids", values, 0, 3)
    assert refused is not None and (refused.value, refused.index) == (7, (1, 1))
    assert refused.message() == ("input 'ids': value 7 at [1, 1] is not in [0, 3), the values the original model "
                                 "accepts (its table has 3 rows)")
    assert first_refused("ids", values, -9, 8) is None
    assert first_refused("ids", np.zeros((0, 2), np.int32), 0, 3) is None
    assert first_refused("ids", values, None, 3).value == 7  # type: ignore[union-attr]
    below = first_refused("ids", values, -3, None)
    assert below is not None and below.value == -9 and "is not in [-3, inf)" in below.message()


RANGES = {"serving_default": (InputRange("class_id", -3, 3),)}


def test_a_call_with_an_id_outside_is_a_400_invalid_argument() -> None:
    call = Call("serving_default", {"class_id": np.array([[1], [7]], np.int32), "z": np.zeros((2, 4), np.float32)}, 2)
    with pytest.raises(RequestError) as refused:
        check_ranges(call, RANGES)
    said = outcome_of(refused.value)
    assert (said.http, said.grpc, said.label) == (400, 3, "INVALID_ARGUMENT")
    assert said.reason.startswith("input 'class_id': value 7 at [1, 0] is not in [-3, 3)")
    check_ranges(Call("serving_default", {"class_id": np.array([[-3], [2]], np.int32)}, 2), RANGES)
    check_ranges(Call("other", {"class_id": np.array([[7]], np.int32)}, 1), RANGES)  # another signature's ids


def test_the_served_model_refuses_before_its_batcher_runs() -> None:
    class Batcher:
        calls = 0

        async def predict(self, call: Call) -> dict[str, np.ndarray]:
            Batcher.calls += 1
            return {"out": np.zeros(1)}

    served = ServedModel("gan", 1, {}, Batcher(), "litert", ranges=RANGES, ready=True)  # type: ignore[arg-type]
    with pytest.raises(RequestError):
        asyncio.run(served.predict(Call("serving_default", {"class_id": np.array([[7]], np.int32)}, 1)))
    assert Batcher.calls == 0 and served.active == 0
    asyncio.run(served.predict(Call("serving_default", {"class_id": np.array([[2]], np.int32)}, 1)))
    assert Batcher.calls == 1


def test_the_server_reads_the_ranges_beside_the_model_it_serves(tmp_path: Path) -> None:
    report = make_report(chosen="model.tflite", artifacts=[("model.tflite", "tflite_fp32")],
                         inputs=(("class_id", "int32", (None, 1)), ("z", "float32", (None, 4))))
    contract = dataclasses.replace(report.model.contract, input_ranges=(InputRange("class_id", 0, 3),
                                                                        InputRange("z", 0, 1)))
    dataclasses.replace(report, model=dataclasses.replace(report.model, contract=contract)).write(tmp_path)
    signature = SignatureSpec("serving_default", (TensorSpec("class_id", "int32", (None, 1)),
                                                  TensorSpec("z", "float32", (None, 4))), ())
    assert served_ranges(tmp_path / "model.tflite", {"serving_default": signature}) == {
        "serving_default": (InputRange("class_id", 0, 3),)}  # a float input is never range-checked
    assert served_ranges(tmp_path / "elsewhere" / "model.tflite", {"serving_default": signature}) == {}
    (tmp_path / "report.json").write_text("{")
    assert served_ranges(tmp_path / "model.tflite", {"serving_default": signature}) == {}
