"""Prometheus metrics of `tfsmith serve`, read back with prometheus-client's own parser: TF Serving's names
(request count by model and status, request latency by API and entrypoint, batching queue latency) and
ours (in flight, batch sizes, load time, readiness), counting REST, v2 and gRPC requests alike."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.e2e.test_serve import HTTP, IN_FRONT, STOPPED, Server, inputs, models  # noqa: F401 - models is a fixture

parser = pytest.importorskip("prometheus_client.parser")


def scrape(server: Server) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    answer = HTTP.get(f"{server.url}/monitoring/prometheus/metrics")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in parser.text_string_to_metric_families(answer.text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def test_metrics_count_every_protocol_by_status(models: Path) -> None:  # noqa: F811
    grpc = pytest.importorskip("grpc")
    from builder.wire import tfs_proto
    from builder.wire.tensors import fill_proto

    running = Server(*IN_FRONT, str(models / "image.tflite"), "--model-name", "digits", "--max-batch", "4", grpc=True)
    try:
        x = inputs(1, seed=41)
        for _ in range(3):
            assert HTTP.post(f"{running.url}/v1/models/digits:predict", json={"instances": x.tolist()}).status_code == 200
        assert HTTP.post(f"{running.url}/v1/models/digits:predict", content=b"{").status_code == 400
        assert HTTP.post(f"{running.url}/v1/models/digits/versions/7:predict", json={"instances": []}).status_code == 404
        v2 = {"inputs": [{"name": "pixels", "shape": [1, 8, 8, 1], "datatype": "FP32", "data": x.ravel().tolist()}]}
        assert HTTP.post(f"{running.url}/v2/models/digits/infer", json=v2).status_code == 200
        request = tfs_proto.PredictRequest()
        request.model_spec.name = "digits"
        fill_proto(request.inputs["pixels"], x)
        with grpc.insecure_channel(f"127.0.0.1:{running.grpc_port}") as channel:
            predict = channel.unary_unary("/tensorflow.serving.PredictionService/Predict",
                                          request_serializer=tfs_proto.PredictRequest.SerializeToString,
                                          response_deserializer=tfs_proto.PredictResponse.FromString)
            assert predict(request, timeout=10).outputs["probs"].tensor_content
        assert HTTP.get(f"{running.url}/v1/models/digits/metadata").status_code == 200
        assert HTTP.get(f"{running.url}/v2/models/digits/ready").status_code == 200
        got = scrape(running)
        counts = got[":tensorflow:serving:request_count"]
        assert counts[(("model_name", "digits"), ("status", "OK"))] == 7  # five predicts, metadata, readiness
        assert counts[(("model_name", ""), ("status", "OK"))] >= 1  # the start-up wait's /v2/health/ready
        assert counts[(("model_name", "digits"), ("status", "INVALID_ARGUMENT"))] == 1
        assert counts[(("model_name", "digits"), ("status", "NOT_FOUND"))] == 1
        latency = got[":tensorflow:serving:request_latency_count"]
        assert latency[(("API", "predict"), ("entrypoint", "REST"), ("model_name", "digits"))] == 5
        assert latency[(("API", "predict"), ("entrypoint", "V2"), ("model_name", "digits"))] == 1
        assert latency[(("API", "predict"), ("entrypoint", "GRPC"), ("model_name", "digits"))] == 1
        assert latency[(("API", "metadata"), ("entrypoint", "REST"), ("model_name", "digits"))] == 1
        assert latency[(("API", "ready"), ("entrypoint", "V2"), ("model_name", "digits"))] == 1
        assert got[":tensorflow:serving:batching_session:queuing_latency_count"][
            (("thread_pool_name", "tfsmith_batch_threads"),)] == 5  # the three REST, the v2 and the gRPC predict
        assert sum(got["tfsmith_batch_size_sum"].values()) == 5
        assert got["tfsmith_requests_in_flight"][()] == 0
        assert got["tfsmith_model_ready"][(("model_name", "digits"),)] == 1
        assert np.isfinite(got["tfsmith_model_load_seconds"][(("model_name", "digits"), ("version", "1"))])
    finally:
        assert running.stop() in STOPPED
