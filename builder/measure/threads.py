"""The one thread set-up every timed runtime gets, so what is compared ran under the same rules.

`threads` is what each runtime is told (LiteRT num_threads, OpenVINO INFERENCE_NUM_THREADS, ONNX Runtime
intra_op_num_threads, TensorFlow's intra-op pool). TensorFlow's inter-op pool is ONE thread: a batch-1 call is a
chain of ops, a second pool only competes with the first for the same cores, and it is how the server runs a
model with one batcher worker. TensorFlow accepts this only before it runs its first op.
"""

from __future__ import annotations

from typing import Any

#: TensorFlow's inter-op threads in every timing (and in the server with one batcher worker).
TF_INTER_OP_THREADS = 1


def configure_tensorflow(tf: Any, threads: int) -> bool:
    """Set TensorFlow's pools on the imported module `tf`; False when it already ran ops in this process
    (then its earlier set-up stays: tests that share one interpreter)."""
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(TF_INTER_OP_THREADS)
    except RuntimeError:
        return False
    return True
