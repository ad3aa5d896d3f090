"""An in-memory engine for unit tests of our own decision logic (never of Docker's behaviour).

It records every request, gives each distinct request a stable image id, finds images by label like the
real engine, and "exports" a stage by writing the files it was told to. It runs nothing: a container's
exit code, output and health come from a script the test writes per image (`scripts`, or the older
`run_results` table for run-to-completion answers). Published ports get distinct made-up host ports on
which nothing listens.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from builder.engine.base import (
    BuildFailed,
    BuildRequest,
    Container,
    ContainerState,
    Engine,
    EngineError,
    Image,
    ImageNotFound,
    LogSink,
    Mount,
    PushedIndex,
)

FIRST_HOST_PORT = 49153  # where Docker's ephemeral range starts; made-up ports count up from here


@dataclass(frozen=True)
class FakeScript:
    """How containers of one image behave on the fake engine."""

    exit_code: int | None = None  # exits at once with this code; None: runs until stopped
    output: str = ""  # what it prints (stdout)
    errors: str = ""  # what it prints on stderr
    health: str = "none"  # what its healthcheck says while it runs
    stop_code: int = 143  # exit code when stopped (143: it handled SIGTERM, 137: it was killed)
    exec_results: Mapping[str, tuple[int, str]] = field(default_factory=dict)  # " ".join(argv) -> answer


@dataclass(frozen=True)
class StartRequest:
    """One `start` as it was asked, for tests to check what our code requested."""

    ref: str
    command: tuple[str, ...] | None
    entrypoint: tuple[str, ...] | None
    env: Mapping[str, str]
    ports: tuple[int, ...]
    mounts: tuple[Mount, ...]
    name: str | None
    labels: Mapping[str, str]
    network: bool
    user: str | None
    platform: str | None = None
    gpus: bool = False


@dataclass
class _FakeContainer:
    request: StartRequest
    script: FakeScript
    handle: Container
    status: str = "running"
    exit_code: int | None = None


@dataclass
class FakeEngine(Engine):
    """Engine double: `builds`, `pushes`, `tags` record what was asked."""

    images: dict[str, Image] = field(default_factory=dict)  # id -> image
    builds: list[BuildRequest] = field(default_factory=list)
    pushes: list[str] = field(default_factory=list)
    exports: Mapping[str, bytes] = field(default_factory=dict)  # file name -> content for output_dir builds
    fail_target: str | None = None  # a build of this target fails
    run_results: dict[str, tuple[int, str]] = field(default_factory=dict)  # ref -> (exit code, output) at once
    scripts: dict[str, FakeScript] = field(default_factory=dict)  # ref -> behaviour of its containers
    started: list[StartRequest] = field(default_factory=list)
    containers: dict[str, _FakeContainer] = field(default_factory=dict)  # id -> container (until removed)
    removed_images: list[str] = field(default_factory=list)
    pulls: list[str] = field(default_factory=list)
    registry: dict[str, Image] = field(default_factory=dict)  # ref -> image a `pull` finds
    architecture: str = "amd64"  # the engine's own: images built without a platform get it
    gpu_runtime: bool = False  # whether it can pass GPUs in (the real one asks the daemon for its runtimes)

    def build(self, request: BuildRequest, log: LogSink | None = None) -> Image | None:
        self.builds.append(request)
        if log is not None:
            log(f"#1 [fake] build target={request.target}")
        if self.fail_target is not None and request.target == self.fail_target:
            raise BuildFailed(
                f"build failed at [{request.target} 1/1] RUN false; full log: {request.log_file}",
                step=f"[{request.target} 1/1] RUN false",
                tail=("boom",),
                log_path=request.log_file,
            )
        if request.output_dir is not None:
            request.output_dir.mkdir(parents=True, exist_ok=True)
            for name, content in self.exports.items():
                (request.output_dir / name).write_bytes(content)
            return None
        architecture = (request.platform or f"linux/{self.architecture}").rpartition("/")[2]
        key = json.dumps(
            [request.target, sorted(request.build_args.items()), sorted(request.labels.items()), architecture],
            default=str,
        )
        image_id = "sha256:" + hashlib.sha256(key.encode()).hexdigest()
        previous = self.images.get(image_id)
        tags = tuple(dict.fromkeys((*(previous.tags if previous else ()), *request.tags)))
        image = Image(id=image_id, tags=tags, labels=dict(request.labels), architecture=architecture)
        self.images[image_id] = image
        return image

    def _get(self, ref: str) -> Image:
        for image in self.images.values():
            if ref == image.id or ref in image.tags:
                return image
        raise ImageNotFound(f"no image {ref} on this engine")

    def inspect(self, ref: str) -> Image:
        return self._get(ref)

    def find(self, labels: Mapping[str, str]) -> Image | None:
        found = [i for i in self.images.values() if all(i.labels.get(k) == v for k, v in labels.items())]
        return found[-1] if found else None

    def tag(self, ref: str, tag: str) -> None:
        image = self._get(ref)
        self.images[image.id] = replace(image, tags=tuple(dict.fromkeys((*image.tags, tag))))

    def list_images(self) -> list[Image]:
        return list(self.images.values())

    def remove_image(self, ref: str) -> None:
        self.removed_images.append(ref)
        for image in list(self.images.values()):
            if ref == image.id:
                del self.images[image.id]
            elif ref in image.tags:
                self.images[image.id] = replace(image, tags=tuple(t for t in image.tags if t != ref))

    # --- containers -------------------------------------------------------------------------------------
    def _script(self, ref: str) -> FakeScript:
        if ref in self.scripts:
            return self.scripts[ref]
        if ref in self.run_results:
            code, output = self.run_results[ref]
            return FakeScript(exit_code=code, output=output)
        return FakeScript()

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
        try:
            image = self._get(ref)
        except ImageNotFound:
            raise ImageNotFound(f"no image {ref} to run (images are never pulled to run)") from None
        if platform and image.platform and image.platform != platform:
            raise EngineError(f"{ref} is a {image.platform} image, not {platform}")
        if ports and not network:
            raise EngineError(f"cannot publish ports {list(ports)} of a container without a network")
        if gpus and self.gpu_support() is not None:
            raise EngineError(f"cannot start {ref}: could not select device driver \"\" with capabilities: [[gpu]]")
        if name is not None and any(c.request.name == name for c in self.containers.values()):
            raise EngineError(f"cannot create a container from {ref}: the name {name} is already in use")
        request = StartRequest(
            ref=ref, command=tuple(command) if command is not None else None,
            entrypoint=tuple(entrypoint) if entrypoint is not None else None, env=dict(env or {}),
            ports=tuple(ports), mounts=tuple(mounts), name=name, labels=dict(labels or {}), network=network,
            user=user, platform=platform, gpus=gpus,
        )  # fmt: skip
        self.started.append(request)
        number = len(self.started)
        container_id = hashlib.sha256(f"{image.id}:{number}".encode()).hexdigest()
        host_ports = {port: FIRST_HOST_PORT + 100 * (number - 1) + i for i, port in enumerate(ports)}
        handle = Container(id=container_id, name=name or f"fake-{number}", image=ref, ports=host_ports, engine=self)
        script = self._script(ref)
        fake = _FakeContainer(request, script, handle)
        if script.exit_code is not None:
            fake.status, fake.exit_code = "exited", script.exit_code
        self.containers[container_id] = fake
        return handle

    def gpu_support(self) -> str | None:
        return None if self.gpu_runtime else "the fake engine has no NVIDIA runtime"

    def list_containers(self, labels: Mapping[str, str]) -> list[Container]:
        return [fake.handle for fake in self.containers.values()
                if all(fake.request.labels.get(key) == value for key, value in labels.items())]

    def _container(self, container_id: str) -> _FakeContainer:
        if container_id not in self.containers:
            raise EngineError(f"container {container_id[:12]} is gone")
        return self.containers[container_id]

    def container_state(self, container_id: str) -> ContainerState:
        fake = self._container(container_id)
        return ContainerState(status=fake.status, exit_code=fake.exit_code, health=fake.script.health)

    def container_logs(
        self, container_id: str, *, stdout: bool = True, stderr: bool = True, tail: int | None = None
    ) -> str:
        script = self._container(container_id).script
        text = (script.output if stdout else "") + (script.errors if stderr else "")
        if tail is None:
            return text
        lines = text.splitlines(keepends=True)
        return "".join(lines[-tail:]) if tail > 0 else ""

    def container_exec(self, container_id: str, command: Sequence[str], *, user: str | None = None) -> tuple[int, str]:
        fake = self._container(container_id)
        if fake.status != "running":
            raise EngineError(f"cannot exec {command[0]!r}: container {container_id[:12]} is not running")
        return fake.script.exec_results.get(" ".join(command), (0, ""))

    def container_wait(self, container_id: str, timeout: float) -> int:
        fake = self._container(container_id)
        if fake.exit_code is None:
            raise EngineError(f"{fake.request.name or container_id[:12]} ({fake.request.ref}) did not finish "
                              f"within {timeout:.0f} s")
        return fake.exit_code

    def container_stop(self, container_id: str, timeout: float = 10.0) -> int:
        fake = self._container(container_id)
        if fake.exit_code is None:
            fake.status, fake.exit_code = "exited", fake.script.stop_code
        return fake.exit_code

    def container_remove(self, container_id: str) -> None:
        self.containers.pop(container_id, None)

    def push(self, tag: str, log: LogSink | None = None) -> str:
        image = self._get(tag)
        self.pushes.append(tag)
        return "sha256:" + hashlib.sha256((image.id + tag).encode()).hexdigest()

    def push_index(self, ref: str, images: Sequence[str], log: LogSink | None = None) -> PushedIndex:
        repo = ref.rsplit(":", 1)[0]
        platforms: dict[str, str] = {}
        for source in images:
            image = self._get(source)
            if image.platform in platforms:
                raise EngineError(f"two images for {image.platform} ({source} and another): an index holds one "
                                  "image per platform")
            part = f"{ref}-{image.architecture}"
            self.tag(image.id, part)
            platforms[image.platform] = self.push(part)
            self.registry[f"{repo}@{platforms[image.platform]}"] = image
        digest = "sha256:" + hashlib.sha256(json.dumps(sorted(platforms.items())).encode()).hexdigest()
        return PushedIndex(ref=ref, digest=digest, platforms=platforms)

    def pull(self, ref: str, log: LogSink | None = None, *, platform: str | None = None) -> Image:
        self.pulls.append(ref)
        if ref not in self.registry:
            raise EngineError(f"pull of {ref} failed: manifest unknown")
        image = self.registry[ref]
        previous = self.images.get(image.id)
        tags = tuple(dict.fromkeys((*(previous.tags if previous else image.tags), ref)))
        self.images[image.id] = replace(image, tags=tags)
        return self.images[image.id]
