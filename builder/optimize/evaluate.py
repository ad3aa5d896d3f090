"""Run and time each artifact with the runtime that will serve it, on the held-out rows only.

Every artifact runs through the serving backends themselves (`builder.model.create`: LiteRT with XNNPACK,
OpenVINO reading the same file at its precision, TensorFlow calling a SavedModel signature with keyword
arguments or a Select-TF-ops .tflite on its own interpreter), called by signature with named inputs, so what
is measured is what the server runs. Latency is timed with THE timing loop `tfsmith bench` and
`--runtime auto` use (`builder.measure.loop`: batch-1 calls in interleaved slices, warm-up excluded, cycling
through the model's own held-out rows), p50/p99 and the median's confidence interval in microseconds.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np

from builder.model import registry
from builder.optimize import tfenv
from builder.model.rows import fixed_batch
from builder.report import Latency, TensorSpec

Arrays = Mapping[str, np.ndarray]
TF_RUNTIME = registry.TENSORFLOW_DEFAULT  # SavedModel signatures and Select-TF-ops .tflite files
_TENSORFLOW_RUNTIMES = registry.engine_runtimes("tensorflow")
DEFAULT_SIGNATURE = "serving_default"


#: gzip sizes are measured in independent members of this many bytes (`gzip_bytes`).
GZIP_MEMBER = 8 << 20


def file_sizes(path: Path) -> tuple[int, int]:
    """(raw, gzip) bytes of an artifact: a file, an IR's .xml and .bin, or summed over a folder's files."""
    from builder.model.artifact import artifact_files

    files = artifact_files(path)
    return sum(p.stat().st_size for p in files), sum(gzip_bytes(p) for p in files)


def raw_bytes(path: Path) -> int:
    """The bytes of an artifact's files, without compressing them (a SavedModel's variables, say)."""
    from builder.model.artifact import artifact_files

    return sum(p.stat().st_size for p in artifact_files(path))


_GZIPPED: dict[tuple[str, int, int], int] = {}
#: Files whose gzip size the background thread is measuring or will measure (`gzip_soon`), by `_file_key`.
_SOON: dict[tuple[str, int, int], Future] = {}
_QUEUE: queue.SimpleQueue = queue.SimpleQueue()
_WORKER: list[threading.Thread] = []


def _file_key(path: Path) -> tuple[str, int, int]:
    stat = Path(path).stat()
    return str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns


def gzip_soon(path: Path) -> None:
    """Start measuring the gzip size of an artifact's files on one background thread, one member at a time, so
    that `gzip_bytes` finds it measured. Why: a big model's conversions each run in a process of their own,
    mostly on one core, while optimize's own process waits; a BERT-base-sized model's files are 1.4 GB, about
    30 CPU seconds of compressing that the evaluation otherwise waits for on both cores. A file that changes or
    goes before it is measured is measured again when asked, or not at all."""
    from builder.model.artifact import artifact_files

    for file in artifact_files(path):
        try:
            key = _file_key(file)
        except OSError:
            continue
        if key in _GZIPPED or key in _SOON:
            continue
        _SOON[key] = future = Future()
        _QUEUE.put((key, file, future))
    if not _WORKER:
        _WORKER.append(threading.Thread(target=_gzip_in_background, name="tfsmith-gzip", daemon=True))
        _WORKER[0].start()


def _gzip_in_background() -> None:
    """The background thread: each queued file's gzip size, on one core (a daemon: never holds up an exit)."""
    while True:
        key, file, future = _QUEUE.get()
        if not future.set_running_or_notify_cancel():
            continue
        try:
            future.set_result(_gzip_size(file, key, workers=1))
        except Exception as error:  # noqa: BLE001 - asked again, it is measured in the asking thread
            future.set_exception(error)


def gzip_bytes(path: Path) -> int:
    """The size of `path` gzipped at level 9, as a file of independent gzip members of GZIP_MEMBER bytes (what
    `pigz -9 --independent` writes, and what `gzip -d` reads): compressed on every core, a member at a time, so
    neither the file nor its compressed copy is ever held whole. A file under GZIP_MEMBER is one member, the
    same figure as `gzip -9`; over it, each member restarts the 32 KiB window, a few bytes in a million. Why: a
    BERT-base-sized model's seven artifacts are 1.8 GB, which one core compressed at about 30 MB/s, reading each
    file and its copy into memory (0.8 GB at once for a 436 MB .tflite). Each file is compressed once per run
    (by path, size and modification time); one `gzip_soon` started is waited for."""
    import os

    key = _file_key(path)
    if key in _GZIPPED:
        return _GZIPPED[key]
    pending = _SOON.pop(key, None)
    if pending is not None and (pending.running() or pending.done()):
        try:
            return pending.result()
        except Exception:  # noqa: BLE001 - measured again here, where an error says itself
            pass
    elif pending is not None:
        pending.cancel()  # not started: measured here, on every core
    return _gzip_size(path, key, workers=len(os.sched_getaffinity(0)))


