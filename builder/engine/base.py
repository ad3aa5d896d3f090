"""The engine interface every stage builds and runs images through.

Small on purpose (after repo2docker's engine.py): an `Image` value object, a handful of operations and
three kinds of failure. The Docker implementation builds with BuildKit (cache, secret and bind mounts)
and uses the SDK for inspect/tag/run/push; the fake records calls for unit tests of our own logic.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

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
class Image:
    """An image as the engine reports it."""

    id: str
    tags: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)


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


LogSink = Callable[[str], None]


class Engine(ABC):
    """Build, find, run and push images."""

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
    def run(
        self,
        ref: str,
        command: Sequence[str] | None = None,
        *,
        entrypoint: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float = 300.0,
    ) -> tuple[int, str]:
        """Run to completion; returns (exit code, combined output)."""

    @abstractmethod
    def push(self, tag: str, log: LogSink | None = None) -> str:
        """Push a tag to its registry; returns the pushed digest."""
