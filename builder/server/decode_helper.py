"""A second core for large JSON bodies: a helper process reads part of a tensor's text while the request's
thread reads the rest (`tensor_json.ReadAhead`, and `tensor_json.parse_predict` or `v2_document` with `halves`).

Reading a 1x224x224x3 image from JSON (3.2 MB, 150,528 numbers) is as slow as running MobileNetV2 on it, and
it is pure CPU in simdjson, which holds the GIL: two threads of one process would take turns. A process of
its own does not. One helper per server process, started at start-up when a batch-1 body of a served model
is large enough for it to matter (`start_for`), and kept only where it measured faster there, with the one
timing loop (`builder.measure`): on one core, or a busy machine, it is not.

The server and the helper share one memory file (memfd) and talk over two pipes: the server copies text
into the shared memory (a body as it arrives, or a second half) and says where it is (48 bytes, numbered);
the helper answers, with the same number, how many numbers and skeleton bytes it wrote where it was told
(24 bytes), or -1 when it could not read them. Everything that decides a request's answer (the envelope,
the structure, the dtype checks) stays with the server; an answer the helper cannot give (a parse error, a
crash, a timeout) only makes that body be read on one core.
The helper ends when the server's end of its pipe closes: when the server stops, or dies. The shared
memory grows to fit the largest body handed over, about 6x its size at most (text, up to one 8-byte number
per two bytes, skeleton), so at most about 6x `--max-body-bytes`, and stays that size.
"""

from __future__ import annotations

import json
import logging
import mmap
import os
import select
import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from builder.server import tensor_json
from builder.server.protocol import SignatureSpec

log = logging.getLogger("tfsmith.serve")

#: The server's request: its number, the shared memory's size, where the text is and how long, where the
#: answer goes, and flags (`FLOATS`: doubles, else int64; `FIRST`: the text is a tensor's first half).
REQUEST = struct.Struct("<QQQQQQ")
FLOATS, FIRST = 1, 2
#: The helper's answer: the request's number, numbers written (-1: could not read the text), skeleton bytes.
ANSWER = struct.Struct("<Qqq")
#: Longest wait for the helper's answer before the body is read on one core and the helper is stopped.
ANSWER_TIMEOUT_S = 30.0
#: The start-up measurement's time budget (it stops earlier once both medians are pinned down).
MEASURE_BUDGET_S = 1.5


def _numbers_at(length: int) -> int:
    """Where the answer's numbers start in the shared memory: after the text, 8-byte aligned."""
    return (length + 7) // 8 * 8


