"""The server never starts more model processes than fit in the memory it may use (`sizing.fit_memory`, and
`choose` with a measured `Memory`), and reads that memory from its cgroup the way the host's detection does."""

from __future__ import annotations

from pathlib import Path

from builder.measure.cores import Cores
from builder.measure.stats import summarize
from builder.server.sizing import Asked, Measured, Memory, choose, fit_memory, usable_memory

MIB = 1024 * 1024
GIB = 1024 * MIB


def slow_model(memory: Memory | None) -> Measured:
    """A 90 ms call at one thread (BERT-base on LiteRT, dynamic-range int8), 60 ms at two: one thread each."""
    by_threads = {t: summarize([ms / 1e3 * (1 + 0.01 * ((i % 7) - 3) / 3) for i in range(60)])
                  for t, ms in {1: 90.0, 2: 60.0, 4: 40.0, 8: 30.0}.items()}
    return Measured(by_threads, memory=memory)  # type: ignore[arg-type]


def bert(usable: int | None) -> Memory:
    """A 92 MiB front and 263 MiB for each interpreter of the model (what serving a BERT-base took)."""
    return Memory(usable, "a cgroup memory limit", front=92 * MIB, interpreter=263 * MIB)


def test_a_shape_that_fits_is_kept_and_says_so() -> None:
    processes, interpreters, why = fit_memory(bert(8 * GIB), 2, 1, asked=False)
    assert (processes, interpreters) == (2, 1)
    assert why is not None and "within a cgroup memory limit of 8.0 GiB" in why and "263 MiB" in why


def test_processes_are_cut_to_those_that_fit() -> None:
    # 8 processes x (92 + 263) MiB + the front = 2.9 GiB; a 2 GiB limit leaves 1.8 GiB for them: 4 fit
    memory = bert(2 * GIB)
    processes, interpreters, why = fit_memory(memory, 8, 1, asked=False)
    assert (processes, interpreters) == (4, 1)
    assert memory.needed(4, 1) <= memory.budget < memory.needed(5, 1)
    assert why is not None and "4 model processes, not 8" in why


def test_too_little_for_two_processes_serves_in_the_front_with_the_interpreters_that_fit() -> None:
    memory = bert(700 * MIB)  # 630 MiB budget: two processes need 802 MiB, the front with two interpreters 618
    processes, interpreters, why = fit_memory(memory, 4, 1, asked=False)
    assert (processes, interpreters) == (0, 2)
    assert memory.needed(0, 2) <= memory.budget < memory.needed(0, 3)
    assert why is not None and "front's own process" in why


def test_a_model_bigger_than_the_budget_is_still_served_once() -> None:
    processes, interpreters, why = fit_memory(bert(256 * MIB), 2, 1, asked=False)
    assert (processes, interpreters) == (0, 1)
    assert why is not None and "served all the same" in why


def test_a_shape_the_user_gave_is_kept_with_a_warning() -> None:
    processes, interpreters, why = fit_memory(bert(1 * GIB), 8, 1, asked=True)
    assert (processes, interpreters) == (8, 1)
    assert why is not None and "as asked, more than" in why


def test_unknown_memory_changes_nothing_and_says_why() -> None:
    assert fit_memory(None, 4, 1, asked=False) == (4, 1, None)
    processes, _, why = fit_memory(bert(None), 4, 1, asked=False)
    assert processes == 4 and why is not None and "sized by the cores alone" in why


def test_choose_on_many_cores_starts_only_the_processes_that_fit() -> None:
    cores = Cores(tuple(range(16)))
    roomy = choose(cores, slow_model(bert(64 * GIB)), Asked())
    tight = choose(cores, slow_model(bert(2 * GIB)), Asked())
    assert roomy.processes > 4  # the cores alone would start more
    assert tight.processes == 4
    assert any(line.startswith("memory: 4 model processes") for line in tight.why)
    assert any(line.startswith("memory:") and "within" in line for line in roomy.why)


def test_choose_keeps_asked_processes() -> None:
    sizing = choose(Cores(tuple(range(16))), slow_model(bert(1 * GIB)), Asked(processes=8))
    assert sizing.processes == 8 and any("as asked, more than" in line for line in sizing.why)


def cgroup_root(tmp_path: Path, cgroup: str, files: dict[str, str], meminfo_kib: int) -> Path:
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/cgroup").write_text(cgroup)
    (tmp_path / "proc/meminfo").write_text(f"MemTotal:       {meminfo_kib} kB\nMemFree: 1 kB\n")
    for relative, text in files.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text)
    return tmp_path


def test_usable_memory_is_the_cgroup_v2_limit(tmp_path: Path) -> None:
    root = cgroup_root(tmp_path, "0::/pod\n", {"sys/fs/cgroup/pod/memory.max": f"{8 * GIB}\n"}, 24 * 1024 * 1024)
    assert usable_memory(root) == (8 * GIB, "a cgroup memory limit")


def test_usable_memory_is_the_cgroup_v1_limit(tmp_path: Path) -> None:
    root = cgroup_root(tmp_path, "4:memory:/job\n", {"sys/fs/cgroup/memory/job/memory.limit_in_bytes": f"{GIB}\n"},
                       24 * 1024 * 1024)
    assert usable_memory(root) == (GIB, "a cgroup memory limit")


def test_usable_memory_without_a_limit_is_the_machine(tmp_path: Path) -> None:
    root = cgroup_root(tmp_path, "0::/pod\n", {"sys/fs/cgroup/pod/memory.max": "max\n"}, 16 * 1024 * 1024)
    assert usable_memory(root) == (16 * GIB, "the machine's memory")
