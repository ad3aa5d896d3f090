"""The engine interface every stage builds and runs images through.

Small on purpose (after repo2docker's engine.py): `Image` and `Container` value objects, a handful of
operations and three kinds of failure. It covers everything callers need (build, inspect, run to
completion, start a long-running container with published ports, logs, exec, stop, push, pull, remove), so
nobody reaches around it to the Docker SDK or CLI. The Docker implementation builds with BuildKit (cache,
secret and bind mounts) and uses the SDK for the rest; the fake records calls for unit tests of our own logic.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from builder.errors import TfsmithError


class EngineError(TfsmithError):
    """Base of all engine failures."""


class EngineUnavailable(EngineError):
    """No engine answers, or it is too old (e.g. no BuildKit)."""


class BuildFailed(EngineError):
    """A build ran and failed; the message names the failing step and where the full log is.

    `step` is the failing step's title, `tail` its last output lines, `log_path` the full log (all optional,
    so a plain `BuildFailed("...")` still works).
    """

    def __init__(
        self,
        message: str,
        *,
        step: str = "",
        tail: Sequence[str] = (),
        log_path: Path | None = None,
    ) -> None:
        super().__init__(message)
        self.step = step
        self.tail = tuple(tail)
        self.log_path = log_path


class ImageNotFound(EngineError):
    """A referenced image (or base image) is not present and cannot be pulled."""


@dataclass(frozen=True)
class ImageConfig:
    """What an image runs and as whom: the parts of its config that callers check (serving images, guards)."""

    user: str = ""
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    healthcheck: tuple[str, ...] = ()  # e.g. ("CMD", "python3", "/opt/tfsmith/health.py"); () when none
    exposed_ports: tuple[int, ...] = ()  # TCP ports, sorted
    workdir: str = ""


@dataclass(frozen=True)
class Image:
    """An image as the engine reports it."""

    id: str
    tags: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    config: ImageConfig = field(default_factory=ImageConfig)
    architecture: str = ""  # Docker's words: amd64, arm64 ("" when the engine does not say)
    os: str = "linux"
    digests: tuple[str, ...] = ()  # `registry/repo@sha256:...` it was pushed as or pulled by

    @property
    def platform(self) -> str:
        """`linux/arm64`: what `BuildRequest.platform` and `Engine.start(platform=)` take."""
        return f"{self.os}/{self.architecture}" if self.architecture else ""


@dataclass(frozen=True)
class Mount:
    """A host folder bind-mounted into a container (read-only unless said otherwise)."""

    source: Path
    target: str
    read_only: bool = True


@dataclass(frozen=True)
class ContainerState:
    """A container's state as the engine reports it now."""

    status: str  # "created", "running", "exited", "dead" (Docker's words)
    exit_code: int | None = None  # set once it has exited
    health: str = "none"  # "none" (no healthcheck), "starting", "healthy", "unhealthy"

    @property
    def running(self) -> bool:
        return self.status in ("created", "running", "restarting", "paused")


