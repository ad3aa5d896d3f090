"""From configuration to served models: each configured model file or version folder opened on its runtime,
warmed and timed (the start-up self-test), put behind a batcher and ready to answer. Used at start and by
the version poller (`reload`) for versions that appear later.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from builder.errors import InputError
from builder.measure.cores import read_cores
from builder.server.core.runner import INLINE, TURNS, BackendPool, DynamicBatcher, dispatch_mode
from builder.server.config import ServerConfig
from builder.server.core.metrics import Metrics
from builder.server.core.model_config import ModelSource, served_folders
from builder.server.core.self_test import measure_pool
from builder.model.signature import SignatureSpec, batched
from builder.server.core.call import default_signature
from builder.server.core.ranges import served_ranges
from builder.server.core.dataplane import ModelSet, ServedModel


def load_model(config: ServerConfig, pool: BackendPool | None, metrics: Metrics) -> ServedModel:
    """Interpreters created, warmed and timed (the start-up self-test), behind a batcher: ready to serve."""
    start = time.perf_counter()
    pool = pool or BackendPool.create(config.runtime, config.model_path, config.workers, config.threads)
    default = served_signature(config, pool.signatures)
    executor = ThreadPoolExecutor(max_workers=pool.size, thread_name_prefix="tfsmith-infer")
    # merged requests need every input and output to carry the batch: an answer for the whole call (a sum over
    # its rows) is no request's own once calls are merged
    batchable = all(s.inputs and all(batched(spec) for spec in (*s.inputs, *s.outputs))
                    for s in pool.signatures.values())
    model_p50_us = measure_pool(pool, config.samples_path, signature_name=default)
    pool.on_model_cpu = metrics.model_cpu.labels(config.model_name).inc  # after the self-test: requests only
    cores = read_cores().count
    mode = (dispatch_mode(model_p50_us, config.batching, pool.size, cores) if config.dispatch == "auto"
            else config.dispatch)
    batcher = DynamicBatcher(pool, config.batching, executor, batchable, inline=mode == INLINE, turns=mode == TURNS)
    batcher.observe_batch, batcher.observe_queued_us = metrics.batch_sizes.observe, metrics.queuing_us.observe
    metrics.load_seconds.labels(config.model_name, str(config.version)).set(time.perf_counter() - start)
    return ServedModel(name=config.model_name, version=config.version, signatures=pool.signatures,
                       batcher=batcher, runtime=pool.runtime, max_request_batch=config.max_request_batch,
                       default_signature=default, platform=pool.platform, model_p50_us=model_p50_us, pool=pool,
                       ranges=served_ranges(config.model_path, pool.signatures), ready=True)


def served_signature(config: ServerConfig, signatures: Mapping[str, SignatureSpec]) -> str | None:
    """The default signature of a loaded model: --signature-name must exist (InputError naming those that
    do); the report's choice is taken where the model has it; else serving_default or the only one."""
    chosen = default_signature(signatures, config.signature_name)
    if chosen is None and config.signature_name and config.signature_required:
        raise InputError(f"--signature-name {config.signature_name!r}: {config.model_path.name} has no such "
                         f"signature; it has: {', '.join(sorted(signatures))}")
    return chosen or default_signature(signatures)


def load_models(config: ServerConfig, pool: BackendPool | None, metrics: Metrics) -> ModelSet:
    """Every model version to serve at start, loaded and warmed: the one model file, or each source's versions."""
    models = ModelSet()
    if not config.sources:
        models.set(config.model_name, {config.version: load_model(config, pool, metrics)})
        return models
    for source in config.sources:
        versions = {v: load_version(config, source, v, folder, metrics)
                    for v, folder in served_folders(source).items()}
        models.set(source.name, versions, source.labels)
    return models


def load_version(config: ServerConfig, source: ModelSource, version: int, folder: Path, metrics: Metrics) -> ServedModel:
    """One version folder (`<base>/<version>/`: a .tflite or an optimize output) loaded and warmed."""
    from builder.model.artifact import resolve_artifact

    artifact = resolve_artifact(folder, source.name, config.runtime)
    return load_model(replace(config, model_path=artifact.model_path, model_name=source.name, version=version,
                              samples_path=artifact.samples_path,
                              signature_name=config.signature_name or artifact.signature,
                              signature_required=config.signature_required), None, metrics)
