"""The fleet matrix as data: ids round-trip through --only; every format parses."""

from __future__ import annotations

import json

import pytest
import yaml

from builder.errors import InputError
from builder.build.matrix import entry_id, fleet_matrix, parse_id, render_matrix

FLEET = ["x86-64-v3", "x86-64-v4", "sapphirerapids", "neoverse_v1"]


def test_cpu_entry_per_target_and_cuda_entries_only_for_x86() -> None:
    entries = fleet_matrix(FLEET, ["9.0,8.0"])
    ids = [e.id for e in entries]
    assert ids == [
        "x86-64-v3-cpu", "x86-64-v3-cuda-8.0_9.0", "x86-64-v4-cpu", "x86-64-v4-cuda-8.0_9.0",
        "sapphirerapids-cpu", "sapphirerapids-cuda-8.0_9.0", "neoverse_v1-cpu",
    ]  # fmt: skip
    assert {e.arch for e in entries if e.target == "neoverse_v1"} == {"aarch64"}
    assert {e.arch for e in entries if e.target != "neoverse_v1"} == {"x86_64"}
    assert {e.platform for e in entries if e.target == "neoverse_v1"} == {"linux/arm64"}
    assert {e.platform for e in entries if e.target != "neoverse_v1"} == {"linux/amd64"}


@pytest.mark.parametrize("cuda_cc", ["", "8.0", "9.0,8.0", "7.5,8.6,8.9,9.0"])
@pytest.mark.parametrize("target", FLEET + ["icelake", "zen4"])
def test_every_id_parses_back_to_its_entry(target: str, cuda_cc: str) -> None:
    entry = fleet_matrix([target], [cuda_cc] if cuda_cc else [])[-1]
    assert parse_id(entry.id) == entry


def test_capability_order_does_not_change_the_id() -> None:
    assert entry_id("x86-64-v3", "9.0,8.0") == entry_id("x86-64-v3", "8.0,9.0") == "x86-64-v3-cuda-8.0_9.0"


@pytest.mark.parametrize("bad", ["", "x86-64-v3", "x86-64-v3-gpu", "-cpu", "x86-64-v3-cuda-", "a b-cpu"])
def test_malformed_ids_are_refused(bad: str) -> None:
    with pytest.raises(InputError, match="not a matrix id"):
        parse_id(bad)


def test_host_is_not_a_fleet_target() -> None:
    with pytest.raises(InputError, match="host"):
        fleet_matrix(["host"])


def test_github_format_is_one_line_of_json_with_include() -> None:
    text = render_matrix(fleet_matrix(FLEET, ["8.0,9.0"]), "github")
    assert "\n" not in text
    rows = json.loads(text)["include"]
    assert [parse_id(row["id"]).target for row in rows] == [row["target"] for row in rows]
    assert {row["id"]: row["platform"] for row in rows if row["target"] in ("x86-64-v3", "neoverse_v1")} == {
        "x86-64-v3-cpu": "linux/amd64", "x86-64-v3-cuda-8.0_9.0": "linux/amd64", "neoverse_v1-cpu": "linux/arm64",
    }  # fmt: skip


def test_gitlab_format_is_a_child_pipeline_with_one_job_per_entry() -> None:
    entries = fleet_matrix(FLEET)
    pipeline = yaml.safe_load(render_matrix(entries, "gitlab"))
    jobs = {name: job for name, job in pipeline.items() if name.startswith("build:")}
    assert pipeline["stages"] == ["build"]
    assert sorted(jobs) == sorted(f"build:{e.id}" for e in entries)
    assert jobs["build:neoverse_v1-cpu"]["tags"] == ["aarch64"]
    assert jobs["build:x86-64-v3-cpu"]["script"] == ["tfsmith build --only x86-64-v3-cpu"]


def test_unknown_format_is_refused() -> None:
    with pytest.raises(InputError, match="github, gitlab, json"):
        render_matrix(fleet_matrix(FLEET), "jenkins")


def test_gitlab_jobs_extend_the_setup_job() -> None:
    pipeline = yaml.safe_load(render_matrix(fleet_matrix(["x86-64-v3"]), "gitlab"))
    assert pipeline["build:x86-64-v3-cpu"]["extends"] == ".tfsmith-build"
    assert pipeline[".tfsmith-build"]["stage"] in pipeline["stages"]


def test_example_pipelines_parse_and_use_matrix_then_only(repo_root) -> None:  # noqa: ANN001
    github = yaml.safe_load((repo_root / ".ci/examples/github-actions.yml").read_text())
    steps = " ".join(str(step.get("run", "")) for job in github["jobs"].values() for step in job["steps"])
    assert "tfsmith matrix" in steps and "--format github" in steps and 'tfsmith build --only "${{ matrix.id }}"' in steps
    assert github["jobs"]["image"]["strategy"]["matrix"] == "${{ fromJSON(needs.matrix.outputs.include) }}"
    gitlab = yaml.safe_load((repo_root / ".ci/examples/gitlab-ci.yml").read_text())
    assert "--format gitlab" in " ".join(gitlab["fleet-matrix"]["script"])
    assert gitlab["images"]["trigger"]["include"][0]["artifact"] == "images.yml"


@pytest.mark.parametrize(("targets", "hint"), [(["nope"], None), (["x86-64-v3", "zen44"], "zen4"), (["icelak"], "icelake")])
def test_unknown_targets_are_refused_with_the_closest_names(targets: list[str], hint: str | None) -> None:
    with pytest.raises(InputError, match="unknown target") as caught:
        fleet_matrix(targets)
    if hint:
        assert f"did you mean {hint}" in str(caught.value)
    with pytest.raises(InputError, match="unknown target"):
        parse_id(f"{targets[-1]}-cpu")  # `build --only` refuses the same names
