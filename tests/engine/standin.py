"""A stand-in for a TensorFlow wheel: valid, dependency-free, installed in seconds (even emulated).

Engine tests that exercise the build path, not TensorFlow itself, install this instead of a 280 MB wheel.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path


def make_standin_wheel(folder: Path, note: str = "stand-in", platform: str = "manylinux_2_27_x86_64") -> Path:
    """A valid, dependency-free wheel named like TensorFlow's: `import tensorflow` prints its version."""
    name = f"tensorflow_cpu-2.21.0-cp311-cp311-{platform}.whl"
    files = {
        "tensorflow/__init__.py": f'__version__ = "2.21.0"\nNOTE = "{note}"\n',
        "tensorflow_cpu-2.21.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tensorflow-cpu\nVersion: 2.21.0\n",
        "tensorflow_cpu-2.21.0.dist-info/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: tfsmith-tests\nRoot-Is-Purelib: false\n"
            f"Tag: cp311-cp311-{platform}\n"
        ),
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append("tensorflow_cpu-2.21.0.dist-info/RECORD,,")
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / name
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
        archive.writestr("tensorflow_cpu-2.21.0.dist-info/RECORD", "\n".join(record) + "\n")
    return wheel
