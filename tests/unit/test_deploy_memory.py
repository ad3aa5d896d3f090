"""A pod requests the memory its server was measured to need plus stated headroom (`plan.memory_request`), and
the old estimate from the file size, said to be one, when the report has no measured resident memory."""

from __future__ import annotations

from dataclasses import replace

from builder.deploy import plan
from builder.report import MemoryUse, Report
from tests.report_fixture import make_report

MIB = 2**20


def with_resident(report: Report, resident: int) -> Report:
    """The report as optimize writes it where it measured the chosen runner's resident memory."""
    return replace(report, memory=MemoryUse(budget_bytes=8 * 1024 * MIB, peak_bytes=3 * 1024 * MIB,
                                            chosen_runner_bytes=resident))


def base_report() -> Report:
    report = make_report(chosen="model_dynamic.tflite", artifacts=(("model_dynamic.tflite", "tflite"),))
    artifact = replace(report.artifacts[0], size_bytes=105 * MIB, threads=2)
    return replace(report, artifacts=(artifact,))


def test_measured_memory_is_a_copy_a_core_plus_headroom() -> None:
    mib, how = plan.memory_request(171 * MIB, 105 * MIB, cpu_millis=2000)
    needed = plan.FRONT_MEMORY_MIB + 2 * (plan.PROCESS_MEMORY_MIB + 171)
    assert mib % 64 == 0 and needed * (1 + plan.MEMORY_HEADROOM) <= mib < needed * (1 + plan.MEMORY_HEADROOM) + 64
    assert "measured" in how and "171Mi" in how and "2 model processes" in how and "25% headroom" in how


def test_more_cores_more_copies() -> None:
    one, _ = plan.memory_request(400 * MIB, 105 * MIB, cpu_millis=1000)
    four, _ = plan.memory_request(400 * MIB, 105 * MIB, cpu_millis=3500)  # 3.5 cores: up to 4 processes
    assert four - one >= 3 * 400


def test_without_a_measurement_the_estimate_says_so() -> None:
    mib, how = plan.memory_request(None, 105 * MIB, cpu_millis=2000)
    assert mib == 64 * -(-(plan.BASE_MEMORY_MIB + plan.MODEL_MEMORY_FACTOR * 105) // 64)
    assert "estimate, RSS not measured" in how


def test_a_report_with_resident_memory_is_sized_by_it() -> None:
    report = base_report()
    estimated = plan.resources_from_report(report)
    measured = plan.resources_from_report(with_resident(report, 171 * MIB))
    assert plan.measured_resident(report) is None and "estimate" in estimated.source
    assert estimated.memory_mib == 704  # 256 + 4 x 105 = 676, rounded up to 64
    assert measured.memory_mib == plan.memory_request(171 * MIB, 105 * MIB, 2000)[0] == 960  # (128 + 2 x 299) x 1.25
    assert "measured" in measured.source and measured.memory_limit_mib == 2 * measured.memory_mib
    assert plan.resources_from_report(with_resident(report, 171 * MIB),
                                      memory="2Gi").memory_mib == 2048  # the flag still wins
