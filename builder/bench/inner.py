"""The minimal bench that runs INSIDE an image for `tfsmith bench --images A,B`.

It needs only python3, numpy and tensorflow in the image (plus this package mounted read-only), so a stock
TensorFlow image and a host-built one can run exactly the same code. It times the SavedModel serving
signature (keyword arguments) at batch 1 and at the larger batch, warm-up excluded, and prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--saved-model", required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--budget-s", type=float, default=10.0)
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf

    from builder.measure.stats import summarize

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    signature = tf.saved_model.load(args.saved_model).signatures["serving_default"]
    name, spec = next(iter(signature.structured_input_signature[1].items()))
    shape = [d if d is not None else 1 for d in spec.shape.as_list()[1:]]
    rng = np.random.default_rng(0)
    x1 = {name: tf.constant(rng.standard_normal([1, *shape]).astype(spec.dtype.as_numpy_dtype))}
    xb = {name: tf.constant(rng.standard_normal([args.batch, *shape]).astype(spec.dtype.as_numpy_dtype))}
    for _ in range(5):
        signature(**x1)
    signature(**xb)
    samples1: list[float] = []
    samples_batch: list[float] = []
    deadline = time.perf_counter() + args.budget_s
    while time.perf_counter() < deadline:
        end = time.perf_counter() + 0.05
        while time.perf_counter() < end:
            start = time.perf_counter()
            signature(**x1)
            samples1.append(time.perf_counter() - start)
        start = time.perf_counter()
        signature(**xb)
        samples_batch.append(time.perf_counter() - start)
    result = {"tensorflow": tf.__version__, "threads": args.threads, "batch": args.batch,
              "latency": summarize(samples1).to_dict(),
              "batch_latency": summarize(samples_batch, min_samples=5).to_dict()}
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
