"""The metrics a scrape of the front answers with when the models run in processes of their own: every live
process's exposition and the front's own, summed into one, plus what only the front knows (requests each
process answered, restarts, processes live, its queue and its own CPU).

Counters, histograms and requests in flight add up across processes; a few gauges do not (`MERGED_BY`):
readiness is the least ready process's, a load time the slowest one's.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

#: Gauges that are not summed across model processes: readiness is the least ready process's, a load time
#: the slowest one's.
MERGED_BY = {"tfsmith_model_ready": min, "tfsmith_model_load_seconds": max, "process_start_time_seconds": min,
             "process_max_fds": max}


def front_only(answered: Sequence[int], queued: int, restarts: int, live: int) -> bytes:
    """The samples only the front has: requests each process answered, its queue, restarts, live processes and
    the front's own CPU."""
    counts = "".join(f'tfsmith_process_requests_total{{process="{i}"}} {n}\n' for i, n in enumerate(answered))
    front = os.times()
    return ("# HELP tfsmith_process_requests_total Requests each model process answered.\n"
            "# TYPE tfsmith_process_requests_total counter\n" + counts +
            "# HELP tfsmith_front_cpu_seconds_total CPU time of the front alone (one process, which every "
            "request passes through: near 1 second a second, it is what limits the server).\n"
            "# TYPE tfsmith_front_cpu_seconds_total counter\n"
            f"tfsmith_front_cpu_seconds_total {front.user + front.system}\n" +
            "# HELP tfsmith_model_process_queue Requests waiting for a model process with room (the balancer's one queue).\n"
            f"# TYPE tfsmith_model_process_queue gauge\ntfsmith_model_process_queue {queued}\n"
            "# HELP tfsmith_model_process_restarts_total Model processes that died unasked and were replaced.\n"
            "# TYPE tfsmith_model_process_restarts_total counter\n"
            f"tfsmith_model_process_restarts_total {restarts}\n"
            "# HELP tfsmith_model_processes_live Model processes answering requests now.\n"
            f"# TYPE tfsmith_model_processes_live gauge\ntfsmith_model_processes_live {live}\n").encode()


def merge_expositions(texts: list[bytes]) -> bytes:
    """One exposition from several processes' (`--model-processes N`): samples with the same name and labels are
    summed (counters, histograms, requests in flight), except the gauges of `MERGED_BY`."""
    from prometheus_client.parser import text_string_to_metric_families

    families: dict[str, tuple[str, str]] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], list[float]]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text.decode("utf-8")):
            families.setdefault(family.name, (family.type, family.documentation))
            samples = values.setdefault(family.name, {})
            for sample in family.samples:
                samples.setdefault((sample.name, tuple(sorted(sample.labels.items()))), []).append(sample.value)
    lines: list[str] = []
    for name, (kind, documentation) in families.items():
        lines.append(f"# HELP {name} {_escape_help(documentation)}")
        lines.append(f"# TYPE {name} {'untyped' if kind == 'unknown' else kind}")
        combine = MERGED_BY.get(name, sum)
        for (sample, labels), found in values[name].items():
            value = min(found) if sample.endswith("_created") else combine(found)
            text = ",".join(f'{key}="{_escape_label(label)}"' for key, label in labels)
            lines.append(f"{sample}{{{text}}} {_number(value)}" if text else f"{sample} {_number(value)}")
    return ("\n".join(lines) + "\n").encode() if lines else b""


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _escape_label(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _number(value: float) -> str:
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if value != int(value) else f"{value:.1f}"