def _gzip_size(path: Path, key: tuple[str, int, int], workers: int) -> int:
    """`gzip_bytes` measured now, on `workers` threads (zlib lets go of the GIL while it compresses)."""
    import zlib
    from concurrent.futures import ThreadPoolExecutor

    def member(offset: int) -> int:
        with open(path, "rb") as handle:
            handle.seek(offset)
            data = handle.read(GZIP_MEMBER)
        packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: the gzip wrapper, as gzip.compress writes it
        return len(packer.compress(data)) + len(packer.flush())

    offsets = range(0, max(key[1], 1), GZIP_MEMBER)
    if workers <= 1:
        size = sum(member(offset) for offset in offsets)
    else:
        with ThreadPoolExecutor(max(1, min(len(offsets), workers))) as pool:
            size = sum(pool.map(member, offsets))
    _GZIPPED[key] = size
    return size


def _shape(values: Any) -> tuple[int | None, ...]:
    return tuple(None if d is None or int(d) < 0 else int(d) for d in values)


def _as_dtype(values: np.ndarray, dtype: str) -> np.ndarray:
    """Rows in the input's dtype; text stays as it is (every runtime takes numpy str or bytes arrays)."""
    if np.dtype(dtype).kind == "O" or values.dtype.name == dtype:
        return values
    return values.astype(dtype)


def _dtype_name(dtype: Any) -> str:
    """numpy's name, except that strings are the contract's `string` (TensorFlow's spelling)."""
    found = np.dtype(dtype)
    return "string" if found.kind in "SUO" else found.name


class MissingSignature(LookupError):
    """The file, as this runtime reads it, lacks a signature the original has (OpenVINO reads only the first
    subgraph of a .tflite converted from several signatures)."""


class Runner:
    """One artifact on one runtime (`builder.model`: the backend a server runs): `predict(named arrays) ->
    named arrays`, any batch size.

    `signature`: which signature to call (a SavedModel's serving_xla, say); default serving_default, else the
    file's only one. `backend`: the file loaded already for this runtime (`shared_load`), else it is loaded."""

    def __init__(self, runtime: str, path: Path, threads: int, signature: str | None = None,
                 backend: Any = None) -> None:
        from builder.model.create import create_backend

        self.runtime, self.path = runtime, Path(path)
        if runtime in _TENSORFLOW_RUNTIMES:
            tfenv.tensorflow()  # TensorFlow with this process's thread set-up before the backend imports it
        self._backend = backend if backend is not None else create_backend(runtime, self.path, threads)
        sigs = self._backend.signatures
        if signature and signature not in sigs:
            raise MissingSignature(f"{self.path.name} on {runtime} has no signature {signature!r} (it has: "
                                   f"{', '.join(sorted(sigs))})")
        self.signature = signature or (DEFAULT_SIGNATURE if DEFAULT_SIGNATURE in sigs else next(iter(sigs)))
        spec = sigs[self.signature]
        self.inputs = tuple(TensorSpec(s.name, _dtype_name(s.dtype), _shape(s.shape)) for s in spec.inputs)
        self.outputs = tuple(TensorSpec(s.name, _dtype_name(s.dtype), _shape(s.shape)) for s in spec.outputs)
        self.signatures = tuple(sorted(sigs))
        self._dtypes = {s.name: s.dtype for s in spec.inputs}

    @property
    def holds_saved_model(self) -> bool:
        """This runner's file is a SavedModel loaded on TensorFlow (which `shared_load` can share)."""
        from builder.model.tensorflow import SavedModelBackend

        return self.runtime in _TENSORFLOW_RUNTIMES and isinstance(self._backend, SavedModelBackend)

    def shared_load(self, runtime: str) -> Any:
        """This runner's SavedModel as a backend of another TensorFlow runtime (f32 or oneDNN bf16), sharing
        the load; None where that cannot be (each other runtime loads its own file)."""
        if runtime not in _TENSORFLOW_RUNTIMES or not self.holds_saved_model:
            return None
        return self._backend.at(registry.runtime(runtime).precision, runtime)

    def predict(self, x: Arrays) -> dict[str, np.ndarray]:
        feed = {name: _as_dtype(np.asarray(x[name]), dtype) for name, dtype in self._dtypes.items()}
        return {k: np.asarray(v) for k, v in self._backend.predict(self.signature, feed).items()}

    def signature_of(self, name: str) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]] | None:
        """Another signature's (inputs, outputs) as this file serves it; None when the file lacks it."""
        spec = self._backend.signatures.get(name)
        if spec is None:
            return None
        return (tuple(TensorSpec(s.name, _dtype_name(s.dtype), _shape(s.shape)) for s in spec.inputs),
                tuple(TensorSpec(s.name, _dtype_name(s.dtype), _shape(s.shape)) for s in spec.outputs))

    def call(self, name: str, x: Arrays, batch: int = 64) -> dict[str, np.ndarray]:
        """Another signature's outputs on `x` (every row, in batches), in its inputs' dtypes."""
        spec = self._backend.signatures[name]
        dtypes = {s.name: s.dtype for s in spec.inputs}
        rows = len(next(iter(x.values())))
        parts = [{k: np.asarray(v) for k, v in self._backend.predict(
                     name, {n: _as_dtype(np.asarray(x[n][i : i + batch]), d) for n, d in dtypes.items()}).items()}
                 for i in range(0, rows, batch)]
        return {key: np.concatenate([p[key] for p in parts], axis=0) for key in parts[0]}

    def predict_all(self, x: Arrays, batch: int | None = None) -> dict[str, np.ndarray]:
        """Outputs on every row of `x`: the model's fixed batch a call, else `batch`, by default
        `budget.rows_per_call` for the size of this runner's file, and few rows of big inputs (images) a call
        (`budget.rows_by_input_bytes`)."""
        from builder.model.artifact import artifact_files
        from builder.optimize.budget import rows_by_input_bytes, rows_per_call

        fixed = fixed_batch(self.inputs)
        step = fixed or batch or rows_by_input_bytes(
            x, rows_per_call(sum(p.stat().st_size for p in artifact_files(self.path))))
        rows = len(next(iter(x.values())))
        parts = [self.predict({k: v[i : i + step] for k, v in x.items()}) for i in range(0, rows, step)]
        return {name: np.concatenate([p[name] for p in parts], axis=0) for name in parts[0]}

    def row_caller(self, x: Arrays, rows: int = 32) -> Callable[[], Any]:
        """A zero-argument batch-1 call cycling through the first `rows` held-out rows (for the timing loop)."""
        n = min(rows, len(next(iter(x.values()))))
        feeds = [{k: np.ascontiguousarray(v[i : i + 1]) for k, v in x.items()} for i in range(n)]
        state = {"i": 0}

        def call() -> Any:
            state["i"] = (state["i"] + 1) % n
            return self.predict(feeds[state["i"]])

        return call


