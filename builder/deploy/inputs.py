"""From what the user typed (or what an image's labels say) to FleetImages. The engine is touched only by
`from_engine`, so everything given explicitly works, and is tested, without Docker.

Three ways, one of them per run:
- `--targets x86-64-v3,sapphirerapids --image-prefix registry/digits`: images `registry/digits:<tag>`,
  `<tag>` being the target's tag token (`x86-64-v3-cpu`, `icelake-cu12.5-cc80-ptx80`), tfsmith's naming;
- `--image x86-64-v3=registry/digits:v3 --image sapphirerapids=registry/digits:spr`: explicit references;
- `--from-images REF,REF`: read `io.tfsmith.target`, `io.tfsmith.model.*`, `io.tfsmith.spec-digest` and the
  guard's CUDA capabilities (TFSMITH_IMAGE_CUDA_CC) from each image on the engine.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from builder.build.plan import LABEL_PREFIX
from builder.deploy.plan import FleetImage
from builder.errors import InputError
from builder.target_types import BuildTarget

LABEL = LABEL_PREFIX


def _split(values: Iterable[str]) -> list[str]:
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def resolve(name: str, cuda_cc: str | None = None, tf_version: str = "2.21.0") -> BuildTarget:
    """A named target as `tfsmith build` resolves it; "host" is refused (a fleet is not this machine)."""
    from builder.targets import resolve_target

    if name.strip().lower() == "host":
        raise InputError("target 'host' means this machine; name the fleet's targets (`tfsmith target host` "
                         "prints this machine's name)")
    return resolve_target(name, cuda_cc=cuda_cc, tf_version=tf_version)  # a named target never probes this host


def from_targets(targets: str, image_prefix: str, *, cuda_cc: str | None = None,
                 model_sha256: str | None = None) -> tuple[FleetImage, ...]:
    """One image per target, named `<prefix>:<target tag token>`."""
    prefix = image_prefix.strip().rstrip(":")
    if not prefix or ":" in prefix.rsplit("/", 1)[-1]:
        raise InputError(f"--image-prefix {image_prefix!r}: a repository without a tag, e.g. registry/digits")
    names = _split([targets])
    if not names:
        raise InputError("--targets is empty; e.g. --targets x86-64-v3,x86-64-v4,sapphirerapids")
    resolved = [resolve(name, cuda_cc) for name in names]
    return tuple(FleetImage(target=t, image=f"{prefix}:{t.tag_token}", model_sha256=model_sha256) for t in resolved)


def from_pairs(pairs: Iterable[str], *, cuda_cc: str | None = None,
               model_sha256: str | None = None) -> tuple[FleetImage, ...]:
    """`TARGET=REF` pairs."""
    images = []
    for pair in _split(pairs):
        name, equals, ref = pair.partition("=")
        if not equals or not name.strip() or not ref.strip():
            raise InputError(f"--image {pair!r}: use TARGET=IMAGE, e.g. x86-64-v3=registry/digits:v3")
        images.append(FleetImage(target=resolve(name.strip(), cuda_cc), image=ref.strip(), model_sha256=model_sha256))
    return tuple(images)


def from_labels(ref: str, labels: Mapping[str, str], env: Mapping[str, str]) -> FleetImage:
    """A FleetImage from an image's labels and environment (pure; `from_engine` does the reading)."""
    target = labels.get(f"{LABEL}.target")
    if not target:
        raise InputError(f"image {ref} has no {LABEL}.target label; was it built by `tfsmith package`?")
    if target == "any":
        raise InputError(f"image {ref} was packaged without a target ({LABEL}.target=any), so nothing says where it "
                         f"may run; package it with --target NAME, or name one: --image x86-64=REF")
    from builder.guard import ENV

    cuda = env.get(ENV["cuda_cc"]) or env.get("TFSMITH_CUDA_CC") or None  # the older images' name too
    return FleetImage(
        target=resolve(target, cuda),
        image=ref,
        model_sha256=labels.get(f"{LABEL}.model.sha256") or None,
        spec_digest=labels.get(f"{LABEL}.spec-digest") or None,
    )


def served_name(labels_list: Iterable[Mapping[str, str]]) -> str | None:
    """The model name the images serve (io.tfsmith.model.name); InputError when they disagree."""
    names = {labels.get(f"{LABEL}.model.name") for labels in labels_list} - {None, ""}
    if len(names) > 1:
        raise InputError(f"the images serve different models: {', '.join(sorted(n for n in names if n))}")
    return next(iter(names), None)


def from_engine(refs: str, engine: Any) -> tuple[tuple[FleetImage, ...], str | None]:
    """Inspect each image on the engine: (images, the model name they serve)."""
    from builder.engine.base import ImageNotFound

    images, labels = [], []
    for ref in _split([refs]):
        try:
            image = engine.inspect(ref)
        except ImageNotFound:
            raise InputError(f"image {ref} is not on this engine (tfsmith never pulls)") from None
        images.append(from_labels(ref, image.labels, image.config.env))
        labels.append(image.labels)
    if not images:
        raise InputError("--from-images is empty")
    return tuple(images), served_name(labels)
