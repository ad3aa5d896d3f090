"""The TensorFlow image the `tensorflow` serving kind is built FROM, made for tests as `make build` makes it here.

TensorFlow cannot be compiled on these machines (its build fetches from GitHub), so — exactly as `make build`
falls back — the image is `tfsmith build --target x86-64-v3 --wheel <PyPI's TensorFlow 2.21 wheel>`: the real
runtime stage, guard and labels, from the stock wheel (labelled as such). The wheel is the one the runtime-stage
test downloads (cached), and a second call is "up to date" in seconds (the image is cached by its spec digest).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from builder.engine.local import STATE_DIR
from tests.locks import one_at_a_time

REPO = Path(__file__).resolve().parents[1]
TFSMITH = REPO / ".venv" / "bin" / "tfsmith"
TEST_REPOSITORY = "tfsmith-test/tensorflow"
TARGET = "x86-64-v3"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


def stand_in_wheel(python: str = "3.11", arch: str = "x86_64") -> Path:
    """PyPI's tensorflow 2.21.0 manylinux wheel for `python` and `arch` (x86_64, aarch64), downloaded once into
    the engine's cache."""
    tag = "cp" + python.replace(".", "")
    cache = STATE_DIR / "wheels"
    pattern = f"tensorflow-2.21.0-{tag}-{tag}-manylinux*_{arch}.whl"
    found = sorted(cache.glob(pattern))
    if not found:
        cache.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "tensorflow==2.21.0", "--no-deps", "--only-binary=:all:",
             "--python-version", python, "--platform", f"manylinux_2_27_{arch}", "-d", str(cache), "-q"],
            capture_output=True, text=True, timeout=900, check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"could not download the TensorFlow wheel: {done.stderr.strip()}")
        found = sorted(cache.glob(pattern))
    return found[-1]


def ensure_tf_image(base_image: str, python: str = "3.11", target: str = TARGET, arch: str = "x86_64") -> str:
    """The tag of the TensorFlow image for `target` in the test repository, built with `tfsmith build` (an
    aarch64 target from the aarch64 wheel, on the arm64 base, under emulation on x86)."""
    with one_at_a_time(f"tf-image-{target}-{arch}-py{python}"):  # a second worker finds it built
        argv = [str(TFSMITH), "build", "--target", target, "--wheel", str(stand_in_wheel(python, arch)), "--python",
                python, "--base-image", base_image, "--repository", TEST_REPOSITORY]
        if CA_BUNDLE.is_file():
            argv += ["--ca-bundle", str(CA_BUNDLE)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=1800, cwd=REPO,
                              env={**os.environ, "COLUMNS": "200"})
    if done.returncode != 0:
        raise RuntimeError(f"tfsmith build failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return f"{TEST_REPOSITORY}:tf2.21.0-py{python}-{target}-cpu"


@contextlib.contextmanager
def another_tf_image_for(*targets: str) -> Iterator[None]:
    """Held while a test keeps a TensorFlow image of its own for `targets` on the engine (built, labelled for
    the target, then removed). `tfsmith package --target T` without --base-image builds FROM the newest such
    image, so a packaging test (`packaging_from_tf_image`) waits until it is gone rather than package FROM it."""
    with contextlib.ExitStack() as held:
        for target in sorted(targets):  # one order everywhere: two writers never hold one lock each
            held.enter_context(one_at_a_time(f"tf-images-{target}"))
        yield


@contextlib.contextmanager
def packaging_from_tf_image(target: str = TARGET) -> Iterator[None]:
    """Held around `tfsmith package --target T` that builds FROM the target's newest TensorFlow image: beside
    other packaging, never while a test holds an image of its own for `target` (`another_tf_image_for`)."""
    with one_at_a_time(f"tf-images-{target}", shared=True):
        yield
