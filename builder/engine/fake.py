"""An in-memory engine for unit tests of our own decision logic (never of Docker's behaviour).

It records every request, gives each distinct request a stable image id, finds images by label like the
real engine, and "exports" a stage by writing the files it was told to. It runs nothing: `run` answers
from a table the test fills in.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from builder.engine.base import BuildFailed, BuildRequest, Engine, Image, ImageNotFound, LogSink


@dataclass
class FakeEngine(Engine):
    """Engine double: `builds`, `pushes`, `tags` record what was asked."""

    images: dict[str, Image] = field(default_factory=dict)  # id -> image
    builds: list[BuildRequest] = field(default_factory=list)
    pushes: list[str] = field(default_factory=list)
    exports: Mapping[str, bytes] = field(default_factory=dict)  # file name -> content for output_dir builds
    fail_target: str | None = None  # a build of this target fails
    run_results: dict[str, tuple[int, str]] = field(default_factory=dict)

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
        key = json.dumps(
            [request.target, sorted(request.build_args.items()), sorted(request.labels.items())], default=str
        )
        image_id = "sha256:" + hashlib.sha256(key.encode()).hexdigest()
        previous = self.images.get(image_id)
        tags = tuple(dict.fromkeys((*(previous.tags if previous else ()), *request.tags)))
        image = Image(id=image_id, tags=tags, labels=dict(request.labels))
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
        self.images[image.id] = Image(image.id, tuple(dict.fromkeys((*image.tags, tag))), image.labels)

    def run(
        self,
        ref: str,
        command: Sequence[str] | None = None,
        *,
        entrypoint: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float = 300.0,
    ) -> tuple[int, str]:
        self._get(ref)
        return self.run_results.get(ref, (0, ""))

    def push(self, tag: str, log: LogSink | None = None) -> str:
        image = self._get(tag)
        self.pushes.append(tag)
        return "sha256:" + hashlib.sha256((image.id + tag).encode()).hexdigest()
