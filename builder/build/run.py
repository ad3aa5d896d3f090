"""`tfsmith build`: detect -> resolve -> plan -> render -> build on an Engine, cached, tagged, pushed.

The decisions (what to build, whether anything needs building at all, which tags and pushes follow) are
made here over plain data and an `Engine`, so unit tests drive them with the fake engine; the Docker engine
does the real work. Idempotence comes from the plan's spec digest: every image carries it as a label, and an
image with the same digest already on the engine means "up to date, nothing to do". A change that only
touches the runtime stage keeps the wheel stage's BuildKit cache key, so the wheel is reused and only the
runtime stage runs.

A from-source build fetches TensorFlow and its toolchain from GitHub; where that cannot be reached the build
stops before any work with a message naming `--tf-source` and `--wheel`, instead of failing an hour in.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from builder.build.settings import BuildConfig
from builder.engine.base import BuildFailed, BuildRequest, Engine, Image, ImageNotFound, LogSink
from builder.engine.buildlog import StepTracker
from builder.build.from_settings import wheel_facts
from builder.staging import staged_file
from builder.say import Say
from builder.errors import InputError, SourceUnreachable

SPEC_LABEL = "io.tfsmith.spec-digest"
# Rough cost of a CPU / CUDA TensorFlow wheel build: ~14k / ~35k bazel actions, on the order of 20 / 50
# CPU-hours in public builds; we say "about", never promise.
CPU_HOURS = {"cpu": 20.0, "cuda": 50.0}


@dataclass(frozen=True)
class BuildOutcome:
    """What one `tfsmith build` did: the image, whether it was built or found, tags, pushes, the log."""

    image: Image | None
    image_ref: str
    spec_digest: str
    built: bool
    tags: tuple[str, ...] = ()
    pushed: tuple[tuple[str, str], ...] = ()  # (ref, digest)
    exported_wheel: Path | None = None
    log_path: Path | None = None
    context: Path | None = None
    dry_run: bool = False
    notes: tuple[str, ...] = field(default=())


# --- pure helpers -------------------------------------------------------------------------------------
def push_ref(registry: str, image_ref: str) -> str:
    """`127.0.0.1:5000` + `tfsmith/tensorflow:TAG` -> `127.0.0.1:5000/tfsmith/tensorflow:TAG`."""
    return f"{registry.rstrip('/')}/{image_ref}"


def estimate_hours(kind: str, jobs: int) -> float:
    """Wall-clock hours of a from-source wheel build with `jobs` parallel compile actions."""
    return CPU_HOURS[kind] / max(1, jobs)


def source_hosts(plan: Any) -> list[str]:
    """Hosts a from-source build must reach (the git remote, the toolchain downloads)."""
    urls = [d.url for d in plan.downloads.values()]
    if plan.source.get("kind") == "git":
        urls.append(plan.source["repo"])
    hosts = [urllib.parse.urlparse(u).hostname or "" for u in urls]
    return sorted({h for h in hosts if h})


def reachable(host: str, port: int = 443, timeout: float = 5.0) -> str | None:
    """None when a TCP connection to host:port opens, else the reason (DNS or connect failure)."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as error:
        return str(error) or type(error).__name__


