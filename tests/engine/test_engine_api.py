"""The Engine's container API on the real Docker engine: what smoke tests, bench and callers rely on.

A long-running server with published ports answers on 127.0.0.1 at the host port the handle names; env,
labels, mounts, user and `network=False` reach the container; SIGTERM handling shows in `stop`'s exit
code; a healthcheck's verdict shows in `health`; a dead container says why in one line; and whatever
happens, no container is left behind. Images and containers are named `tfsmith-test-engine-*`.
"""

from __future__ import annotations

import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from builder.engine.base import BuildRequest, Container, EngineError, ImageNotFound, Mount
from builder.engine.docker import DockerEngine

PREFIX = "tfsmith-test-engine"
HEALTHY = f"{PREFIX}-healthy:1"
SERVE = ["python3", "-c", (
    "import http.server, os, signal, sys\n"
    "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        body = os.environ.get('GREETING', '').encode()\n"
    "        self.send_response(200); self.end_headers(); self.wfile.write(body)\n"
    "print('listening', flush=True)\n"
    "http.server.HTTPServer(('0.0.0.0', 8000), H).serve_forever()\n"
)]  # fmt: skip


@pytest.fixture(scope="module")
def engine(docker_engine: None) -> Iterator[DockerEngine]:
    engine = DockerEngine()
    yield engine
    for image in engine.list_images():
        for tag in image.tags:
            if tag.startswith(PREFIX):
                engine.remove_image(tag)


def _name() -> str:
    return f"{PREFIX}-{uuid.uuid4().hex[:8]}"


def _get(url: str, wait_s: float = 20.0) -> str:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - loopback
                return response.read().decode()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _gone(engine: DockerEngine, container: Container) -> bool:
    try:
        engine.container_state(container.id)
    except EngineError:
        return True
    return False


def test_a_long_running_server_answers_on_its_published_port(engine: DockerEngine, base_image: str) -> None:
    name = _name()
    with engine.start(base_image, SERVE, env={"GREETING": "hello"}, ports=[8000], name=name,
                      labels={"io.tfsmith.test": "api", "io.tfsmith.name": name}) as container:
        assert container.name == name and container.image == base_image
        assert container.url(8000) == f"http://127.0.0.1:{container.ports[8000]}"
        assert _get(container.url(8000)) == "hello"
        assert container.exited() is None and container.health() == "none"
        assert engine.list_containers({"io.tfsmith.test": "api", "io.tfsmith.name": name}) == [container]
        assert container.exec(["sh", "-c", "echo $GREETING; id -u"]) == (0, "hello\n0\n")
        assert "listening" in container.logs(stderr=False)
        assert container.stop(timeout=10) == 0  # it handled SIGTERM
        assert container.exited() is not None and container.exited().startswith("exit 0: ")
        assert container.stop() == 0  # already stopped: same answer
    assert _gone(engine, container) and engine.list_containers({"io.tfsmith.name": name}) == []


def test_a_server_that_ignores_sigterm_is_killed_after_the_timeout(engine: DockerEngine, base_image: str) -> None:
    with engine.start(base_image, ["sleep", "600"]) as container:  # PID 1 without a handler ignores SIGTERM
        assert container.stop(timeout=1) == 137  # SIGKILL's code: the timeout ran out and it was killed
        assert container.state().exit_code == 137


def test_a_dead_container_says_why_and_is_removed_even_on_error(engine: DockerEngine, base_image: str) -> None:
    # one stream: Docker keeps the order within stdout or stderr, not between them
    script = "import sys; print('loading model', file=sys.stderr); sys.exit('bad model: no such file /model/x.tflite')"
    with pytest.raises(AssertionError, match="the caller failed"), engine.start(
        base_image, ["python3", "-c", script]
    ) as container:
        assert container.wait(timeout=30) == 1
        assert container.exited() == "exit 1: loading model | bad model: no such file /model/x.tflite"
        raise AssertionError("the caller failed")
    assert _gone(engine, container)


def test_a_server_that_cannot_start_is_an_error_and_leaves_nothing(engine: DockerEngine, base_image: str) -> None:
    label = {"io.tfsmith.test": _name()}
    with pytest.raises(EngineError, match=r"^cannot start tfsmith/python:bookworm: .*no-such-server") as caught:
        engine.start(base_image, ["/opt/no-such-server"], ports=[8000], labels=label)
    assert "\n" not in str(caught.value)
    assert engine.list_containers(label) == []


