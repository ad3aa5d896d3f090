"""HostFacts JSON: stable, round-trips, and rejects foreign files with one clear error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builder.errors import InputError
from builder.hardware import detect_host, load_facts
from builder.hardware.facts import SCHEMA, HostFacts

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_round_trip_with_gpus() -> None:
    facts = detect_host(FIXTURES / "cpuinfo" / "xeon-spr-guest-amx-hidden", FIXTURES / "gpu" / "mixed-a100-h100.csv")
    data = facts.to_dict()
    assert data["schema"] == SCHEMA
    again = HostFacts.from_dict(json.loads(json.dumps(data)))
    assert again == facts
    assert [g.compute_capability for g in again.gpus] == ["8.0", "9.0"] and again.gpu_status == "ok"
    assert data["cpu"]["features"] == sorted(data["cpu"]["features"])


def test_json_keys_are_stable() -> None:
    data = detect_host(FIXTURES / "cpuinfo" / "this-vm-amd-epyc-zen3").to_dict()
    assert list(data) == ["schema", "cpu", "gpu"]
    assert set(data["cpu"]) == {
        "arch", "vendor", "model_name", "microarchitecture", "level", "features", "cpu_part",
        "logical_cpus", "usable_cpus", "total_memory_bytes", "usable_memory_bytes",
    }
    assert set(data["gpu"]) == {"status", "detail", "source", "driver_version", "cuda_driver_version", "devices"}
    assert data["gpu"]["status"] == "no-driver" and "no GPU facts recorded" in data["gpu"]["detail"]


def test_load_facts_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read"):
        load_facts(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(InputError, match="not JSON"):
        load_facts(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text(json.dumps({"cpu": {}}))
    with pytest.raises(InputError, match="tfsmith detect --json"):
        load_facts(tmp_path / "other.json")
    (tmp_path / "broken.json").write_text(json.dumps({"schema": SCHEMA, "cpu": {"vendor": "x"}}))
    with pytest.raises(InputError, match="malformed"):
        load_facts(tmp_path / "broken.json")


def test_unknown_keys_are_ignored_for_forward_compatibility(tmp_path: Path) -> None:
    data = detect_host(FIXTURES / "cpuinfo" / "aws-graviton3-neoverse-v1-sve").to_dict()
    data["cpu"]["added_later"] = 1
    data["future"] = {}
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(data))
    assert load_facts(path).cpu.microarchitecture == "neoverse_v1"