# --- the orchestration --------------------------------------------------------------------------------
@dataclass
class Builder:
    """One `tfsmith build`, parameterised by its collaborators so tests can swap the engine and facts."""

    config: BuildConfig
    engine: Engine | None
    say: Say = print
    detect: Callable[[], Any] | None = None  # () -> HostFacts; default builder.hardware.detect_host
    probe: Callable[[str], str | None] = reachable
    progress: Callable[[str], Any] | None = None  # context-manager factory for a live step display

    def resolve(self, only: str | None = None) -> Any:
        """The BuildPlan for this config (and `--only ID`): the same path `render` takes."""
        return self.resolve_with_choice(only)[0]

    def resolve_with_choice(self, only: str | None = None) -> tuple[Any, Any]:
        """(BuildPlan, CudaChoice): the plan and which GPUs it is built for, and why."""
        from builder.build.from_settings import plan_with_choice

        return plan_with_choice(self.config, only=only, host=(self.detect or _detect_host)())

    def check_source_reachable(self, plan: Any) -> None:
        """Fail before any work when a from-source build cannot fetch TensorFlow or its toolchain."""
        if plan.from_wheel:
            return
        for host in source_hosts(plan):
            reason = self.probe(host)
            if reason is None:
                continue
            if plan.source.get("kind") == "git":
                raise SourceUnreachable(
                    f"cannot reach {host} ({reason}) to fetch the TensorFlow source and toolchain: pass "
                    "--tf-source DIR (a local TensorFlow checkout) where only the git remote is blocked, or build "
                    "the runtime image from a prebuilt wheel with --wheel PATH (e.g. `pip download "
                    "tensorflow-cpu --no-deps`)"
                )
            raise SourceUnreachable(
                f"cannot reach {host} ({reason}) to fetch the toolchain (clang, bazel) that compiles your "
                "--tf-source checkout; build the runtime image from a prebuilt wheel with --wheel PATH instead"
            )

    def describe(self, plan: Any) -> list[str]:
        """What this build will do, honestly, before doing it."""
        lines = [f"image   {plan.image_ref}", f"spec    {plan.spec_digest}", f"stages  {' -> '.join(plan.stages)}"]
        from builder.engine.local import host_arch

        emulated = plan.docker_arch != host_arch()
        lines.append(f"platform {plan.platform}" + (f" (emulated with QEMU on this {host_arch()} machine: the Python "
                                                    "packages are installed by this machine's pip; the image's own "
                                                    "RUN steps are several times slower)" if emulated else ""))
        if plan.from_wheel:
            lines.append(f"wheel   {plan.options.wheel} (packages and runtime stages only; minutes)")
        elif emulated:
            lines.append(f"note    compiling TensorFlow under emulation multiplies the estimate below many times: "
                         f"build {plan.platform} images on an {plan.docker_arch} machine (`tfsmith matrix` says which "
                         "runner each entry needs) or pass --wheel")
        else:
            kind = "cuda" if plan.target.cuda is not None else "cpu"
            hours = estimate_hours(kind, plan.resources.jobs)
            lines.append(
                f"source  {dict(plan.source)}; a from-source TensorFlow build is ~{'35k' if kind == 'cuda' else '14k'} "
                f"compile actions, about {CPU_HOURS[kind]:.0f} CPU-hours: roughly {hours:.0f} h here with "
                f"{plan.resources.jobs} parallel jobs ({plan.resources.machine}); --remote-cache or --wheel avoid it"
            )
        return lines

    def run(self, only: str | None = None) -> BuildOutcome:
        config = self.config
        plan, cuda = self.resolve_with_choice(only)
        for line in (*cuda.lines, *self.describe(plan)):  # the GPUs found and what was chosen come first
            self.say(line)
        tags = tuple(dict.fromkeys((plan.image_ref, *config.tags)))
        if config.dry_run:
            return BuildOutcome(None, plan.image_ref, plan.spec_digest, built=False, tags=tags, dry_run=True)
        engine = self._engine()
        existing = engine.find({SPEC_LABEL: plan.spec_digest})
        if existing is not None:
            self.say(f"up to date: {plan.image_ref} ({existing.id[:19]}) has this spec; nothing to build")
            image, built, log_path, context = existing, False, None, None
        else:
            self.check_source_reachable(plan)
            image, log_path, context = self._build(engine, plan, tags)
            built = True
        for tag in tags:
            if tag not in image.tags:
                engine.tag(image.id, tag)
        exported = self._export_wheel(engine, plan, context) if config.export_wheel else None
        pushed: list[tuple[str, str]] = []
        if config.push:
            for tag in tags:
                ref = push_ref(config.push, tag)
                engine.tag(image.id, ref)
                self.say(f"pushing {ref}")
                digest = self._push(engine, ref)
                self.say(f"pushed  {ref}@{digest}")
                pushed.append((ref, digest))
        image = engine.inspect(image.id)
        return BuildOutcome(
            image, plan.image_ref, plan.spec_digest, built, tuple(tags), tuple(pushed), exported, log_path, context
        )

    # --- steps with side effects --------------------------------------------------------------------
    def _engine(self) -> Engine:
        if self.engine is None:
            from builder.engine.docker import DockerEngine

            self.engine = DockerEngine(log_dir=self.config.state_dir.resolve() / "logs")
        return self.engine

    def _render(self, plan: Any) -> Path:
        """The context under <state_dir>/contexts/<tag> (render writes it atomically, replacing an old one)."""
        from builder.build.render import render_context

        return render_context(plan, self.config.state_dir.resolve() / "contexts" / plan.tag)

    def _request(self, plan: Any, context: Path, **changes: Any) -> BuildRequest:
        request = BuildRequest(
            context=context,
            tags=(),
            target="runtime",
            build_args=dict(plan.build_args),
            secrets=dict(plan.secrets),
            build_contexts=dict(plan.build_contexts),
            platform=plan.platform,
        )
        return replace(request, **changes)

    def check_packages_base(self, engine: Engine, plan: Any) -> None:
        """The packages stage runs on this machine's platform from `plan.packages_base`: an image of that name
        present here for another platform only (a local, single-platform base) cannot serve it, and BuildKit
        would only say that the name cannot be pulled."""
        from builder.engine.local import host_arch

        here = host_arch()
        if plan.docker_arch == here:
            return
        try:
            found = engine.inspect(plan.packages_base)
        except ImageNotFound:
            return  # pulled for this platform (a multi-platform image), or BuildKit says why it cannot be
        if found.architecture and found.architecture != here:
            raise InputError(
                f"base image {plan.packages_base} is a {found.platform} image only: the {plan.platform} image's "
                f"packages are installed on this linux/{here} machine from the same name, so it must exist for "
                f"linux/{here} too (a multi-platform image such as python:{plan.python}-slim-bookworm, or "
                "tfsmith's own bases from `tfsmith engine-up --arch ARCH`)"
            )

    def _build(self, engine: Engine, plan: Any, tags: tuple[str, ...]) -> tuple[Image, Path, Path]:
        self.check_packages_base(engine, plan)
        context = self._render(plan)
        logs = self.config.state_dir.resolve() / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        log_path = logs / f"{plan.tag}-{time.strftime('%Y%m%dT%H%M%S')}.log"
        self.say(f"context {context}")
        self.say(f"log     {log_path}")
        request = self._request(plan, context, tags=tags, labels=plan.labels(), log_file=log_path)
        started = time.monotonic()
        image = self._with_progress(engine, request, f"building {plan.tag}")
        assert image is not None
        self.say(f"built   {plan.image_ref} ({image.id[:19]}) in {time.monotonic() - started:.0f} s")
        return image, log_path, context

    def _with_progress(self, engine: Engine, request: BuildRequest, title: str) -> Image | None:
        tracker = StepTracker()
        display = self.progress(title) if self.progress else None
        shown: set[int] = set()

        def sink(line: str) -> None:
            tracker.feed(line)
            step = tracker.current
            if step is None or step.number in shown:
                return
            shown.add(step.number)
            if display is not None:
                display.update(step.title)
            elif not step.title.startswith("[internal]"):
                self.say(f"  step  {step.title}")

        try:
            if display is not None:
                with display:
                    return engine.build(request, log=sink)
            return engine.build(request, log=sink)
        except BuildFailed as failure:
            for line in failure.tail:
                self.say(f"  | {line}")
            raise

    def _push(self, engine: Engine, ref: str) -> str:
        """Push with a live status line on terminals, one line per finished layer elsewhere (CI logs)."""
        display = self.progress(f"pushing {ref}") if self.progress else None

        def sink(line: str) -> None:
            if display is not None:
                display.update(line)
            elif line.endswith(("Pushed", "Layer already exists")):
                self.say(f"  layer {line}")

        if display is not None:
            with display:
                return engine.push(ref, log=sink)
        return engine.push(ref, log=sink)

    def _export_wheel(self, engine: Engine, plan: Any, context: Path | None) -> Path:
        dest = Path(self.config.export_wheel)  # type: ignore[arg-type]
        dest.mkdir(parents=True, exist_ok=True)
        if plan.from_wheel:
            target = dest / Path(plan.options.wheel).name
            if Path(plan.options.wheel).resolve() != target.resolve():
                with staged_file(target) as staged:  # a half-copied wheel must never look finished
                    shutil.copy2(plan.options.wheel, staged)
            self.say(f"wheel   {target} (the prebuilt wheel this image installs)")
            return target
        context = context or self._render(plan)
        with tempfile.TemporaryDirectory(prefix=".wheel-", dir=dest) as tmp:
            request = self._request(plan, context, target="wheel", output_dir=Path(tmp),
                                    log_file=self.config.state_dir.resolve() / "logs" / f"{plan.tag}-wheel.log")
            self._with_progress(engine, request, "exporting the wheel")
            wheels = sorted(Path(tmp).rglob("*.whl"))
            if not wheels:
                raise BuildFailed(f"the wheel stage exported no .whl file (see {request.log_file})")
            for wheel in wheels:
                shutil.move(str(wheel), dest / wheel.name)
        self.say(f"wheel   {dest / wheels[0].name}")
        return dest / wheels[0].name


def _detect_host() -> Any:
    from builder.hardware import detect_host

    return detect_host()


def build_image(config: BuildConfig, engine: Engine | None = None, *, only: str | None = None,
                say: Say = print, progress: Callable[[str], Any] | None = None) -> BuildOutcome:
    """Entry point for the CLI and tests."""
    return Builder(config, engine, say=say, progress=progress).run(only)


__all__ = ["BuildOutcome", "Builder", "build_image", "wheel_facts", "push_ref", "estimate_hours", "LogSink"]
