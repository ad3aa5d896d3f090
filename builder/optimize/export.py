"""Serving-only SavedModel export and atomic placement of the whole output folder.

`ExportArchive` (what `model.export` uses) stores only what serving needs: no optimizer slots, 0.94 MB vs 2.8 MB
with `tf.saved_model.save` (FACTS §4). The signature `serving_default` takes one keyword argument named after
the model's input; `serving_xla` (jit_compile) is added only when the recipe asks.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from builder.errors import InputError
from builder.optimize import tfenv

REPORT_NAME = "report.json"


def export_saved_model(model: Any, directory: Path, input_name: str, xla: bool = False) -> None:
    """Write `model` as a serving-only SavedModel with `serving_default` (and `serving_xla` when asked)."""
    tf = tfenv.tensorflow()
    from tf_keras.export import ExportArchive

    spec = model.inputs[0]
    signature = [tf.TensorSpec(shape=spec.shape, dtype=spec.dtype, name=input_name)]
    archive = ExportArchive()
    archive.track(model)

    def serve(x: Any) -> Any:
        return model(x, training=False)

    archive.add_endpoint("serving_default", tf.function(serve, input_signature=signature, autograph=False))
    if xla:
        archive.add_endpoint("serving_xla", tf.function(serve, input_signature=signature, autograph=False,
                                                        jit_compile=True))
    with contextlib.redirect_stdout(io.StringIO()):  # write_out prints every endpoint's signature
        archive.write_out(str(directory))


def check_out_dir(out: Path) -> None:
    """Refuse an --out that holds something other than an earlier tfsmith optimize output (before any work)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / REPORT_NAME).is_file():
        raise InputError(f"--out {out}: folder is not empty and holds no earlier {REPORT_NAME}; "
                         "choose an empty or new folder")


def staging_dir(out: Path) -> Path:
    """A fresh temp folder next to --out (same filesystem, so the final rename is atomic)."""
    out = Path(out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{out.name}.tfsmith-", dir=out.parent))


def publish(staging: Path, out: Path) -> None:
    """Move the finished staging folder into place; an earlier output is replaced only after success."""
    out = Path(out).resolve()
    os.chmod(staging, 0o755)  # mkdtemp makes it private; the output is meant to be shared (images, servers)
    old = None
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        os.rmdir(old)
        os.replace(out, old)
    os.replace(staging, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
