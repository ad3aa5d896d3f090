"""The Engine's container API as callers use it, on the fake engine (our logic) and on recorded Docker answers.

Docker's own behaviour (ports really published, SIGTERM, healthchecks) is checked against the real engine in
tests/engine/test_engine_api.py; here: the handle's contract (one-line exit summaries, always removed, stop
is idempotent), what callers ask for, and how the Docker implementation reads real inspect output.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from builder.bench.images import compare_images
from builder.engine.base import Container, ContainerState, EngineError, Image, ImageConfig, ImageNotFound, Mount
from builder.engine.docker import _published, _state, _to_image
from builder.engine.fake import FakeEngine, FakeScript

BASE = Image("sha256:base", ("base:1",))
SERVER = Image("sha256:server", ("server:1",))


def _engine(**scripts: FakeScript) -> FakeEngine:
    engine = FakeEngine(images={image.id: image for image in (BASE, SERVER)})
    engine.scripts.update({ref.replace("_", ":"): script for ref, script in scripts.items()})
    return engine


# --- the handle -----------------------------------------------------------------------------------------
def test_a_started_server_publishes_each_port_on_loopback_and_records_the_request() -> None:
    engine = _engine(server_1=FakeScript(health="healthy"))
    with engine.start("server:1", ["--port", "8501"], entrypoint=["python3", "-m", "server"], env={"A": "1"},
                      ports=[8501, 8500], name="smoke-1", labels={"io.tfsmith.smoke": "1"}) as container:
        assert container.url(8501).startswith("http://127.0.0.1:") and container.host == "127.0.0.1"
        assert container.host_port(8501) != container.host_port(8500)
        assert container.exited() is None and container.health() == "healthy"
        assert container.state() == ContainerState("running", None, "healthy")
        with pytest.raises(EngineError, match=r"^container smoke-1 publishes no port 9000 \(published: 8500, 8501\)$"):
            container.url(9000)
    request = engine.started[0]
    assert (request.ref, request.command, request.entrypoint) == ("server:1", ("--port", "8501"), ("python3", "-m", "server"))
    assert (request.env, request.name, request.labels, request.network) == ({"A": "1"}, "smoke-1", {"io.tfsmith.smoke": "1"}, True)
    assert engine.containers == {}  # removed on the way out


def test_leftovers_are_found_by_label() -> None:
    engine = _engine()
    kept = engine.start("server:1", labels={"io.tfsmith.smoke": "1", "run": "a"}, ports=[8501])
    engine.start("server:1", labels={"io.tfsmith.smoke": "1", "run": "b"})
    assert engine.list_containers({"run": "a"}) == [kept] and engine.list_containers({"run": "a"})[0].ports == kept.ports
    assert len(engine.list_containers({"io.tfsmith.smoke": "1"})) == 2
    for container in engine.list_containers({"io.tfsmith.smoke": "1"}):
        container.remove()
    assert engine.list_containers({}) == []


def test_exited_says_the_code_and_the_last_lines_in_one_line() -> None:
    engine = _engine(server_1=FakeScript(exit_code=1, output="starting\n", errors="Traceback\n\nValueError: bad model\n"))
    with engine.start("server:1", ports=[8501]) as container:
        assert container.exited() == "exit 1: starting | Traceback | ValueError: bad model"
        assert container.exited(lines=1) == "exit 1: ValueError: bad model"
        assert container.logs(stdout=False) == "Traceback\n\nValueError: bad model\n"


def test_stop_returns_the_exit_code_and_can_be_repeated() -> None:
    engine = _engine(server_1=FakeScript(stop_code=143))
    with engine.start("server:1") as container:
        assert container.stop(timeout=5) == 143
        assert container.stop() == 143
        assert container.exited() == "exit 143: no output"


def test_the_container_is_removed_even_when_the_body_fails() -> None:
    engine = _engine()
    with pytest.raises(RuntimeError), engine.start("server:1") as container:
        raise RuntimeError("smoke failed")
    assert engine.containers == {}
    with pytest.raises(EngineError, match="is gone"):
        container.state()
    container.remove()  # already gone: fine


def test_run_is_start_wait_logs_and_always_removes() -> None:
    engine = _engine(base_1=FakeScript(exit_code=3, output="refused\n"))
    assert engine.run("base:1", ["python3", "-c", "1"], timeout=5) == (3, "refused\n")
    assert engine.containers == {}
    with pytest.raises(EngineError, match=r"did not finish within 5 s"):
        engine.run("server:1", timeout=5)  # runs until stopped
    assert engine.containers == {}


def test_run_results_table_still_answers() -> None:
    engine = _engine()
    engine.run_results["base:1"] = (1, "")
    assert engine.run("base:1", ["sh", "-c", "command -v x"]) == (1, "")


def test_no_image_no_pull_and_no_ports_without_a_network() -> None:
    engine = _engine()
    with pytest.raises(ImageNotFound):
        engine.start("absent:1")
    with pytest.raises(EngineError, match="without a network"):
        engine.start("server:1", ports=[8501], network=False)
    engine.start("server:1", name="taken")
    with pytest.raises(EngineError, match="already in use"):
        engine.start("server:1", name="taken")
    assert engine.pulls == []


def test_exec_answers_from_the_script() -> None:
    engine = _engine(server_1=FakeScript(exec_results={"id -u": (0, "10001\n")}))
    with engine.start("server:1") as container:
        assert container.exec(["id", "-u"]) == (0, "10001\n")
        container.stop()
        with pytest.raises(EngineError, match="not running"):
            container.exec(["id", "-u"])


def test_a_detached_handle_says_so() -> None:
    with pytest.raises(EngineError, match="not attached to an engine"):
        Container(id="x", name="lost", image="i").logs()


def test_images_are_listed_removed_and_pulled() -> None:
    engine = _engine()
    engine.tag("server:1", "server:2")
    engine.remove_image("server:1")
    assert engine.inspect("server:2").tags == ("server:2",)
    assert {image.id for image in engine.list_images()} == {BASE.id, SERVER.id}
    engine.remove_image("no-such:1")  # absent: fine
    with pytest.raises(EngineError, match="pull of reg:5000/x:1 failed"):
        engine.pull("reg:5000/x:1")
    engine.registry["reg:5000/x:1"] = Image("sha256:x")
    assert engine.pull("reg:5000/x:1").tags == ("reg:5000/x:1",)


# --- bench --images through the Engine -------------------------------------------------------------------
def _saved_model(tmp_path: Path) -> Path:
    (tmp_path / "out" / "saved_model").mkdir(parents=True)
    (tmp_path / "out" / "saved_model" / "saved_model.pb").write_bytes(b"")
    return tmp_path / "out"


def test_bench_images_runs_each_image_offline_with_read_only_mounts(tmp_path: Path) -> None:
    result = '{"latency": {"p50": %s}, "tensorflow": "2.21.0"}\n'
    engine = _engine(base_1=FakeScript(exit_code=0, output=result % 0.002, errors="W tensorflow: noise\n"),
                     server_1=FakeScript(exit_code=0, output=result % 0.001))
    comparison = compare_images(_saved_model(tmp_path), "base:1", "server:1", threads=2, batch=1, budget_s=4,
                                rounds=2, engine=engine)
    assert comparison.ratio == pytest.approx(0.5) and not comparison.first.error
    assert [r.ref for r in engine.started] == ["base:1", "server:1", "base:1", "server:1"]  # alternating
    assert all(not r.network and r.entrypoint == ("python3",) for r in engine.started)
    assert all(isinstance(m, Mount) and m.read_only for r in engine.started for m in r.mounts)
    assert len({r.name for r in engine.started}) == 4 and engine.containers == {}


def test_bench_images_reports_an_image_that_cannot_run_it(tmp_path: Path) -> None:
    engine = _engine(base_1=FakeScript(exit_code=1, errors="Traceback\nModuleNotFoundError: No module named 'numpy'\n"))
    comparison = compare_images(_saved_model(tmp_path), "base:1", "absent:1", threads=1, batch=1, budget_s=1,
                                engine=engine)
    assert comparison.ratio is None
    assert comparison.first.error == "exit 1: ModuleNotFoundError: No module named 'numpy'"
    assert comparison.second.error.startswith("no image absent:1 to run")
    assert [r.ref for r in engine.started] == ["base:1"]  # a failed image is not retried
    assert engine.containers == {} and engine.pulls == []


# --- the Docker implementation reads what Docker really answers -------------------------------------------
def _recorded(fixtures_dir: Path, name: str) -> dict:  # type: ignore[type-arg]
    return json.loads((fixtures_dir / "engine" / name).read_text())


def test_published_ports_and_state_from_a_running_container(fixtures_dir: Path) -> None:
    attrs = _recorded(fixtures_dir, "container-inspect-running.json")
    assert _published(attrs) == {8500: 32772, 8501: 32771}
    assert _state(attrs) == ContainerState("running", None, "healthy")  # a running one reports ExitCode 0: ignored


def test_state_of_a_stopped_container(fixtures_dir: Path) -> None:
    attrs = _recorded(fixtures_dir, "container-inspect-exited.json")
    assert _state(attrs) == ContainerState("exited", 137, "unhealthy")
    assert _published(attrs) == {}  # ports are released once it stops


def test_image_config_from_a_recorded_inspect(fixtures_dir: Path) -> None:
    attrs = _recorded(fixtures_dir, "image-inspect.json")
    image = _to_image(SimpleNamespace(id=attrs["Id"], tags=attrs["RepoTags"], attrs=attrs))
    assert image.labels["io.tfsmith.runtime"] == "litert"
    assert image.config.user == "10001:10001" and image.config.workdir == "/srv"
    assert image.config.healthcheck == ("CMD", "python3", "-c", "print(1)")
    assert image.config.exposed_ports == (8500, 8501)
    assert (image.config.entrypoint, image.config.cmd) == (("python3", "-m"), ("http.server", "8501"))
    assert image.config.env["MODEL_NAME"] == "digits" and "PATH" in image.config.env
    assert Image("sha256:x").config == ImageConfig()