def time_runners(calls: Mapping[str, Callable[[], Any]], budget_s: float, warmup: int = 3,
                 policy: Any = None) -> dict[str, Latency]:
    """THE timing loop (`builder.measure.loop`) over named zero-argument calls -> p50/p99 and the median's
    95% confidence interval, in microseconds; `policy` (`builder.measure.race`) stops runners early."""
    return timed_run(calls, budget_s, policy, warmup)[0]


def timed_run(calls: Mapping[str, Callable[[], Any]], budget_s: float, policy: Any = None, warmup: int = 3
              ) -> tuple[dict[str, Latency], dict[str, Any]]:
    """`time_runners` with each runner's `builder.measure.loop.Stop` (calls, seconds timed, why it stopped).
    A runner that withdrew before its first sample has no latency."""
    from builder.measure.loop import run

    done = run(dict(calls), budget_s, policy, warmup=warmup)
    return {name: latency_from(s) for name, s in done.samples.items() if s}, dict(done.stopped)


def latency_from(samples_s: list[float]) -> Latency:
    from builder.measure.stats import summarize

    found = summarize(samples_s, min_samples=1)
    return Latency(round(found.p50 * 1e6, 2), round(found.p99 * 1e6, 2), found.n, round(found.ci_low * 1e6, 2),
                   round(found.ci_high * 1e6, 2))


#: Rows per call behind the rows/s column (the model's fixed batch size when it has one).
THROUGHPUT_BATCH = 32
#: At most this long per batch call at the batch-1 pace: a big model on a small host gets a smaller batch
#: (ResNet50 at ~140 ms a row on 2 busy cores would spend minutes on warm-up calls of 32 rows alone).
BATCH_CALL_S = 0.25


def batch_for(runner: Runner, x: Arrays, row_p50_us: float | None = None, batch: int = THROUGHPUT_BATCH) -> int:
    """The batch size rows/s is measured at: `batch`, fewer when one call would take over BATCH_CALL_S at the
    batch-1 pace `row_p50_us`, all rows when fewer; the model's fixed batch when it has one."""
    fixed = fixed_batch(runner.inputs)
    if fixed:
        return int(fixed)
    if row_p50_us:
        batch = max(1, min(batch, int(BATCH_CALL_S * 1e6 / row_p50_us)))
    return min(batch, len(next(iter(x.values()))))


def batch_caller(runner: Runner, x: Arrays, batch: int) -> Callable[[], Any]:
    """A zero-argument call predicting the first `batch` held-out rows at once (for the timing loop)."""
    chunk = {k: np.ascontiguousarray(v[:batch]) for k, v in x.items()}
    return lambda: runner.predict(chunk)


def throughput_from(batch: int, per_call: Latency, settled: bool = True) -> dict[str, float]:
    """rows/s at `batch`: batch / the median time of one batch-`batch` call (timed in the interleaved loop);
    `settled`: False when the pass's time ran out before that median was known (`race.PerRunner`)."""
    return {"batch": batch, "batch_p50_us": per_call.p50, "settled": settled,
            "samples_per_s": round(batch * 1e6 / per_call.p50, 1) if per_call.p50 > 0 else 0.0}