def _needed(length: int) -> int:
    """Shared memory for a text of `length` bytes: the text, its numbers (a number takes at least one byte and
    a comma, so at most length // 2 + 1 of them, 8 bytes each) and its skeleton (at most the text)."""
    return _numbers_at(length) + 8 * (length // 2 + 1) + length


class DecodeHelper:
    """The server's side of one helper process; a `tensor_json.HalfReader` for one body at a time.

    Every request is numbered and every answer must carry its request's number: an answer out of step (or
    late, or missing) stops the helper for good rather than risk reading another body's numbers."""

    def __init__(self) -> None:
        self._memory_fd = os.memfd_create("tfsmith-json-halves")
        self._size = 0
        self._memory: mmap.mmap | None = None
        request_read, self._requests = os.pipe()
        self._answers, answer_write = os.pipe()
        root = str(Path(__file__).resolve().parents[2])  # the folder holding `builder`, in images and checkouts
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "builder.server.decode_helper", str(self._memory_fd), str(request_read),
                 str(answer_write)], pass_fds=(self._memory_fd, request_read, answer_write), env=env,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        finally:
            os.close(request_read)
            os.close(answer_write)
        self._poll = select.poll()
        self._poll.register(self._answers, select.POLLIN)
        self._lock = threading.Lock()
        self._pending: tuple[int, bool] | None = None  # where the answer goes, and whether it is doubles
        self._reserved = 0
        self._sent = 0
        self.broken = False

    def reserve(self, length: int) -> mmap.mmap | None:
        """The shared memory, large enough for a body of `length` bytes and the answer about any part of it,
        to write text into; the helper is then the caller's until `collect` (after `start`) or `release`.
        None when it is busy or broken."""
        if self.broken or not self._lock.acquire(blocking=False):
            return None
        try:
            self._grow(_needed(length))
        except (OSError, ValueError) as error:
            self._fail(f"its shared memory could not grow ({error})")
            self._lock.release()
            return None
        self._reserved = length
        return self._memory

    def start(self, offset: int, length: int, floats: bool, first: bool) -> bool:
        """Have the helper read `memory[offset:offset + length]` of the reserved memory (`tensor_json.read_half`
        with `first`); False (and the reservation released) when it could not be asked."""
        out = _numbers_at(self._reserved)
        self._sent += 1
        try:
            os.write(self._requests, REQUEST.pack(self._sent, self._size, offset, length, out,
                                                  (FLOATS if floats else 0) | (FIRST if first else 0)))
        except OSError as error:
            self._fail(f"could not hand it a body ({error})")
            self.release()
            return False
        self._pending = (out, floats)
        return True

    def release(self) -> None:
        """Give up a reservation that was never started."""
        self._lock.release()

    def submit(self, text: bytes, floats: bool) -> bool:
        memory = self.reserve(len(text))
        if memory is None:
            return False
        memory[:len(text)] = text
        return self.start(0, len(text), floats, first=False)

    def collect(self) -> tuple[np.ndarray, bytes] | None:
        if self._pending is None:
            return None
        at, floats = self._pending
        self._pending = None
        try:
            count, skeleton_length = self._answer()
            if count < 0:
                return None
            assert self._memory is not None
            numbers = np.frombuffer(self._memory, np.float64 if floats else np.int64, count, at).copy()
            return numbers, self._memory[at + 8 * count:at + 8 * count + skeleton_length]
        except Exception as error:  # noqa: BLE001 - whatever it was, this body is read on one core
            self._fail(str(error))
            return None
        finally:
            self._lock.release()

    def _answer(self) -> tuple[int, int]:
        """The answer to the last request (RuntimeError when none came in time, or one out of step)."""
        if not self._poll.poll(ANSWER_TIMEOUT_S * 1000):
            raise RuntimeError(f"it did not answer in {ANSWER_TIMEOUT_S:.0f} s")
        message = os.read(self._answers, ANSWER.size)
        if len(message) != ANSWER.size:
            raise RuntimeError("it stopped")
        number, count, skeleton_length = ANSWER.unpack(message)
        if number != self._sent:
            raise RuntimeError(f"its answer was out of step (to request {number}, not {self._sent})")
        return count, skeleton_length

    def _grow(self, size: int) -> None:
        """The shared memory at least `size` bytes (a new mapping: the helper maps it anew when told the size)."""
        if size <= self._size:
            return
        size = max(size, 2 * self._size)
        os.ftruncate(self._memory_fd, size)
        if self._memory is not None:
            self._memory.close()
        self._memory, self._size = mmap.mmap(self._memory_fd, size), size

    def _fail(self, why: str) -> None:
        """Stop using the helper: every body is read on one core from now on, as without it."""
        if not self.broken:
            log.warning("JSON decoding helper: %s; large JSON bodies are read on one core from now on", why)
        self.broken = True
        self._process.kill()

    def close(self) -> None:
        """Stop the helper (closing its pipe ends it) and free the shared memory, once no body is being read
        (its descriptors must not close under a reading thread)."""
        self.broken = True
        if not self._lock.acquire(timeout=ANSWER_TIMEOUT_S):
            self._process.kill()
            return
        try:
            os.close(self._requests)
            os.close(self._answers)
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            if self._memory is not None:
                self._memory.close()
            os.close(self._memory_fd)
        finally:
            self._lock.release()


def largest_input(signatures: Iterable[SignatureSpec]) -> SignatureSpec | None:
    """The signature whose one input takes the most numbers an example, among those whose bodies are read
    here (`tensor_json.numeric_input`: one numeric input of static shape); None when there is none."""
    readable = [s for s in signatures if tensor_json.numeric_input(s) is not None]
    return max(readable, key=lambda s: int(np.prod(s.inputs[0].shape[1:], dtype=np.int64)), default=None)


