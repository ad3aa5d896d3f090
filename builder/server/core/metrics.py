"""Prometheus metrics under TensorFlow Serving's names (its dashboards and alerts keep working) plus ours.

TF Serving's: `:tensorflow:serving:request_count{model_name,status}`, `:tensorflow:serving:request_latency
{model_name,API,entrypoint}` (microseconds) and `:tensorflow:serving:batching_session:queuing_latency
{thread_pool_name}`. prometheus-client would publish a counter as `..._total`, which TF Serving's users'
queries do not name, so the request count is published as TF Serving writes it (an untyped sample of the
exact name) from a collector of our own. Ours: requests in flight, batch sizes, model load time, readiness.

Requests are counted by whoever answers them (`routes.Router.count`: a dict increment and a cached histogram
child per request, written there so that counting is no stop of its own on a request's path); the batcher
observes its batch sizes and queue times itself; the text is built only when scraped.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest
from prometheus_client.metrics_core import Metric

PATH = "/monitoring/prometheus/metrics"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Microsecond buckets from 10 us to 10 s: the digits CNN answers in ~100 us, MobileNetV2 JSON in ~100 ms.
LATENCY_BUCKETS_US = (10, 25, 50, 100, 250, 500, 1e3, 2.5e3, 5e3, 1e4, 2.5e4, 5e4, 1e5, 2.5e5, 5e5, 1e6, 1e7)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
REQUEST_COUNT = ":tensorflow:serving:request_count"
REQUEST_LATENCY = ":tensorflow:serving:request_latency"
QUEUING_LATENCY = ":tensorflow:serving:batching_session:queuing_latency"

CONTENT_TYPE_HEADERS = ((b"content-type", CONTENT_TYPE.encode()),)


class _RequestCount:
    """Collector publishing the request counter under TF Serving's exact sample name."""

    def __init__(self, counts: Tally[tuple[str, str]]) -> None:
        self._counts = counts

    def collect(self) -> Iterator[Metric]:
        metric = Metric(REQUEST_COUNT, "The total number of requests (TensorFlow Serving's name).", "untyped")
        for (model, status), value in sorted(self._counts.items()):
            metric.add_sample(REQUEST_COUNT, {"model_name": model, "status": status}, float(value))
        yield metric


class Metrics:
    """The server's metrics in a registry of its own (several servers in one test process never collide)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.counts: Tally[tuple[str, str]] = Tally()
        self.registry.register(_RequestCount(self.counts))
        self._latency = Histogram(REQUEST_LATENCY, "Distribution of request latency in microseconds "
                                  "(TensorFlow Serving's name).", ["model_name", "API", "entrypoint"],
                                  buckets=LATENCY_BUCKETS_US, registry=self.registry)
        self._queuing = Histogram(QUEUING_LATENCY, "Time a request waited in the batching queue, microseconds "
                                  "(TensorFlow Serving's name).", ["thread_pool_name"], buckets=LATENCY_BUCKETS_US,
                                  registry=self.registry)
        self.in_flight = Gauge("tfsmith_requests_in_flight", "Requests being answered now (all protocols).",
                               registry=self.registry)
        self.in_flight.set_function(lambda: self.active)  # read when scraped: nothing to do per request
        self.batch_sizes = Histogram("tfsmith_batch_size", "Examples per interpreter call.", buckets=BATCH_BUCKETS,
                                     registry=self.registry)
        self.load_seconds = Gauge("tfsmith_model_load_seconds", "Time to load and warm the model.",
                                  ["model_name", "version"], registry=self.registry)
        self.ready = Gauge("tfsmith_model_ready", "1 while the model is loaded, warmed and not draining.",
                           ["model_name"], registry=self.registry)
        self.model_cpu = Counter("tfsmith_model_cpu_seconds", "CPU time of the model's calls (the calling "
                                 "thread's), for what the server spends beyond the model: "
                                 "process_cpu_seconds_total minus this.", ["model_name"], registry=self.registry)
        ProcessCollector(registry=self.registry)
        #: the latency histogram's child of each (model, API, entrypoint), made once (`latency_child`)
        self.latency: dict[tuple[str, str, str], Any] = {}
        self.queuing_us = self._queuing.labels("tfsmith_batch_threads")
        #: requests of any route being answered now; kept by whoever counts requests (`routes.Router`)
        self.active = 0

    def latency_child(self, key: tuple[str, str, str]) -> Any:
        """The request latency histogram's child of (model, API, entrypoint), made on its first request."""
        child = self.latency.get(key)
        if child is None:
            child = self.latency[key] = self._latency.labels(*key)
        return child

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
