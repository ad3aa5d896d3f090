"""`--profile DIR`: a TensorFlow Profiler trace of the SavedModel runs, viewable in TensorBoard.

Captured AFTER the timed rounds, never during them: the profiler's own overhead would otherwise be counted
as latency. View with `tensorboard --logdir DIR` (Profile tab).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

PROFILE_STEPS = 20


def profile_savedmodel(run1: Callable[[], Any] | None, run_batch: Callable[[], Any] | None, directory: Path,
                       steps: int = PROFILE_STEPS) -> str:
    """Trace `steps` batch-1 calls and a few batch calls of the SavedModel signature; return a report note."""
    if run1 is None:
        return "profile: not captured (the SavedModel runtime did not run)"
    import tensorflow as tf

    directory.mkdir(parents=True, exist_ok=True)
    tf.profiler.experimental.start(str(directory))
    try:
        for step in range(steps):
            with tf.profiler.experimental.Trace("savedmodel_batch1", step_num=step, _r=1):
                run1()
        if run_batch is not None:
            for step in range(3):
                with tf.profiler.experimental.Trace("savedmodel_batch", step_num=step, _r=1):
                    run_batch()
    finally:
        tf.profiler.experimental.stop()
    traces = sorted(str(p.relative_to(directory)) for p in directory.rglob("*.xplane.pb"))
    return (f"profile: TensorFlow Profiler trace of the SavedModel runs in {directory} "
            f"({len(traces)} xplane file(s)); view with `tensorboard --logdir {directory}`")
