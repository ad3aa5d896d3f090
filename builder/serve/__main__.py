"""`python -m builder.serve MODEL ...`: the server without the tfsmith CLI (what serving images run).

Images carry only this package, the model and the server's wheels (no typer, no TensorFlow), so the entry
point parses its options with argparse; the options mirror `tfsmith serve`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from builder.errors import TfsmithError


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m builder.serve", description="TF Serving-compatible REST server")
    p.add_argument("model", type=Path, help=".tflite file or `tfsmith optimize --out` folder")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8501)
    p.add_argument("--model-name", default=None)
    p.add_argument("--model-version", type=int, default=1)
    p.add_argument("--runtime", default="litert", choices=["auto", "litert", "openvino", "openvino-nncf"])
    p.add_argument("--workers", type=int, default=2, help="interpreters, one per worker thread")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per interpreter")
    p.add_argument("--processes", type=int, default=1, help="server processes on the same port (throughput)")
    p.add_argument("--max-batch", type=int, default=1, help="dynamic batching: max examples per batch (1 = off)")
    p.add_argument("--batch-timeout-us", type=int, default=0)
    p.add_argument("--max-body-bytes", type=int, default=16 * 1024 * 1024)
    p.add_argument("--dispatch", default="auto", choices=["auto", "inline", "threads"],
                   help="run the model on the event loop (inline) or on worker threads; auto decides by its speed")
    p.add_argument("--log-level", default="info")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s: %(message)s")
    from builder.serve.app import configure, run_server

    try:
        config = configure(
            args.model,
            model_name=args.model_name,
            version=args.model_version,
            runtime=args.runtime,
            workers=args.workers,
            threads=args.threads,
            max_batch=args.max_batch,
            batch_timeout_us=args.batch_timeout_us,
            max_body_bytes=args.max_body_bytes,
            dispatch=args.dispatch,
        )
    except TfsmithError as error:
        sys.stderr.write(f"tfsmith-serve: error: {error}\n")
        return 2
    logging.getLogger("tfsmith.serve").info("runtime %s (%s)", config.runtime, config.runtime_reason)
    run_server(config, host=args.host, port=args.port, log_level=args.log_level, processes=args.processes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