def test_a_server_that_dies_at_once_says_why_either_way(engine: DockerEngine, base_image: str) -> None:
    """Dead before its port was read: start fails; dead just after: the handle says so. Both name the cause."""
    label = {"io.tfsmith.test": _name()}
    try:
        container = engine.start(base_image, ["sh", "-c", "echo no such model >&2; exit 2"], ports=[8000],
                                 labels=label)
    except EngineError as error:
        assert str(error).endswith("did not publish port 8000: exit 2: no such model")
    else:
        with container:
            assert container.wait(timeout=30) == 2
            assert container.exited() == "exit 2: no such model"
    assert engine.list_containers(label) == []


def test_names_are_unique_while_a_container_exists(engine: DockerEngine, base_image: str) -> None:
    name = _name()
    with engine.start(base_image, ["sleep", "60"], name=name):
        with pytest.raises(EngineError, match="already in use"):
            engine.start(base_image, ["sleep", "60"], name=name)
    with engine.start(base_image, ["true"], name=name):  # free again once removed
        pass


def test_healthcheck_and_image_config(engine: DockerEngine, base_image: str, tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text(
        f"FROM {base_image}\nUSER 10001:10001\nEXPOSE 8000\n"
        'HEALTHCHECK --interval=1s --timeout=2s CMD ["python3", "-c", "print(1)"]\n'
        'CMD ["sleep", "600"]\n'
    )
    image = engine.build(BuildRequest(context=tmp_path, tags=(HEALTHY,)))
    assert image is not None
    config = engine.inspect(HEALTHY).config
    assert config.user == "10001:10001" and config.exposed_ports == (8000,)
    assert config.healthcheck == ("CMD", "python3", "-c", "print(1)") and config.cmd == ("sleep", "600")
    with engine.start(HEALTHY) as container:
        deadline = time.monotonic() + 30
        while container.health() != "healthy" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert container.health() == "healthy"
        assert container.exec(["id", "-u"]) == (0, "10001\n")
        assert container.exec(["id", "-u"], user="0") == (0, "0\n")


def test_run_with_read_only_mounts_and_no_network(engine: DockerEngine, base_image: str, tmp_path: Path) -> None:
    (tmp_path / "model.txt").write_text("weights\n")
    script = "cat /model/model.txt; ls /sys/class/net; touch /model/x 2>/dev/null || echo read-only"
    code, output = engine.run(base_image, ["sh", "-c", script], mounts=[Mount(tmp_path, "/model")], network=False,
                              timeout=60)
    assert (code, output) == (0, "weights\nlo\nread-only\n")
    assert not (tmp_path / "x").exists()
    with pytest.raises(EngineError, match=r"^cannot create a container from .*no-such-folder"):
        engine.run(base_image, ["true"], mounts=[Mount(tmp_path / "no-such-folder", "/model")])
    assert not (tmp_path / "no-such-folder").exists()


def test_run_past_its_timeout_is_killed_and_removed(engine: DockerEngine, base_image: str) -> None:
    label = {"io.tfsmith.test": _name()}
    with pytest.raises(EngineError, match=r"did not finish within 1 s"):
        engine.run(base_image, ["sleep", "600"], labels=label, timeout=1)
    assert engine.list_containers(label) == []
    code, _ = engine.run(base_image, ["true"], labels=label)
    assert code == 0 and engine.list_containers(label) == []


def test_a_missing_image_is_never_pulled(engine: DockerEngine) -> None:
    with pytest.raises(ImageNotFound, match=f"no image {PREFIX}/absent:1 to run"):
        engine.start(f"{PREFIX}/absent:1")
    with pytest.raises(ImageNotFound):  # and nothing was fetched in the meantime
        engine.inspect(f"{PREFIX}/absent:1")


def test_remove_image_and_list_images(engine: DockerEngine, base_image: str) -> None:
    tag = f"{PREFIX}-tagged:1"
    engine.tag(base_image, tag)
    assert any(tag in image.tags for image in engine.list_images())
    engine.remove_image(tag)
    engine.remove_image(tag)  # absent: fine
    assert not any(tag in image.tags for image in engine.list_images())
    assert engine.inspect(base_image).id  # removing a tag keeps the image