@dataclass(frozen=True)
class Container:
    """A started container: its id, name, image and published ports, plus what can be done with it.

    A value object: every method asks the engine that started it, so the same code runs on the real engine
    and on the fake. Published ports listen on 127.0.0.1 only (a serving image is not exposed to the network
    before it is proven). Use it as a context manager: the container is removed on the way out, whatever
    happened inside, so no test or smoke run leaves one behind.
    """

    id: str
    name: str
    image: str
    ports: Mapping[int, int] = field(default_factory=dict)  # container TCP port -> host port on 127.0.0.1
    engine: Engine | None = field(default=None, repr=False, compare=False)
    host: str = "127.0.0.1"

    def _engine(self) -> Engine:
        if self.engine is None:
            raise EngineError(f"container {self.name} is not attached to an engine")
        return self.engine

    def host_port(self, port: int) -> int:
        """The host port that container port `port` is published on."""
        if port not in self.ports:
            published = ", ".join(str(p) for p in sorted(self.ports)) or "none"
            raise EngineError(f"container {self.name} publishes no port {port} (published: {published})")
        return self.ports[port]

    def url(self, port: int, scheme: str = "http") -> str:
        """`http://127.0.0.1:<host port>` for container port `port`."""
        return f"{scheme}://{self.host}:{self.host_port(port)}"

    def state(self) -> ContainerState:
        return self._engine().container_state(self.id)

    def logs(self, *, stdout: bool = True, stderr: bool = True, tail: int | None = None) -> str:
        """What the container printed so far (both streams interleaved by default)."""
        return self._engine().container_logs(self.id, stdout=stdout, stderr=stderr, tail=tail)

    def exited(self, lines: int = 3) -> str | None:
        """None while it runs; once it has exited, `exit CODE: last | log | lines` (why it died, in one line)."""
        state = self.state()
        if state.running:
            return None
        tail = [line for line in self.logs(tail=max(lines * 4, 20)).strip().splitlines() if line.strip()][-lines:]
        return f"exit {state.exit_code}: {' | '.join(tail) if tail else 'no output'}"

    def health(self) -> str:
        """The healthcheck's verdict: "none", "starting", "healthy" or "unhealthy"."""
        return self.state().health

    def exec(self, command: Sequence[str], *, user: str | None = None) -> tuple[int, str]:
        """Run a command inside the running container; (exit code, combined output)."""
        return self._engine().container_exec(self.id, command, user=user)

    def wait(self, timeout: float) -> int:
        """Block until it exits; its exit code. EngineError when it runs longer than `timeout` seconds."""
        return self._engine().container_wait(self.id, timeout)

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM, then SIGKILL after `timeout` s; the exit code (0 or 143 after SIGTERM, 137 when killed).

        Idempotent: a container that has already exited just answers its code. It stays until `remove`.
        """
        return self._engine().container_stop(self.id, timeout)

    def remove(self) -> None:
        """Kill if needed and delete; a container already gone is fine."""
        self._engine().container_remove(self.id)

    def __enter__(self) -> Container:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.remove()


@dataclass(frozen=True)
class BuildRequest:
    """Everything one build needs; plain data so plans can be compared and logged."""

    context: Path
    tags: tuple[str, ...]
    dockerfile: str = "Dockerfile"
    target: str | None = None  # multi-stage target, e.g. "runtime" or "wheel"
    build_args: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    secrets: Mapping[str, Path] = field(default_factory=dict)  # id -> file, for RUN --mount=type=secret
    build_contexts: Mapping[str, Path] = field(default_factory=dict)  # named contexts (--build-context)
    output_dir: Path | None = None  # export the target stage's filesystem here instead of an image
    log_file: Path | None = None  # where the engine writes the full build log (engine's choice when None)
    platform: str | None = None  # e.g. "linux/arm64" (built under emulation on x86); None = the engine's own


@dataclass(frozen=True)
class PushedIndex:
    """One tag, several architectures: the image index (manifest list) pushed under `ref`, and the
    manifest digest of each platform's image in it (pull `repo@digest` for exactly that one)."""

    ref: str  # registry/repo:tag
    digest: str  # the index's own digest
    platforms: Mapping[str, str]  # "linux/amd64" -> "sha256:..." of that image's manifest

    def by_digest(self, platform: str) -> str:
        """`registry/repo@sha256:...` of one platform's image."""
        repo = self.ref.rsplit(":", 1)[0] if self.ref.rfind(":") > self.ref.rfind("/") else self.ref
        return f"{repo}@{self.platforms[platform]}"


LogSink = Callable[[str], None]


