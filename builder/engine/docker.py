"""The Docker engine: BuildKit builds through the docker CLI, everything else through the Python SDK.

Why the CLI for builds: the SDK's `images.build()` only speaks the classic builder (no `RUN --mount`), and
the Engine API's `/build?version=2` cannot carry secrets without a BuildKit session, which only the CLI
implements. Our builds need secret mounts (a CA bundle for pip behind a TLS-intercepting proxy) and cache
mounts (bazel's output base), so `DOCKER_BUILDKIT=1 docker build --progress=plain` it is, with each output
line streamed to the caller. Not every `docker` binary can do this: a modern CLI without the buildx plugin
refuses BuildKit outright, while Debian's 20.10 CLI has it built in, so the CLI is chosen by probing what
it can do, never by name alone. Inspect, find-by-label, tag, containers, push and pull go through the SDK
(`docker`); containers are created then started, never `containers.run`, which pulls a missing image.

Never `--pull`: base images are local (there may be no registry at all), and a pull attempt fails offline
even when the image is present.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from builder.engine.base import (
    BuildFailed,
    BuildRequest,
    Container,
    ContainerState,
    Engine,
    EngineError,
    EngineUnavailable,
    Image,
    ImageConfig,
    ImageNotFound,
    LogSink,
    Mount,
    PushedIndex,
)
from builder.engine.buildlog import StepTracker
from builder.engine.local import STATE_DIR

MIN_BUILDKIT_API = (1, 39)  # Docker 18.09: the first engine with BuildKit
CLI_CANDIDATES = ("/usr/bin/docker", "docker")
ENGINE_HINT = "start one with `tfsmith engine up` (or `make engine`)"
BASE_IMAGE_HINT = (
    "load it (docker load/pull from a mirror) or pass --base-image NAME of a local image "
    "(`tfsmith engine up` creates tfsmith/python:bookworm; --toolchain-image for the compiler stages)"
)

_FROM = re.compile(r"^\s*FROM\s+(?:--platform=(\S+)\s+)?(\S+)(?:\s+AS\s+(\S+))?", re.IGNORECASE)
_ARG = re.compile(r"^\s*ARG\s+([A-Za-z_][A-Za-z0-9_]*)(?:=(\S*))?", re.IGNORECASE)
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-[^}]*)?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def _quiet(_: str) -> None:
    return None


def base_images(dockerfile_text: str, build_args: Mapping[str, str]) -> list[str]:
    """The external images a Dockerfile's FROM lines name (not `scratch`, not earlier stages).

    Global ARGs (before the first FROM) are expanded with their defaults overridden by `build_args`, as
    the Dockerfile frontend does.
    """
    return list(dict.fromkeys(ref for ref, _ in base_image_platforms(dockerfile_text, build_args, "")))


def base_image_platforms(
    dockerfile_text: str, build_args: Mapping[str, str], platform: str, build_platform: str = ""
) -> list[tuple[str, str]]:
    """(image, the platform it is used for) per external FROM of a build for `platform`: a stage's own
    `--platform=...` (`$BUILDPLATFORM`: `build_platform`, the machine that builds), else `platform`."""
    args: dict[str, str] = {}
    stages: set[str] = set()
    found: list[tuple[str, str]] = []
    seen_from = False
    known = {"BUILDPLATFORM": build_platform, "TARGETPLATFORM": platform}
    for raw in dockerfile_text.splitlines():
        arg = _ARG.match(raw)
        if arg and not seen_from:
            name, default = arg.group(1), arg.group(2) or ""
            args[name] = build_args.get(name, default.strip("\"'"))
            continue
        match = _FROM.match(raw)
        if not match:
            continue
        seen_from = True
        values = {**known, **args}
        ref = _VAR.sub(lambda m: values.get(m.group(1) or m.group(2), ""), match.group(2))
        used_for = _VAR.sub(lambda m: values.get(m.group(1) or m.group(2), ""), match.group(1) or "") or platform
        if ref.lower() != "scratch" and ref not in stages and (ref, used_for) not in found:
            found.append((ref, used_for))
        if match.group(3):
            stages.add(match.group(3))
    return found


def split_tag(ref: str) -> tuple[str, str]:
    """`host:5000/repo/name:tag` -> (`host:5000/repo/name`, `tag`); no tag -> `latest`."""
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    if colon > slash:
        return ref[:colon], ref[colon + 1 :]
    return ref, "latest"


def _to_image(raw: Any) -> Image:
    config = raw.attrs.get("Config") or {}
    env = dict(item.partition("=")[::2] for item in config.get("Env") or ())
    exposed = sorted(int(key.partition("/")[0]) for key in (config.get("ExposedPorts") or {}) if key.endswith("/tcp"))
    return Image(
        id=raw.id,
        tags=tuple(raw.tags),
        labels=dict(config.get("Labels") or {}),
        config=ImageConfig(
            user=config.get("User") or "",
            entrypoint=tuple(config.get("Entrypoint") or ()),
            cmd=tuple(config.get("Cmd") or ()),
            env=env,
            healthcheck=tuple((config.get("Healthcheck") or {}).get("Test") or ()),
            exposed_ports=tuple(exposed),
            workdir=config.get("WorkingDir") or "",
        ),
        architecture=str(raw.attrs.get("Architecture") or ""),
        os=str(raw.attrs.get("Os") or "linux"),
        digests=tuple(raw.attrs.get("RepoDigests") or ()),
    )


class DockerEngine(Engine):
    """A Docker daemon reached through the default socket (or DOCKER_HOST)."""

    def __init__(self, cli: str | None = None, log_dir: Path | None = None) -> None:
        self._cli_choice = cli
        self._cli: str | None = None
        self._client: Any = None
        self._named_contexts: bool | None = None
        self.log_dir = log_dir or STATE_DIR / "logs"

    # --- connection -----------------------------------------------------------------------------------
    @property
    def client(self) -> Any:
        """The SDK client, connected and checked once: raises EngineUnavailable with what to do.

        This implementation's own handle: callers use the Engine's methods, which the fake has too.
        """
        if self._client is None:
            import docker  # heavy-ish; only engine users pay for it

            try:
                client = docker.from_env(timeout=120)
                version = client.version()
            except Exception as error:  # noqa: BLE001 - the SDK raises many kinds when nothing answers
                raise EngineUnavailable(f"no Docker engine answers ({_first_line(error)}); {ENGINE_HINT}") from None
            api = tuple(int(p) for p in str(version.get("ApiVersion", "0.0")).split(".")[:2])
            if api < MIN_BUILDKIT_API:
                raise EngineUnavailable(
                    f"Docker engine {version.get('Version', '?')} (API {version.get('ApiVersion')}) is too old "
                    "for BuildKit; tfsmith needs Docker 18.09 (API 1.39) or newer"
                )
            self._client = client
        return self._client

    @property
    def cli(self) -> str:
        """A docker CLI that builds with BuildKit and supports `--secret` (probed, then remembered)."""
        if self._cli is None:
            candidates = (self._cli_choice,) if self._cli_choice else CLI_CANDIDATES
            tried = []
            for candidate in candidates:
                path = shutil.which(candidate)
                if path is None:
                    continue
                tried.append(path)
                if _buildkit_cli(path):
                    self._cli = path
                    break
            else:
                raise EngineUnavailable(
                    "no docker CLI here can build with BuildKit "
                    f"(tried: {', '.join(tried) or 'none found'}); install Debian's docker.io (its "
                    "/usr/bin/docker has BuildKit built in) or the buildx plugin"
                )
        return self._cli

    def supports_named_contexts(self) -> bool:
        """Whether `--build-context` exists (buildx/Docker 23+); Debian's 20.10 CLI lacks it."""
        if self._named_contexts is None:
            self._named_contexts = "--build-context" in _build_help(self.cli)
        return self._named_contexts

    # --- build ----------------------------------------------------------------------------------------
    def build(self, request: BuildRequest, log: LogSink | None = None) -> Image | None:
        log = log or _quiet
        dockerfile = request.context / request.dockerfile
        if not dockerfile.is_file():
            raise EngineError(f"no Dockerfile at {dockerfile}")
        for secret_id, src in request.secrets.items():
            if not Path(src).is_file():
                raise EngineError(f"secret {secret_id!r}: no such file {src}")
        self.client  # noqa: B018 - fail early and clearly when no engine answers
        if request.platform:
            _emulate(request.platform, log)
        self._check_base_images(dockerfile.read_text(), request.build_args, log, request.platform)
        log_path = request.log_file or self.log_dir / f"build-{_stamp()}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        if request.build_contexts and not self.supports_named_contexts():
            self._contexts_as_images(request.build_contexts, log_path, log)
        argv = self._build_argv(request)
        with tempfile.TemporaryDirectory(prefix="tfsmith-iid-") as tmp:
            iidfile = Path(tmp) / "iid"
            if request.output_dir is None:
                argv[2:2] = ["--iidfile", str(iidfile)]
            tracker, code = self._stream(argv, log_path, log)
            if code != 0:
                self._raise_failure(tracker, log_path, request)
            if request.output_dir is not None:
                return None
            image_id = iidfile.read_text().strip() if iidfile.exists() else ""
        if not image_id:
            raise BuildFailed(f"docker build reported success but no image id; full log: {log_path}",
                              log_path=log_path)
        return self.inspect(image_id)

    def _build_argv(self, request: BuildRequest) -> list[str]:
        argv = [self.cli, "build", "--progress=plain", "-f", str(request.context / request.dockerfile)]
        if request.target:
            argv += ["--target", request.target]
        if request.platform:
            argv += ["--platform", request.platform]
        for key, value in sorted(request.build_args.items()):
            argv += ["--build-arg", f"{key}={value}"]
        for key, value in sorted(request.labels.items()):
            argv += ["--label", f"{key}={value}"]
        for secret_id, src in sorted(request.secrets.items()):
            argv += ["--secret", f"id={secret_id},src={Path(src).resolve()}"]
        if request.build_contexts and self.supports_named_contexts():
            for name, path in sorted(request.build_contexts.items()):
                argv += ["--build-context", f"{name}={Path(path).resolve()}"]
        if request.output_dir is not None:
            argv += ["--output", f"type=local,dest={Path(request.output_dir).resolve()}"]
        else:
            for tag in request.tags:
                argv += ["-t", tag]
        argv.append(str(request.context))
        return argv

    def _contexts_as_images(self, contexts: Mapping[str, Path], log_path: Path, log: LogSink) -> None:
        """Named contexts on a CLI without `--build-context` (Debian's 20.10): same effect, other route.

        `COPY --from=NAME` / `RUN --mount=from=NAME` name an image when no stage has that name, and dockerd's
        BuildKit resolves images from the local store first. So each directory becomes a `FROM scratch` image
        tagged `NAME:latest` holding exactly its files, built just before the main build.
        """
        for name, path in sorted(contexts.items()):
            if not re.fullmatch(r"[a-z0-9]+(?:[._-][a-z0-9]+)*", name):
                raise EngineError(f"named build context {name!r} cannot be an image name on this docker CLI")
            if not Path(path).is_dir():
                raise EngineError(f"named build context {name!r}: no such directory {path}")
            with tempfile.TemporaryDirectory(prefix="tfsmith-ctx-") as tmp:
                dockerfile = Path(tmp) / "Dockerfile"
                dockerfile.write_text("FROM scratch\nCOPY . /\n", encoding="utf-8")
                log(f"named context {name}: {path} -> image {name}:latest (this docker CLI has no --build-context)")
                argv = [self.cli, "build", "--progress=plain", "-f", str(dockerfile),
                        "--label", "io.tfsmith.named-context=" + name, "-t", f"{name}:latest", str(path)]
                tracker, code = self._stream(argv, log_path, log)
                if code != 0:
                    self._raise_failure(tracker, log_path, BuildRequest(context=Path(path), tags=()))

    def _stream(self, argv: list[str], log_path: Path, log: LogSink) -> tuple[StepTracker, int]:
        tracker = StepTracker()
        env = {**os.environ, "DOCKER_BUILDKIT": "1"}
        with open(log_path, "a", encoding="utf-8") as full:
            full.write(f"$ {' '.join(argv)}\n")
            process = subprocess.Popen(  # noqa: S603 - argv built from plain data, no shell
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                text=True,
                errors="replace",
                bufsize=1,
            )
            assert process.stdout is not None
            for line in process.stdout:
                full.write(line)
                full.flush()
                tracker.feed(line)
                log(line.rstrip("\n"))
            code = process.wait()
            full.write(f"\n[exit code {code}]\n")
        return tracker, code

    def _raise_failure(self, tracker: StepTracker, log_path: Path, request: BuildRequest) -> None:
        reason, tail = tracker.failure_summary()
        step = tracker.failed_step()
        metadata = re.search(r"load metadata for (?:docker\.io/)?(?:library/)?(\S+)", step.title if step else "")
        if metadata or "pull access denied" in reason:
            image = metadata.group(1) if metadata else "a base image"
            raise ImageNotFound(
                f"base image {image} is not present locally and cannot be pulled; {BASE_IMAGE_HINT}"
            )
        raise BuildFailed(
            f"build failed at {reason}; full log: {log_path}",
            step=step.title if step else "",
            tail=tail,
            log_path=log_path,
        )

    def _check_base_images(
        self, dockerfile_text: str, build_args: Mapping[str, str], log: LogSink, platform: str | None = None
    ) -> None:
        """Every FROM image must be local (or pullable), and for the build's platform: say which one is
        missing or of another architecture before BuildKit does (it would try Docker Hub and fail vaguely)."""
        import docker.errors

        from builder.engine.local import host_arch

        here = f"linux/{host_arch()}"
        for ref, wanted in base_image_platforms(dockerfile_text, build_args, platform or "", here):
            if not ref:
                raise ImageNotFound(f"a FROM line names an empty image (unset build arg?); {BASE_IMAGE_HINT}")
            try:
                found = _to_image(self.client.images.get(ref))
            except docker.errors.ImageNotFound:
                found = None
            if found is not None:
                if wanted and found.platform and found.platform != wanted:
                    raise ImageNotFound(
                        f"base image {ref} is for {found.platform}, the stage built FROM it is for {wanted}; pass a "
                        f"{wanted} base image (`tfsmith engine-up --arch {wanted.rpartition('/')[2]}` makes one)"
                    )
                continue
            log(f"base image {ref} is not local; trying to pull it")
            try:
                repo, tag = split_tag(ref)
                self.client.images.pull(repo, tag=tag)
            except docker.errors.APIError as error:
                raise ImageNotFound(
                    f"base image {ref} is not present locally and cannot be pulled "
                    f"({str(getattr(error, 'explanation', '') or _first_line(error))[:120]}); {BASE_IMAGE_HINT}"
                ) from None

    # --- the rest, through the SDK ----------------------------------------------------------------------
    def inspect(self, ref: str) -> Image:
        import docker.errors

        try:
            return _to_image(self.client.images.get(ref))
        except docker.errors.ImageNotFound:
            raise ImageNotFound(f"no image {ref} on this engine") from None

    def find(self, labels: Mapping[str, str]) -> Image | None:
        filters = {"label": [f"{key}={value}" for key, value in sorted(labels.items())]}
        found = self.client.images.list(filters=filters)
        if not found:
            return None
        newest = max(found, key=lambda image: image.attrs.get("Created", ""))
        return _to_image(newest)

    def tag(self, ref: str, tag: str) -> None:
        import docker.errors

        repo, name = split_tag(tag)
        try:
            self.client.images.get(ref).tag(repo, tag=name)
        except docker.errors.ImageNotFound:
            raise ImageNotFound(f"no image {ref} to tag as {tag}") from None

    def list_images(self) -> list[Image]:
        return [_to_image(raw) for raw in self.client.images.list()]

    def remove_image(self, ref: str) -> None:
        import docker.errors

        try:
            self.client.images.remove(ref, noprune=False)
        except docker.errors.ImageNotFound:
            pass
        except docker.errors.APIError as error:
            raise EngineError(f"cannot remove image {ref}: {_explain(error)}") from None

    # --- containers ---------------------------------------------------------------------------------------
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
        """Create then start (never `containers.run`, which pulls a missing image from Docker Hub)."""
        import docker.errors
        import docker.types

        if ports and not network:
            raise EngineError(f"cannot publish ports {list(ports)} of a container without a network")
        if platform:
            image = self.inspect(ref)  # ImageNotFound when absent, as below
            if image.platform and image.platform != platform:
                raise EngineError(f"{ref} is a {image.platform} image, not {platform}")
            _emulate(platform, _quiet)
        options: dict[str, Any] = {
            "entrypoint": list(entrypoint) if entrypoint is not None else None,
            "environment": dict(env or {}),
            "ports": {f"{port}/tcp": ("127.0.0.1", None) for port in ports},
            # bind mounts, not `volumes`: a missing source is an error here instead of a new empty folder
            "mounts": [docker.types.Mount(m.target, str(Path(m.source).resolve()), type="bind", read_only=m.read_only)
                       for m in mounts],
            "name": name,
            "labels": dict(labels or {}),
        }
        if not network:
            options["network_mode"] = "none"
        if user is not None:
            options["user"] = user
        if platform:
            options["platform"] = platform
        if gpus:  # `--gpus all`: the NVIDIA Container Toolkit's runtime hook adds the devices and driver
            options["device_requests"] = [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
        try:
            raw = self.client.containers.create(ref, list(command) if command is not None else None, **options)
        except docker.errors.ImageNotFound:
            raise ImageNotFound(f"no image {ref} to run (images are never pulled to run)") from None
        except docker.errors.APIError as error:
            raise EngineError(f"cannot create a container from {ref}: {_explain(error)}") from None
        try:
            raw.start()
            raw.reload()
        except docker.errors.APIError as error:
            raw.remove(force=True)
            raise EngineError(f"cannot start {ref}: {_explain(error)}") from None
        container = Container(id=raw.id, name=raw.name, image=ref, ports=_published(raw.attrs), engine=self)
        unbound = [port for port in ports if port not in container.ports]
        if unbound:
            why = container.exited() or "the engine published no host port"
            container.remove()
            raise EngineError(f"{ref} did not publish port {unbound[0]}: {why}")
        return container

    def gpu_support(self) -> str | None:
        """None when the daemon has the NVIDIA runtime (the NVIDIA Container Toolkit registers `nvidia` in its
        `Runtimes`), else why GPUs cannot be passed in. Asked of the daemon, not of this machine: the engine
        may run elsewhere (DOCKER_HOST)."""
        try:
            info = self.client.info()
        except Exception as error:  # noqa: BLE001 - any failure to ask means: cannot tell, so no GPUs
            return f"the Docker engine did not say which runtimes it has ({_first_line(error)})"
        return gpu_runtime_missing(info)

    def list_containers(self, labels: Mapping[str, str]) -> list[Container]:
        filters = {"label": [f"{key}={value}" for key, value in sorted(labels.items())]}
        return [
            Container(id=raw.id, name=raw.name, image=_image_ref(raw), ports=_published(raw.attrs), engine=self)
            for raw in self.client.containers.list(all=True, filters=filters)
        ]

    def _container(self, container_id: str) -> Any:
        import docker.errors

        try:
            return self.client.containers.get(container_id)
        except docker.errors.NotFound:
            raise EngineError(f"container {container_id[:12]} is gone") from None

    def container_state(self, container_id: str) -> ContainerState:
        return _state(self._container(container_id).attrs)

    def container_logs(
        self, container_id: str, *, stdout: bool = True, stderr: bool = True, tail: int | None = None
    ) -> str:
        raw = self._container(container_id)
        data = raw.logs(stdout=stdout, stderr=stderr, tail="all" if tail is None else tail)
        return data.decode("utf-8", "replace")

    def container_exec(self, container_id: str, command: Sequence[str], *, user: str | None = None) -> tuple[int, str]:
        import docker.errors

        raw = self._container(container_id)
        try:
            code, output = raw.exec_run(list(command), user=user or "")
        except docker.errors.APIError as error:
            raise EngineError(f"cannot exec {command[0]!r} in {raw.name}: {_explain(error)}") from None
        return int(code if code is not None else -1), output.decode("utf-8", "replace")

    def container_wait(self, container_id: str, timeout: float) -> int:
        raw = self._container(container_id)
        try:
            result = raw.wait(timeout=timeout)
        except Exception:  # noqa: BLE001 - requests' timeout types vary
            raise EngineError(f"{raw.name} ({_image_ref(raw)}) did not finish within {timeout:.0f} s") from None
        return int(result.get("StatusCode", -1))

    def container_stop(self, container_id: str, timeout: float = 10.0) -> int:
        import docker.errors

        raw = self._container(container_id)
        try:
            raw.stop(timeout=max(0, round(timeout)))
        except docker.errors.NotFound:
            raise EngineError(f"container {container_id[:12]} is gone") from None
        except docker.errors.APIError as error:
            raise EngineError(f"cannot stop {raw.name}: {_explain(error)}") from None
        code = self.container_state(container_id).exit_code
        return -1 if code is None else code

    def container_remove(self, container_id: str) -> None:
        import docker.errors

        try:
            self.client.api.remove_container(container_id, force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as error:
            if "already in progress" not in str(error):
                raise EngineError(f"cannot remove container {container_id[:12]}: {_explain(error)}") from None

    def push(self, tag: str, log: LogSink | None = None) -> str:
        log = log or _quiet
        repo, name = split_tag(tag)
        digest = ""
        try:
            stream = self.client.images.push(repo, tag=name, stream=True, decode=True)
            for event in stream:
                if "error" in event:
                    raise EngineError(f"push of {tag} failed: {event['error']}")
                aux = event.get("aux") or {}
                digest = aux.get("Digest", digest)
                status = event.get("status")
                if status:
                    log(f"{event.get('id', '')} {status} {event.get('progress', '')}".strip())
        except EngineError:
            raise
        except Exception as error:  # noqa: BLE001 - connection errors from requests/urllib3
            raise EngineError(f"push of {tag} failed: {_first_line(error)}") from None
        if not digest:
            raise EngineError(f"push of {tag} finished without a digest")
        return digest

    def push_index(self, ref: str, images: Sequence[str], log: LogSink | None = None) -> PushedIndex:
        """Each image pushed as `ref-<arch>`, then `docker manifest create` + `push` writes the index.

        Why the CLI's manifest commands: they read each pushed manifest back, take the platform from its
        config and authenticate like every other push (`docker login`), in well under a second; writing the
        index through the registry's HTTP API ourselves would mean reimplementing registry token auth.
        Loopback registries speak plain HTTP, which `--insecure` allows (as dockerd does for 127.0.0.0/8).
        """
        log = log or _quiet
        repo, tag = split_tag(ref)
        if "@" in ref or not images:
            raise EngineError(f"push_index needs a tag (registry/repo:tag) and images, got {ref!r}")
        by_platform: dict[str, Image] = {}
        for source in images:
            image = self.inspect(source)
            if not image.architecture:
                raise EngineError(f"image {source} does not say its architecture")
            if image.platform in by_platform:
                raise EngineError(f"two images for {image.platform} ({source} and another): an index holds one "
                                  "image per platform")
            by_platform[image.platform] = image
        platforms: dict[str, str] = {}
        parts: list[str] = []
        for platform, image in sorted(by_platform.items()):
            part = f"{repo}:{tag}-{image.architecture}"
            self.tag(image.id, part)
            log(f"pushing {part} ({platform})")
            platforms[platform] = self.push(part, log)
            parts.append(part)
        insecure = ["--insecure"] if _loopback(repo) else []
        self._manifest(["create", "--amend", *insecure, ref, *parts], ref)
        pushed = self._manifest(["push", "--purge", *insecure, ref], ref)
        digest = next((w for w in reversed(pushed.split()) if w.startswith("sha256:")), "")
        if not digest:
            raise EngineError(f"docker manifest push {ref} printed no digest: {pushed.strip()[-200:]}")
        log(f"pushed index {ref}@{digest} ({', '.join(sorted(platforms))})")
        return PushedIndex(ref=ref, digest=digest, platforms=platforms)

    def _manifest(self, args: list[str], ref: str) -> str:
        env = {**os.environ, "DOCKER_CLI_EXPERIMENTAL": "enabled"}  # Docker 20.10's CLI hides `manifest`
        result = subprocess.run([self.cli, "manifest", *args], capture_output=True, text=True, env=env,
                                timeout=300, check=False)
        if result.returncode != 0:
            said = (result.stderr or result.stdout).strip().splitlines()
            why = said[-1] if said else f"exit {result.returncode}"
            raise EngineError(f"docker manifest {args[0]} {ref} failed: {why}")
        return result.stdout

    def pull(self, ref: str, log: LogSink | None = None, *, platform: str | None = None) -> Image:
        log = log or _quiet
        repo, name = ref.split("@", 1) if "@" in ref else split_tag(ref)  # the API takes a digest as the tag
        try:
            for event in self.client.api.pull(repo, tag=name, stream=True, decode=True, platform=platform):
                if "error" in event:
                    raise EngineError(f"pull of {ref} failed: {event['error']}")
                status = event.get("status")
                if status:
                    log(f"{event.get('id', '')} {status} {event.get('progress', '')}".strip())
        except EngineError:
            raise
        except Exception as error:  # noqa: BLE001 - APIError and connection errors alike
            raise EngineError(f"pull of {ref} failed: {_explain(error)}") from None
        return self.inspect(ref)


def gpu_runtime_missing(info: Mapping[str, Any]) -> str | None:
    """From `docker info`'s answer: None when its runtimes include NVIDIA's, else why GPUs cannot be passed.

    Pure, so it is tested with recorded answers: the NVIDIA Container Toolkit (`nvidia-ctk runtime configure`)
    adds `nvidia` to `Runtimes`, and some hosts make it the `DefaultRuntime`."""
    runtimes = sorted((info.get("Runtimes") or {}).keys())
    if "nvidia" in runtimes or info.get("DefaultRuntime") == "nvidia":
        return None
    return (f"the Docker engine has no NVIDIA runtime (runtimes: {', '.join(runtimes) or 'none listed'}; the "
            "NVIDIA Container Toolkit adds it)")


def _loopback(repo: str) -> bool:
    """Whether a repository's registry is this machine (127.x.x.x or localhost): plain HTTP is normal there."""
    host = repo.split("/", 1)[0].rsplit(":", 1)[0] if "/" in repo else ""
    return host == "localhost" or host.startswith("127.")


def _emulate(platform: str, log: LogSink) -> None:
    """Another architecture than this machine's runs under QEMU: make sure it can (installs and registers
    it when missing, see `ensure_emulation`); nothing to do for this machine's own."""
    from builder.engine.local import docker_arch, ensure_emulation, host_arch

    if docker_arch(platform) != host_arch():
        ensure_emulation(docker_arch(platform), say=log)


def _build_help(cli: str) -> str:
    probe = subprocess.run(  # noqa: S603 - fixed argv
        [cli, "build", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "DOCKER_BUILDKIT": "1"},
        timeout=30,
        check=False,
    )
    return probe.stdout + probe.stderr


def _buildkit_cli(cli: str) -> bool:
    """True when this CLI builds with BuildKit: its build help offers `--secret` and no buildx complaint."""
    text = _build_help(cli)
    return "--secret" in text and "buildx component is missing" not in text


def _published(attrs: Mapping[str, Any]) -> dict[int, int]:
    """Container TCP port -> host port, from an inspect answer (`NetworkSettings.Ports`)."""
    published: dict[int, int] = {}
    for key, bindings in ((attrs.get("NetworkSettings") or {}).get("Ports") or {}).items():
        port, _, proto = key.partition("/")
        if proto == "tcp" and bindings:
            published[int(port)] = int(bindings[0]["HostPort"])
    return published


def _state(attrs: Mapping[str, Any]) -> ContainerState:
    """Status, exit code (only once it has exited: a running one reports 0) and health, from an inspect answer."""
    state = attrs.get("State") or {}
    status = str(state.get("Status", "unknown"))
    exit_code = None if status in ("created", "running", "restarting", "paused") else int(state.get("ExitCode", -1))
    return ContainerState(status=status, exit_code=exit_code, health=str((state.get("Health") or {}).get("Status", "none")))


def _image_ref(raw: Any) -> str:
    return str((raw.attrs.get("Config") or {}).get("Image", "?"))


def _explain(error: BaseException) -> str:
    """The daemon's own words for an API error (one line), else the first line of the exception."""
    explanation = getattr(error, "explanation", None)
    return _first_line(Exception(explanation)) if explanation else _first_line(error)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S") + f"-{os.getpid()}-{int(time.monotonic() * 1000) % 100000}"
