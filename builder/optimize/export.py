"""Which --out optimize may write: a new or empty folder, or an earlier optimize output it replaces whole.

The output itself is built in a staging folder next to --out and renamed into place by `builder.staging`
(the one staging helper, which puts an earlier output back if the rename fails). The serving SavedModel is
written by `builder.optimize.model_io.export_keras`, with the contract's signature.
"""

from __future__ import annotations

from pathlib import Path

from builder.errors import InputError

REPORT_NAME = "report.json"


def check_out_dir(out: Path) -> None:
    """Refuse an --out that holds something other than an earlier tfsmith optimize output (before any work)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / REPORT_NAME).is_file():
        raise InputError(f"--out {out}: folder is not empty and holds no earlier {REPORT_NAME}; "
                         "choose an empty or new folder")