def example_body(signature: SignatureSpec) -> bytes:
    """A batch-1 TF Serving body for the signature's one numeric input, as a client writes it: random doubles
    for a float input (~20 bytes a number), integers below 1000 for an integer one (token ids, ~5 bytes)."""
    numeric = tensor_json.numeric_input(signature)
    assert numeric is not None, "only for signatures largest_input chose"
    _, dims, want = numeric
    rng = np.random.default_rng(0)
    values = rng.random((1, *dims)) if want.kind == "f" else \
        rng.integers(0, min(1000, int(np.iinfo(want).max) + 1), (1, *dims))
    return json.dumps({"signature_name": signature.name, "instances": values.tolist()}).encode()


def start_for(signatures: Iterable[SignatureSpec], budget_s: float = MEASURE_BUDGET_S) -> DecodeHelper | None:
    """A helper when a batch-1 body of the served signature with the largest input (`largest_input`) is at
    least `tensor_json.SPLIT_MIN_BYTES`, and reading it on two cores measured faster beyond noise than on one
    (said in the log either way); None otherwise. Start-up never fails on it: a helper that cannot start is
    said, and the server serves without."""
    from builder.measure import decide, loop, stats
    from builder.server.pool import cpu_count

    signature = largest_input(signatures)
    if signature is None or tensor_json.simdjson is None:
        return None
    body = example_body(signature)
    if len(body) < tensor_json.SPLIT_MIN_BYTES:
        return None
    if cpu_count() < 2:
        log.info("large JSON bodies are read on one core: this process may run on one core only")
        return None
    signatures_by_name = {signature.name: signature}
    try:
        helper = DecodeHelper()
    except (OSError, subprocess.SubprocessError) as error:
        log.warning("large JSON bodies are read on one core: the decoding helper did not start (%s)", error)
        return None
    runners = {"one core": lambda: tensor_json.parse_predict(body, signatures_by_name, 1),
               "two cores": lambda: tensor_json.parse_predict(body, signatures_by_name, 1, halves=helper)}
    try:
        if runners["two cores"]() is None or helper.broken:
            raise RuntimeError("it could not read an example body")
        samples = loop.interleave(runners, budget_s, warmup=2, min_samples=15)[0]
    except Exception as error:  # noqa: BLE001 - the server serves without it
        log.warning("large JSON bodies are read on one core: the decoding helper failed its start-up test (%s)",
                    error)
        helper.close()
        return None
    one, two = (decide.Timed.of(name, stats.summarize(samples[name], min_samples=1)) for name in runners)
    said = (f"a {len(body) / 2**20:.1f} MiB batch-1 body of {signature.name}: {two.p50 * 1e3:.2f} ms on two cores, "
            f"{one.p50 * 1e3:.2f} ms on one (p50, measured at start-up)")
    if not decide.faster_beyond_noise(two, one):
        log.info("large JSON bodies are read on one core, not faster on two here: %s", said)
        helper.close()
        return None
    log.info("JSON bodies from %d KiB are read on two cores (a helper process): %s",
             tensor_json.SPLIT_MIN_BYTES // 1024, said)
    return helper


# --- the helper process ----------------------------------------------------------------------------------

def _read_exactly(fd: int, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def serve(memory_fd: int, requests: int, answers: int) -> None:
    """The helper's loop: read each submitted half (`tensor_json.read_half`) until the server closes the pipe."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C stops the server, which then closes the pipe
    memory: mmap.mmap | None = None
    size = 0
    while (message := _read_exactly(requests, REQUEST.size)) is not None:
        number, new_size, offset, length, at, flags = REQUEST.unpack(message)
        if new_size != size:
            if memory is not None:
                memory.close()
            memory, size = mmap.mmap(memory_fd, new_size), new_size
        assert memory is not None
        try:
            numbers, skeleton = tensor_json.read_half(memory[offset:offset + length], bool(flags & FLOATS),
                                                      first=bool(flags & FIRST))
        except tensor_json.READ_ERRORS:
            os.write(answers, ANSWER.pack(number, -1, 0))
            continue
        end = at + numbers.nbytes
        memory[at:end] = numbers.data.cast("B")
        memory[end:end + len(skeleton)] = skeleton
        os.write(answers, ANSWER.pack(number, numbers.size, len(skeleton)))


if __name__ == "__main__":
    serve(*map(int, sys.argv[1:4]))
