"""One tag, two architectures: an amd64 and an arm64 image pushed as one image index to a local registry,
then each platform pulled back by its digest (and by the tag with a platform), on the real engine.

The images are the two local base images plus one small marker file each (no emulated RUN step), so the
test costs two pushes of a Debian root and a few pulls. The index is read back from the registry's own
HTTP API, not from what our code says it pushed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from builder.engine.base import BuildRequest, EngineError, PushedIndex
from builder.engine.docker import DockerEngine

PREFIX = "tfsmith-test-multiarch"
TFSMITH = Path(sys.executable).with_name("tfsmith")
PLATFORMS = ("linux/amd64", "linux/arm64")
INDEX_TYPES = ("application/vnd.docker.distribution.manifest.list.v2+json", "application/vnd.oci.image.index.v1+json")


@pytest.fixture(scope="module")
def engine(docker_engine: None) -> DockerEngine:
    return DockerEngine()


@pytest.fixture(scope="module")
def images(
    engine: DockerEngine, base_image: str, arm64_base_image: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """platform -> local tag of a small image for it (the base plus a marker naming the platform)."""
    built: dict[str, str] = {}
    try:
        for platform, base in zip(PLATFORMS, (base_image, arm64_base_image)):
            arch = platform.rpartition("/")[2]
            context = tmp_path_factory.mktemp(f"ctx-{arch}")
            (context / "marker").write_text(f"{platform}\n", encoding="utf-8")
            (context / "Dockerfile").write_text(f"FROM {base}\nCOPY marker /etc/tfsmith-marker\n", encoding="utf-8")
            built[platform] = f"{PREFIX}:{arch}"
            engine.build(BuildRequest(context=context, tags=(built[platform],), platform=platform,
                                      log_file=context / "build.log"))
        yield built
    finally:
        for tag in built.values():
            engine.remove_image(tag)


@pytest.fixture(scope="module")
def pushed(engine: DockerEngine, images: dict[str, str], registry: str) -> Iterator[PushedIndex]:
    ref = f"{registry}/{PREFIX}:fleet"
    index = engine.push_index(ref, [images[p] for p in PLATFORMS])
    yield index
    for platform in PLATFORMS:
        engine.remove_image(f"{registry}/{PREFIX}:fleet-{platform.rpartition('/')[2]}")
        engine.remove_image(index.by_digest(platform))
    engine.remove_image(ref)


def _registry_get(registry: str, path: str, accept: str) -> tuple[dict[str, object], str]:
    request = urllib.request.Request(f"http://{registry}/v2/{path}", headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310 - a loopback registry
        return json.loads(answer.read()), answer.headers.get("Docker-Content-Digest", "")


def test_the_registry_serves_one_index_for_both_architectures(pushed: PushedIndex, registry: str) -> None:
    index, digest = _registry_get(registry, f"{PREFIX}/manifests/fleet", ", ".join(INDEX_TYPES))
    assert index["mediaType"] in INDEX_TYPES
    assert digest == pushed.digest
    manifests: list[dict[str, Any]] = index["manifests"]  # type: ignore[assignment]
    listed = {f"{m['platform']['os']}/{m['platform']['architecture']}": m["digest"] for m in manifests}
    assert listed == dict(pushed.platforms)
    assert set(listed) == set(PLATFORMS) and len(set(listed.values())) == 2


def test_the_cli_pushes_an_index_and_says_each_digest(
    engine: DockerEngine, images: dict[str, str], registry: str
) -> None:
    ref = f"{registry}/{PREFIX}:cli"
    done = subprocess.run([str(TFSMITH), "push-index", ref, images["linux/arm64"], images["linux/amd64"]],
                          capture_output=True, text=True, timeout=600, check=False)
    try:
        assert done.returncode == 0, done.stderr
        lines = dict(line.split(None, 1) for line in done.stdout.strip().splitlines())
        assert set(lines) == {*PLATFORMS, "index"}
        _, digest = _registry_get(registry, f"{PREFIX}/manifests/cli", ", ".join(INDEX_TYPES))
        assert lines["index"] == f"{ref}@{digest}"
        assert all(lines[p].startswith(f"{registry}/{PREFIX}@sha256:") for p in PLATFORMS)
        twice = subprocess.run([str(TFSMITH), "push-index", ref, images["linux/amd64"], images["linux/amd64"]],
                               capture_output=True, text=True, timeout=600, check=False)
        assert twice.returncode != 0 and "Traceback" not in twice.stderr
        assert len(twice.stderr.strip().splitlines()) == 1 and "one image per platform" in twice.stderr
    finally:
        for platform in PLATFORMS:
            engine.remove_image(f"{ref}-{platform.rpartition('/')[2]}")


def test_each_platform_pulls_back_by_digest(
    engine: DockerEngine, images: dict[str, str], pushed: PushedIndex, registry: str
) -> None:
    for platform in PLATFORMS:  # the local copies go first, so the pulls below really fetch
        engine.remove_image(images[platform])
        engine.remove_image(f"{registry}/{PREFIX}:fleet-{platform.rpartition('/')[2]}")
    for platform in PLATFORMS:
        ref = pushed.by_digest(platform)
        image = engine.pull(ref)
        assert image.platform == platform
        assert ref in image.digests
        code, output = engine.run(ref, ["cat", "/etc/tfsmith-marker"], platform=platform, timeout=180)
        assert (code, output.strip()) == (0, platform)


def test_the_tag_with_a_platform_pulls_that_architecture(engine: DockerEngine, pushed: PushedIndex) -> None:
    image = engine.pull(pushed.ref, platform="linux/arm64")
    assert image.platform == "linux/arm64"
    assert pushed.by_digest("linux/arm64") in image.digests


def test_two_images_of_one_architecture_are_refused(engine: DockerEngine, base_image: str, registry: str) -> None:
    with pytest.raises(EngineError, match=r"two images for linux/amd64 .*one image per platform"):
        engine.push_index(f"{registry}/{PREFIX}:twice", [base_image, base_image])
