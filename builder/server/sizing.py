"""The server sizes itself: model processes × interpreters × threads per interpreter × batching, from the cores
this process may use (`measure.cores`: affinity and CPU quota) and the model's own measured call time.

What is measured at start (`measure_model`, the one timing loop, interleaved, ~2 s): the model's batch-1 call
at 1, 2, 4... threads up to the cores, and a batch of `BATCH_PROBE` examples at one thread. What is decided
from it (`choose`, pure):

- threads per interpreter: for throughput, the count that spends the fewest core-seconds per call (t × time at
  t threads; intra-op threads rarely scale linearly, so usually one); for latency, the fewest threads whose call
  is not slower beyond noise than the fastest. Ties go to fewer threads.
- processes: as many single-interpreter model processes as such interpreters fit the cores, never more busy
  threads than cores (XNNPACK's pool spins before it sleeps, so an idle intra-op thread still takes a core).
  Each process decodes and encodes under its own interpreter lock, so the Python work of a request scales with
  the processes. One interpreter's worth of cores (or one core) keeps the models in the front's own process:
  no hand-over at all. So does a model faster than a hand-over, unless the cores let model processes serve
  more than the front's own process can: that one process does every request's Python work under one
  interpreter lock, so it stops at one core's worth, while the front alone only receives and hands over.
- batching: natural batching (`--batch-timeout-us 0`: a batch is whatever queued while the interpreter was
  busy, so an idle server adds no latency) up to `BATCH_PROBE` when a batch's call costs less per example than
  single calls beyond noise; otherwise off.
- memory: the processes and interpreters chosen for the cores are cut to those that fit in the memory this
  server may use (its cgroup's limit, or the machine's; `Memory`), counting what the front holds and what one
  interpreter of the model added when it was loaded at start (each model process holds its own copy of the
  weights); a shape the user gave is kept, with a line when it does not fit.
- TensorFlow (a SavedModel) is not measured: its ops run on the process's own pools, sized to the cores, in
  one process.
Anything the user gave is kept as given; only what is `auto` is chosen, and the start-up lines say which.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.measure.cores import Cores, release_free_memory
from builder.server.core.runner import INLINE_BELOW_US
from builder.measure.decide import Timed, faster_beyond_noise
from builder.measure.stats import Summary

log = logging.getLogger("tfsmith.serve")

PREFERENCES = ("throughput", "latency")
#: Examples in the batched probe, and the largest natural batch `auto` turns on.
BATCH_PROBE = 8
#: The start-up measurement's time budget (it stops earlier once every median is pinned down).
MEASURE_BUDGET_S = 2.0


#: The share of the usable memory the server's model processes may fill: the rest is left for request and
#: answer bodies in flight, the shared-memory channels and the kernel's own pages.
MEMORY_SHARE = 0.9


@dataclass(frozen=True)
class Memory:
    """The memory this server may use (`usable` bytes, `source` saying whose figure it is; None: unknown), what
    the front held before any model loaded (`front`) and what one interpreter of the model added (`interpreter`,
    measured at start). A model process is counted as a front's worth of Python and runtime plus its
    interpreters: an upper bound, as it serves no protocol itself."""

    usable: int | None
    source: str
    front: int
    interpreter: int

    def needed(self, processes: int, interpreters: int) -> int:
        """Bytes the server holds with `processes` model processes (0: the models in the front's own process)
        of `interpreters` interpreters each."""
        if processes == 0:
            return self.front + interpreters * self.interpreter
        return self.front + processes * (self.front + interpreters * self.interpreter)

    @property
    def budget(self) -> int | None:
        return None if self.usable is None else int(self.usable * MEMORY_SHARE)


def _size(value: int) -> str:
    mib = value / (1024 * 1024)
    return f"{mib:.0f} MiB" if mib < 1024 else f"{mib / 1024:.1f} GiB"


def fit_memory(memory: Memory | None, processes: int, interpreters: int, asked: bool) -> tuple[int, int, str | None]:
    """(processes, interpreters, why) cut to what fits in the memory budget (pure). Fewer model processes first
    (down to two), then the models in the front's own process with as many interpreters as fit, up to those the
    processes would have run; one interpreter is always kept (a model that loads is served). `asked`: the user
    gave the shape, which is kept as given."""
    if memory is None:
        return processes, interpreters, None
    if memory.usable is None:
        return processes, interpreters, ("memory: this process cannot read the memory it may use; sized by the "
                                         "cores alone")
    budget = memory.budget or 0
    each = (f"{memory.source} of {_size(memory.usable)}, {MEMORY_SHARE:.0%} of it for the model processes; the "
            f"front holds {_size(memory.front)}, one interpreter of the model {_size(memory.interpreter)}")
    needed = memory.needed(processes, interpreters)
    if needed <= budget:
        return processes, interpreters, f"memory: {_size(needed)} for this shape, within {each}"
    if asked:
        return processes, interpreters, (f"memory: {_size(needed)} for the shape as asked, more than {each}: "
                                         "the kernel may stop a model process under load")
    for fewer in range(processes - 1, 1, -1):
        if memory.needed(fewer, interpreters) <= budget:
            return fewer, interpreters, (f"memory: {fewer} model processes, not {processes}: {processes} would need "
                                         f"{_size(needed)}, {fewer} need {_size(memory.needed(fewer, interpreters))}, "
                                         f"within {each}")
    wanted = max(1, processes) * interpreters  # as many interpreters as the processes would have run, if they fit
    alone = next((n for n in range(wanted, 0, -1) if memory.needed(0, n) <= budget), 1)
    shape = f"{alone} interpreter{'s' if alone != 1 else ''} in the front's own process"
    if memory.needed(0, alone) > budget:
        return 0, 1, (f"memory: {shape}, the least there is, needs {_size(memory.needed(0, 1))}, more than {each}; "
                      "served all the same")
    return 0, alone, (f"memory: {shape}, not {processes or 1} model process{'es' if processes > 1 else ''} of "
                      f"{interpreters} interpreter{'s' if interpreters != 1 else ''}: that needs {_size(needed)}, "
                      f"this {_size(memory.needed(0, alone))}, within {each}")


@dataclass(frozen=True)
class Measured:
    """The model's batch-1 call at each thread count tried, and a call of `batch` examples at one thread
    (None: not measured, e.g. a model whose batch dimension is fixed); `memory`, what the server may use and
    what the model took when it was loaded (None: not read)."""

    by_threads: Mapping[int, Summary]
    batch: int = 0
    batched: Summary | None = None
    memory: Memory | None = None


@dataclass(frozen=True)
class Asked:
    """What the user gave (None: auto)."""

    processes: int | None = None
    threads: int | None = None
    interpreters: int | None = None
    max_batch: int | None = None
    preference: str = "throughput"
    pin: bool = False


@dataclass(frozen=True)
class Sizing:
    """The server's shape: `processes` model processes (0: the models run in the front's process), each with
    `interpreters` interpreters of `threads` threads, natural batching up to `max_batch` (1: off), pinned to
    `cpus` (one tuple a process; None: not pinned); `why`, the lines said at start."""

    processes: int
    interpreters: int
    threads: int
    max_batch: int
    cpus: tuple[tuple[int, ...], ...] | None
    why: tuple[str, ...]

    @property
    def busy_threads(self) -> int:
        return max(1, self.processes) * self.interpreters * self.threads

    def describe(self) -> str:
        where = "the front's own process" if self.processes == 0 else f"{self.processes} model processes"
        batching = f"batching up to {self.max_batch}" if self.max_batch > 1 else "no batching"
        pinned = ", each pinned to its cores" if self.cpus else ""
        return (f"{where} × {self.interpreters} interpreter{'s' if self.interpreters != 1 else ''} × "
                f"{self.threads} thread{'s' if self.threads != 1 else ''}, {batching}{pinned}")


#: What one small request costs beyond the model's call, in CPU microseconds, under load (the digits CNN, v2
#: binary, 16 connections): the front's share with model processes (HTTP in and out, the hand-over; one front
#: passed 17,500 requests/s to 6 model processes on 12 cores of a Xeon, so at most ~57 us), a model process's
#: (the notice, decode, encode: 140-160 us on a 2-core AMD EPYC guest), and the whole server with the models in
#: the front's own process (115-135 us on that guest). A rule, since none can be timed before requests arrive:
#: they bound how many processes one front feeds and what one process serves.
FRONT_US = 60.0
PROCESS_US = 150.0
IN_PROCESS_US = 130.0
#: What handing a small request to a model process adds to its CPU cost, whole server (notices both ways, the
#: wake-ups, the copy): the digits CNN over v2 cost ~330 us more in 2 model processes than in one process
#: (2-core AMD EPYC guest).
HANDOVER_US = 330.0
#: A model faster than a hand-over, served apart, gets the fitting interpreters ÷ this many processes. Measured
#: with the digits CNN (v2 binary, 16 connections, one thread each) on 12 cores of a Xeon: the front was busy
#: all the time and spent less a request the more processes it collected answers from, until they took its core.
FRONT_BOUND_SHARE = 2
FRONT_BOUND_MEASURED = ("the digits CNN on 12 cores of a Xeon, two runs: 3 processes 9,900-14,300, "
                        "4 11,900-13,600, 6 15,400-17,100, 12 12,500-13,300 requests/s")
#: What a hand-over adds to a fast model's latency, one client at a time (v2 binary, median).
HANDOVER_LATENCY = "the digits CNN's median answer on 12 cores of a Xeon: 0.23 ms in one process, 0.69 ms in 12"


def in_process_per_s(call_us: float, cores: int, interpreters: int) -> float:
    """Requests/s the front's own process can serve: every request's Python work runs under its one interpreter
    lock (and the call too, where it runs on the event loop), the calls share the interpreters, and all of it
    shares the cores."""
    serial_us = IN_PROCESS_US + (call_us if call_us < INLINE_BELOW_US else 0.0)
    return min(1e6 / serial_us, interpreters * 1e6 / call_us, cores * 1e6 / (IN_PROCESS_US + call_us))


def apart_per_s(call_us: float, cores: int) -> float:
    """Requests/s model processes can serve: no more than the one front hands over, and no more than the cores
    hold when each request costs the server its in-process work and the hand-over."""
    return min(1e6 / FRONT_US, cores * 1e6 / (IN_PROCESS_US + HANDOVER_US + call_us))


def fed_processes(measured: Measured | None, threads: int) -> int | None:
    """How many model processes one front keeps busy with a call of the measured length, at least 2 (None:
    not measured)."""
    if measured is None or threads not in measured.by_threads:
        return None
    call_us = measured.by_threads[threads].p50 * 1e6
    return max(2, math.ceil((call_us + PROCESS_US) / FRONT_US))


def thread_counts(cores: int) -> list[int]:
    """The thread counts worth measuring: 1, 2, 4... up to the cores, and the cores themselves."""
    counts, t = [], 1
    while t < cores:
        counts.append(t)
        t *= 2
    counts.append(cores)
    return counts


def _ms(summary: Summary) -> str:
    return f"{summary.p50 * 1e3:.3g} ms"


def choose_threads(measured: Measured, preference: str, cores: int) -> tuple[int, str]:
    """(threads per interpreter, why) from the measured calls."""
    tried = {t: s for t, s in sorted(measured.by_threads.items()) if t <= cores}
    if not tried:
        return 1, "threads: 1 per interpreter (the model could not be timed)"
    figures = ", ".join(f"{_ms(s)} at {t}" for t, s in tried.items())
    if preference == "latency":
        items = [Timed(str(t), s.p50, s.ci_low, s.ci_high, preference=t) for t, s in tried.items()]
        why = "the fewest threads no slower beyond noise than the fastest call"
    else:  # core-seconds per call: what a full server spends on each answer
        items = [Timed(str(t), s.p50 * t, s.ci_low * t, s.ci_high * t, preference=t) for t, s in tried.items()]
        why = "the fewest core-seconds per call (threads × call time)"
    best = min(items, key=lambda i: (i.p50, i.preference))
    chosen = min((i for i in items if not faster_beyond_noise(best, i)), key=lambda i: i.preference)
    threads = int(chosen.name)
    return threads, f"threads: {threads} per interpreter, {why}; the model measured {figures} threads"


def choose_batching(measured: Measured) -> tuple[int, str]:
    """(max batch, why): natural batching where a batch costs less per example beyond noise."""
    single = measured.by_threads.get(1)
    if measured.batched is None or single is None or measured.batch < 2:
        return 1, "batching: off (the model's batch is fixed, or it could not be timed batched)"
    if single.p50 * 1e6 < INLINE_BELOW_US:
        return 1, (f"batching: off, a {single.p50 * 1e6:.0f} us call runs on the event loop itself, which costs less "
                   "than handing it to a batch's thread")
    per = measured.batch
    batched = Timed("batch", measured.batched.p50 / per, measured.batched.ci_low / per, measured.batched.ci_high / per)
    alone = Timed("single", single.p50, single.ci_low, single.ci_high)
    detail = (f"{measured.batched.p50 / per * 1e3:.3g} ms an example in a batch of {per} against "
              f"{single.p50 * 1e3:.3g} ms alone")
    if faster_beyond_noise(batched, alone):
        return per, f"batching: natural, up to {per}: {detail}"
    return 1, f"batching: off, a batch is not cheaper per example ({detail})"


def choose(cores: Cores, measured: Measured | None, asked: Asked, tensorflow: bool = False) -> Sizing:
    """The server's shape for these cores and this model (pure)."""
    count = cores.count
    why = [f"cores: this process may use {cores.describe()}"]
    if tensorflow:
        threads = asked.threads or count
        why.append(f"threads: {threads} intra-op" + ("" if asked.threads else ", TensorFlow runs a SavedModel on its own pools, sized to the cores"))
        interpreters = asked.interpreters or 2
        return Sizing(max(0, (asked.processes or 1)) if (asked.processes or 1) > 1 else 0, interpreters, threads,
                      asked.max_batch or 1, None, tuple(why))
    if asked.threads is not None:
        threads = asked.threads
        why.append(f"threads: {threads} per interpreter, as asked")
    elif measured is None:
        threads = 1
        why.append("threads: 1 per interpreter (the model could not be timed at start)")
    else:
        threads, reason = choose_threads(measured, asked.preference, count)
        why.append(reason)
    fit = max(1, count // threads)  # interpreters of this size the cores hold
    call_us = measured.by_threads[threads].p50 * 1e6 if measured and threads in measured.by_threads else math.inf
    fast = call_us < HANDOVER_US  # shorter than handing its request to a model process (never when not timed)
    if asked.processes is not None:
        processes = asked.processes if asked.processes > 1 else 0
        per_process = max(1, fit // max(1, asked.processes))
        interpreters = asked.interpreters or per_process
        why.append(f"processes: {asked.processes}, as asked, {interpreters} interpreter{'s' if interpreters != 1 else ''} "
                   "each")
    elif asked.interpreters is not None:
        processes, interpreters = 0, asked.interpreters
        why.append(f"processes: one, with {interpreters} interpreters, as asked")
    elif fit == 1:
        processes, interpreters = 0, 1
        why.append("processes: none apart, one interpreter fills the cores and runs in the front's own process "
                   "(nothing to hand over)")
    elif fast and asked.preference == "latency":
        processes, interpreters = 0, min(fit, 2)
        why.append(f"processes: none apart, a {call_us:.0f} us call is shorter than handing its request to a model "
                   f"process costs (~{HANDOVER_US:.0f} us of CPU), and for latency no request waits for a hand-over's "
                   f"wake-ups ({HANDOVER_LATENCY}); the front's own process runs {interpreters} "
                   f"interpreter{'s' if interpreters != 1 else ''}")
    elif fast and in_process_per_s(call_us, count, min(fit, 2)) >= apart_per_s(call_us, count):
        processes, interpreters = 0, min(fit, 2)
        why.append(f"processes: none apart, a {call_us:.0f} us call is shorter than handing its request to a model "
                   f"process costs (~{HANDOVER_US:.0f} us of CPU), and on {count} cores the front's own process "
                   f"serves ~{in_process_per_s(call_us, count, interpreters):,.0f} requests/s against "
                   f"~{apart_per_s(call_us, count):,.0f} with model processes; it runs {interpreters} "
                   f"interpreter{'s' if interpreters != 1 else ''}")
    else:
        interpreters = 1
        fed = fed_processes(measured, threads)
        processes = min(fit, fed) if fed is not None else fit
        if fast:
            processes = max(2, fit // FRONT_BOUND_SHARE)
            why.append(f"processes apart although a {call_us:.0f} us call is shorter than a hand-over "
                       f"(~{HANDOVER_US:.0f} us): on {count} cores the front's own process would serve "
                       f"~{in_process_per_s(call_us, count, min(fit, 2)):,.0f} requests/s, one interpreter lock doing "
                       f"every request's work (~{IN_PROCESS_US:.0f} us each), and model processes "
                       f"~{apart_per_s(call_us, count):,.0f}, the front only handing over (~{FRONT_US:.0f} us each)")
            why.append(f"processes: {processes} of one interpreter each, half the {fit} that fit: the front is the "
                       "limit, and it hands over for less the more processes answer it, until the processes crowd "
                       "its core (measured: " + FRONT_BOUND_MEASURED + ")")
        elif processes < fit:
            why.append(f"processes: {processes} of one interpreter each, not {fit}: the front hands over a request "
                       f"in about {FRONT_US:.0f} us, so more processes than (call + {PROCESS_US:.0f} us) / "
                       f"{FRONT_US:.0f} us would only wait for it")
        else:
            why.append(f"processes: {fit} of one interpreter each, {fit} × {threads} thread"
                       f"{'s' if threads != 1 else ''} fill {count} cores and each process decodes and encodes its "
                       "requests under its own interpreter lock")
    processes, interpreters, memory_why = fit_memory(measured.memory if measured else None, processes, interpreters,
                                                     asked.processes is not None or asked.interpreters is not None)
    if memory_why:
        why.append(memory_why)
    if asked.max_batch is not None:
        max_batch = asked.max_batch
        if max_batch > 1:
            why.append(f"batching: up to {max_batch}, as asked")
    elif measured is None:
        max_batch = 1
    else:
        max_batch, reason = choose_batching(measured)
        why.append(reason)
    cpus = None
    if asked.pin and processes:
        cpus = pin(cores.ids, processes, interpreters * threads)
        if cpus is None:
            why.append("pinning: off, fewer cores than the processes' threads")
    return Sizing(processes, interpreters, threads, max_batch, cpus, tuple(why))


def pin(ids: Sequence[int], processes: int, each: int) -> tuple[tuple[int, ...], ...] | None:
    """Disjoint cores for each process (`each` apiece, in order), or None when they do not fit."""
    if processes * each > len(ids):
        return None
    return tuple(tuple(ids[i * each:(i + 1) * each]) for i in range(processes))


# --- measuring (I/O) -------------------------------------------------------------------------------------


def measure_model(runtime: str, model_path: Path, samples_path: Path | None, signature_name: str | None,
                  cores: int, budget_s: float = MEASURE_BUDGET_S) -> Measured | None:
    """The model's calls timed at each of `thread_counts(cores)` and batched at one thread, interleaved in one
    loop (`builder.measure.loop`); None when the model cannot be run on its example inputs (then it is still
    served, sized by the cores alone)."""
    from builder.measure import stats

    try:
        timed = _time_calls(runtime, model_path, samples_path, signature_name, cores, budget_s)
    except Exception as error:  # noqa: BLE001 - sizing never stops a server from starting
        log.info("sizing: the model could not be timed (%s: %s); sizing by the cores alone",
                 type(error).__name__, str(error).splitlines()[0] if str(error) else "")
        return None
    finally:
        release_free_memory()  # the timed interpreters' packed weights, before the server's own load
    samples, memory = timed
    by_threads = {int(name.split("=")[1]): stats.summarize(times) for name, times in samples.items()
                  if name.startswith("threads=")}
    batched_summary = stats.summarize(samples["batch"]) if "batch" in samples else None
    return Measured(by_threads, BATCH_PROBE if batched_summary else 0, batched_summary, memory)


def usable_memory(root: Path = Path("/")) -> tuple[int | None, str]:
    """(bytes this process may use, whose figure it is): its cgroup's memory limit (the tightest level), else the
    machine's MemTotal (`builder.measure.memory`, the same reader `tfsmith detect` and optimize use)."""
    from builder.measure.memory import cgroup_memory_limit, mem_total

    limit, total = cgroup_memory_limit(root), mem_total(root)
    if limit is not None and (total is None or limit < total):
        return limit, "a cgroup memory limit"
    return total, "the machine's memory"


def _time_calls(runtime: str, model_path: Path, samples_path: Path | None, signature_name: str | None,
                cores: int, budget_s: float) -> tuple[dict[str, list[float]], Memory | None]:
    """Each runner's call times, and the memory the first interpreter took (loaded and called once, so its
    packed weights are counted); the interpreters made here are gone once it returns."""
    from builder.measure import loop
    from builder.measure.memory import rss_bytes
    from builder.model.create import create_backend
    from builder.model.inputs import example_inputs
    from builder.model.signature import DEFAULT_SIGNATURE, batched

    before = rss_bytes()
    first = create_backend(runtime, model_path, 1)
    signature = first.signatures.get(signature_name or DEFAULT_SIGNATURE) or next(iter(first.signatures.values()))
    single = example_inputs(signature, samples_path)
    first.answer(signature.name, single)
    after = rss_bytes()
    memory = None
    if before is not None and after is not None:
        memory = Memory(*usable_memory(), front=before, interpreter=max(0, after - before))
    backends = {t: first if t == 1 else create_backend(runtime, model_path, t) for t in thread_counts(cores)}
    runners: dict[str, Any] = {f"threads={t}": (lambda b=backend: b.answer(signature.name, single))
                               for t, backend in backends.items()}
    if signature.inputs and all(batched(spec) for spec in signature.inputs):
        several = example_inputs(signature, samples_path, BATCH_PROBE)
        runners["batch"] = lambda: first.answer(signature.name, several)
    return loop.interleave(runners, budget_s, warmup=3, min_samples=20)[0], memory
