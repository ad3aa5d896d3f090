"""The original model's SavedModel loaded and answering in a process of its own, for as long as optimize asks.

Why: TensorFlow's x86 wheels allocate through oneDNN, whose CPU allocator keeps every region it ever took for
the life of the process. A BERT-base-sized SavedModel loaded, asked for its answers on 65 rows and released
left 1.0-1.3 GiB resident in the process that did it; every conversion and the int8 calibrator (3.0 GiB at its
peak) then ran beside that. Loaded here instead, the model's memory is the machine's again when the original
is released (after the conversions' sources are written), and optimize itself holds only TensorFlow's library.
(Measured with that pool. optimize now takes TensorFlow's tensors from malloc, `tfenv.setup`, so a model it
closes gives most of its memory back too; this process still keeps the original's load and its peaks out of
optimize's own while it answers.)

The process is started once, loads the SavedModel, says what it found (the contract's signature, the others,
the parameter count) and then answers `(signature, rows)` requests over a pipe until it is closed. Arrays
travel by pickle: the rows optimize asks about (the gate's, the probes of integer inputs, the other
signatures' rows) are a few hundred at most. What it holds counts with this process's memory
(`builder.measure.memory.counting_child`), as a step in a process of its own does.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from collections.abc import Callable
from typing import IO, Any

import numpy as np

from builder.measure import memory
from builder.report import TensorSpec

Arrays = dict[str, np.ndarray]
#: What the child runs: this module's `_serve`, imported by name (never the caller's main module).
CHILD = "from builder.optimize.original_process import _serve; _serve()"


@dataclass(frozen=True)
class Found:
    """What the process found in the SavedModel: the contract's signature and every other one, its size."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    others: dict[str, tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]]
    params: int | None
    signature: str


class OriginalProcess:
    """A SavedModel answering from its own process: `found` (what loading it found), `predict(signature,
    rows)`, `close()`. `load(*args)` loads it there (a module-level function, which travels by name:
    `model_io._from_saved_model`) and returns what answers (`_predict`, `_predict_other`, the contract). Raises
    what loading raised there (an InputError for a SavedModel TensorFlow cannot load or that lacks the
    signature), or ChildFailed with the process's own text when it ended without a word."""

    def __init__(self, load: Callable[..., Any], *args: Any) -> None:
        from builder.optimize.isolated import ChildFailed

        self._said = tempfile.TemporaryFile()
        self._child: subprocess.Popen[bytes] | None = subprocess.Popen(
            [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._said)
        self._counted = contextlib.ExitStack()
        self._counted.enter_context(memory.counting_child(self._child.pid))
        self._failed = ChildFailed
        try:
            # sys.path first, then the function: the child finds the caller's modules before it unpickles it
            self.found: Found = self._ask((list(sys.path), pickle.dumps((load, args))))
        except BaseException:
            self.close()
            raise

    def predict(self, signature: str | None, rows: Arrays) -> Arrays:
        """The answers of `signature` (None: the contract's) on `rows`, by output name."""
        return self._ask((signature, dict(rows)))  # type: ignore[no-any-return]

    def _ask(self, request: Any) -> Any:
        child = self._child
        if child is None:
            raise RuntimeError("the original model's process was closed; its answers were computed before")
        assert child.stdin is not None and child.stdout is not None
        try:
            pickle.dump(request, child.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            child.stdin.flush()
            kind, payload = pickle.load(child.stdout)
        except (EOFError, BrokenPipeError, pickle.UnpicklingError) as error:
            raise self._ended() from error
        if kind == "ok":
            return payload
        raise payload

    def _ended(self) -> BaseException:
        """The process ended without an answer: how, and its own last words."""
        assert self._child is not None
        code = self._child.wait()
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
        killed = " (the kernel's OOM killer stops a process with SIGKILL)" if code == -signal.SIGKILL else ""
        self._said.seek(0)
        text = self._said.read().decode(errors="replace")[-20000:]
        line = f"the original model's process ended with {how} and no answer{killed}"
        self.close()
        return self._failed(line, f"{line}\n{text}")

    def close(self) -> None:
        """End the process (its memory is the machine's again); harmless when called twice."""
        child, self._child = self._child, None
        if child is not None:
            for stream in (child.stdin, child.stdout):
                with contextlib.suppress(OSError):
                    stream.close()  # type: ignore[union-attr]
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        self._counted.close()
        self._said.close()


def _serve() -> None:
    """In the child: load the model (`load(*args)`), say what it found, then answer requests until stdin
    closes."""
    replies: IO[bytes] = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything a library prints goes to the log, never into the answers
    requests = sys.stdin.buffer
    path, packed = pickle.load(requests)
    sys.path[:] = path
    from builder.optimize.tfenv import quiet_native_stderr, setup

    setup()

    def reply(kind: str, payload: Any) -> None:
        try:
            data = pickle.dumps((kind, payload), protocol=pickle.HIGHEST_PROTOCOL)
            if kind == "error":
                pickle.loads(data)  # an exception that pickles but cannot be made again there
        except Exception:  # noqa: BLE001 - what does not travel is sent as its text
            data = pickle.dumps(("error", RuntimeError(f"{type(payload).__name__}: {payload}")))
        replies.write(data)
        replies.flush()

    try:
        load, args = pickle.loads(packed)  # by name, now that the caller's modules can be found
        with quiet_native_stderr():
            loaded = load(*args)
    except BaseException as error:  # noqa: BLE001 - the parent raises it as loading here would have
        reply("error", error)
        return
    reply("ok", Found(loaded.inputs, loaded.outputs, dict(loaded.others), loaded.params, loaded.signature))
    while True:
        try:
            name, rows = pickle.load(requests)
        except EOFError:
            return
        try:
            with quiet_native_stderr():
                answers = loaded._predict(rows) if name is None else loaded._predict_other(name, rows)  # type: ignore[misc]
            reply("ok", {k: np.asarray(v) for k, v in answers.items()})
        except BaseException as error:  # noqa: BLE001 - the caller decides, as for a call made in its process
            reply("error", error)