class Engine(ABC):
    """Build, find, run, push and pull images; start, watch and stop containers."""

    @abstractmethod
    def build(self, request: BuildRequest, log: LogSink | None = None) -> Image | None:
        """Build; returns the image (None when `request.output_dir` exported files instead)."""

    @abstractmethod
    def inspect(self, ref: str) -> Image:
        """Image by id or tag; raises ImageNotFound."""

    @abstractmethod
    def find(self, labels: Mapping[str, str]) -> Image | None:
        """The newest local image carrying all these labels, if any."""

    @abstractmethod
    def tag(self, ref: str, tag: str) -> None:
        """Add a tag to an image."""

    @abstractmethod
    def list_images(self) -> list[Image]:
        """Every local image (for clean-up by tag or label)."""

    @abstractmethod
    def remove_image(self, ref: str) -> None:
        """Remove a tag (the image too when it was the last); an absent ref is fine."""

    def run(
        self,
        ref: str,
        command: Sequence[str] | None = None,
        *,
        entrypoint: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        mounts: Sequence[Mount] = (),
        network: bool = True,
        name: str | None = None,
        labels: Mapping[str, str] | None = None,
        timeout: float = 300.0,
        platform: str | None = None,
    ) -> tuple[int, str]:
        """Run to completion; returns (exit code, combined output). The container is always removed.

        EngineError when it runs longer than `timeout` seconds (it is killed), ImageNotFound for no image.
        """
        with self.start(
            ref, command, entrypoint=entrypoint, env=env, mounts=mounts, network=network, name=name, labels=labels,
            platform=platform,
        ) as container:
            code = container.wait(timeout)
            return code, container.logs()

    @abstractmethod
    def start(
        self,
        ref: str,
        command: Sequence[str] | None = None,
        *,
        entrypoint: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        ports: Sequence[int] = (),
        mounts: Sequence[Mount] = (),
        name: str | None = None,
        labels: Mapping[str, str] | None = None,
        network: bool = True,
        user: str | None = None,
        platform: str | None = None,
        gpus: bool = False,
    ) -> Container:
        """Start a container in the background and return at once (it may be long-running).

        Each of `ports` (container TCP ports) is published on 127.0.0.1 at a free host port (see
        `Container.ports`/`url`). `network=False` runs it without any network (no ports then). Never pulls:
        ImageNotFound when `ref` is not local. EngineError when it cannot start (e.g. the name is taken).
        `platform` ("linux/arm64") says which architecture the image must be: another one is an EngineError
        before anything starts. An arm64 image on an x86 host runs under QEMU (`ensure_emulation`); its
        `env` may set `QEMU_CPU` (`cortex-a53`, `neoverse-v1`, `max`) to choose the emulated CPU.
        `gpus=True` passes every NVIDIA GPU in (`docker run --gpus all`); ask `gpu_support()` first.
        """

    def gpu_support(self) -> str | None:
        """None when `start(..., gpus=True)` can pass NVIDIA GPUs to a container, else why not (one clause).

        An engine that cannot tell says it cannot: GPUs are only ever passed where the engine says it can."""
        return "this engine cannot pass GPUs to containers"

    @abstractmethod
    def list_containers(self, labels: Mapping[str, str]) -> list[Container]:
        """Containers (running or not) carrying all these labels: to find what a crashed run left behind."""

    @abstractmethod
    def container_state(self, container_id: str) -> ContainerState:
        """Status, exit code and health of a container; EngineError when it is gone."""

    @abstractmethod
    def container_logs(
        self, container_id: str, *, stdout: bool = True, stderr: bool = True, tail: int | None = None
    ) -> str:
        """What it printed (the last `tail` lines when given)."""

    @abstractmethod
    def container_exec(self, container_id: str, command: Sequence[str], *, user: str | None = None) -> tuple[int, str]:
        """Run a command in a running container; (exit code, combined output)."""

    @abstractmethod
    def container_wait(self, container_id: str, timeout: float) -> int:
        """Its exit code once it exits; EngineError after `timeout` seconds (it is left running)."""

    @abstractmethod
    def container_stop(self, container_id: str, timeout: float = 10.0) -> int:
        """Stop it (SIGTERM, SIGKILL after `timeout`) and return its exit code; an exited one just answers."""

    @abstractmethod
    def container_remove(self, container_id: str) -> None:
        """Kill and delete it; one already gone is fine."""

    @abstractmethod
    def push(self, tag: str, log: LogSink | None = None) -> str:
        """Push a tag to its registry; returns the pushed digest."""

    @abstractmethod
    def push_index(self, ref: str, images: Sequence[str], log: LogSink | None = None) -> PushedIndex:
        """Push local images of different architectures under one tag `ref` (registry/repo:tag): each as
        `ref-<arch>`, then an image index naming them all, so every node pulls `ref` for its own
        architecture. EngineError when two images share an architecture or a push fails."""

    @abstractmethod
    def pull(self, ref: str, log: LogSink | None = None, *, platform: str | None = None) -> Image:
        """Pull `ref` (a tag or `repo@sha256:...`) from its registry (only when asked: builds never pull);
        `platform` picks one image of a multi-architecture tag. EngineError when it cannot."""
