"""Keep the terminal readable: TensorFlow, the TFLite converter, XNNPACK, NNCF and ORT print to the process's
file descriptors 1 and 2 from C++ and Python alike. While a bench prepares and runs, both descriptors go to
a log file next to the report; the user sees only tfsmith's own progress (on a duplicate of the real
stderr) and the table. The log's path is named in the report, so nothing is hidden, only moved.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from pathlib import Path
from typing import IO, Iterator


@contextlib.contextmanager
def native_output_to(log_path: Path) -> Iterator[IO[str]]:
    """Redirect fds 1/2 into `log_path`; yield a text stream on the ORIGINAL stderr for progress."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved_out, saved_err = os.dup(1), os.dup(2)
    progress = os.fdopen(os.dup(saved_err), "w", buffering=1)
    with open(log_path, "ab") as log, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # converter/Keras UserWarnings: in the log's spirit, not the table's
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield progress
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved_out, 1)
            os.dup2(saved_err, 2)
            os.close(saved_out)
            os.close(saved_err)
            progress.close()
