"""The start-up self-test: every interpreter of a version warmed, and its batch-1 call timed, which decides how
its calls run (`runner.dispatch_mode`) and what `/healthz` reports.
"""

from __future__ import annotations

import logging
from pathlib import Path

from builder.measure import loop, stats
from builder.model.inputs import example_inputs
from builder.model.signature import DEFAULT_SIGNATURE
from builder.server.core.runner import BackendPool


#: The start-up self-test's time budget: it stops earlier once the median is pinned down (`measure.stats`).
SELF_TEST_BUDGET_S = 2.0
SELF_TEST_MIN_SAMPLES = 30


def measure_pool(pool: BackendPool, samples_path: Path | None, budget_s: float = SELF_TEST_BUDGET_S,
                 signature_name: str | None = None) -> float | None:
    """Warm every backend and time batch-1 calls of the default signature on the model's example inputs,
    with the timing loop and median every tfsmith measurement uses (`builder.measure`).

    Returns the median in microseconds, or None when the model could not be run on them (then it is still
    served, and requests say what is wrong): start-up never fails on its own self-test. A model with string
    inputs and no samples is not run at all (said in the log): made-up text proves nothing about it.
    """
    signature = pool.signatures.get(signature_name or DEFAULT_SIGNATURE) or next(iter(pool.signatures.values()))
    try:
        inputs = example_inputs(signature, samples_path)
    except ValueError as note:
        logging.getLogger("tfsmith.serve").info("start-up self-test skipped: %s and the model came without "
                                                "samples", note)
        return None
    try:
        for _ in range(pool.size):
            with pool.checkout() as backend:
                backend.answer(signature.name, inputs)
        times = loop.interleave({"model": lambda: pool.predict(signature.name, inputs)}, budget_s, warmup=0,
                                min_samples=SELF_TEST_MIN_SAMPLES)[0]["model"]
    except Exception as error:  # noqa: BLE001 - a model that cannot be timed is still served
        logging.getLogger("tfsmith.serve").warning("start-up self-test could not run the model (%s: %s); "
                                                   "serving without it", type(error).__name__, error)
        return None
    return stats.median(times) * 1e6
