"""`python -m builder.server MODEL ...`: the server without the tfsmith CLI (what serving images run).

Images carry only `builder/server` (plus the errors, digest, report and guard modules), the model and the
server's wheels: no typer; TensorFlow only in the TensorFlow serving image. The options are `builder.server.options`, which `tfsmith serve` forwards to.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from builder.errors import InputError, TfsmithError
from builder.server import options

#: Resolves `--runtime auto` to (runtime, reason) on the host: given by `tfsmith serve`, absent in images.
ChooseRuntime = Callable[[str, Path, int], tuple[str, str]]


def main(argv: Sequence[str] | None = None, *, prog: str = "python -m builder.server",
         choose_runtime: ChooseRuntime | None = None) -> int:
    args = options.parse(sys.argv[1:] if argv is None else argv, prog)
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s: %(message)s")
    from builder.server.front import serve as front
    from builder.server.config import configure

    try:
        runtime, reason = args.runtime, "requested" if args.runtime else "what the model needs"
        needed = needed_runtime(args.model) if runtime == "auto" else None
        if needed is not None:
            runtime, reason = needed
        elif runtime == "auto":
            if args.model is None:
                raise InputError("--runtime auto measures one MODEL file; name a runtime for a base path or config file")
            if choose_runtime is None:
                raise InputError("--runtime auto is measured by tfsmith on the host (tfsmith serve/package); "
                                 f"name the runtime here: {', '.join(c for c in options.RUNTIME_CHOICES if c != 'auto')}")
            runtime, reason = choose_runtime(args.runtime, args.model, args.threads or 1)
        config = configure(
            args.model,
            model_name=args.model_name,
            version=args.model_version,
            runtime=runtime,
            runtime_reason=reason,
            workers=args.workers or 1,
            threads=args.threads,
            max_batch=args.max_batch or 1,
            batch_timeout_us=args.batch_timeout_us,
            max_body_bytes=args.max_body_bytes,
            dispatch=args.dispatch,
            grpc_port=args.grpc_port,
            address=args.host,
            access_log=args.access_log,
            drain_seconds=args.drain_seconds,
            shutdown_delay_seconds=args.shutdown_delay_seconds,
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
            model_base_path=args.model_base_path,
            model_config_file=args.model_config_file,
            poll_seconds=args.poll_seconds,
            signature_name=args.signature_name,
        )
    except TfsmithError as error:
        sys.stderr.write(f"{options.error_prefix(prog)}: error: {error}\n")
        return error.exit_code
    # "serving ... on http://..." is said by the front once the model has loaded, never before
    logging.getLogger("tfsmith.serve").info("loading %s v%s (%s, runtime %s: %s)", config.model_name, config.version,
                                            config.model_path.name, config.runtime, config.runtime_reason)
    try:
        config, sizing = size_server(config, args)  # times the model: a base path with nothing to serve ends here
        layout = front.Layout(processes=sizing.processes, cpus=sizing.cpus)
        front.run(config, address=args.host, port=args.port, log_level=args.log_level, layout=layout,
                  banner=[f"configuration: {sizing.describe()}", *(f"  {line}" for line in sizing.why)])
    except TfsmithError as error:  # nothing to serve, or a port another process holds: before any model loads
        sys.stderr.write(f"{options.error_prefix(prog)}: error: {error}\n")
        return error.exit_code
    except Exception as error:  # a model that fails to load: exit non-zero with the reason, never stay up
        logging.getLogger("tfsmith.serve").debug("the server stopped", exc_info=True)
        sys.stderr.write(f"{options.error_prefix(prog)}: error: {config.model_name} v{config.version} could not be "
                         f"served: {type(error).__name__}: {error}\n")
        return 1
    return 0


def size_server(config: Any, args: Any) -> tuple[Any, Any]:
    """The configuration with what was left auto chosen (`sizing`), and the sizing with its reasons."""
    from dataclasses import replace

    from builder.measure.cores import read_cores
    from builder.model import registry
    from builder.server import sizing
    from builder.server.core.runner import BatchingConfig

    asked = sizing.Asked(processes=args.processes, threads=args.threads, interpreters=args.workers,
                         max_batch=args.max_batch, preference=args.prefer, pin=args.pin_cores == "on")
    cores = read_cores()
    tensorflow = registry.on_tensorflow(config.runtime)
    everything_given = None not in (asked.processes, asked.threads, asked.interpreters, asked.max_batch)
    measured = None
    if not tensorflow and not everything_given:
        model, samples, signature = served_file(config)
        measured = sizing.measure_model(config.runtime, model, samples, signature, cores.count)
    chosen = sizing.choose(cores, measured, asked, tensorflow=tensorflow)
    batching = BatchingConfig(chosen.max_batch, config.batching.timeout_us)
    return replace(config, workers=chosen.interpreters, threads=chosen.threads, batching=batching), chosen


def served_file(config: Any) -> tuple[Path, Path | None, str | None]:
    """(model file, samples, signature) that sizing times: the one model, or a base path's latest version."""
    if not config.sources:
        return config.model_path, config.samples_path, config.signature_name
    from builder.model.artifact import resolve_artifact
    from builder.server.core.model_config import served_folders

    source = config.sources[0]
    folders = served_folders(source)  # one line, before any model loads, when there is nothing to serve
    latest = folders[max(folders)]
    artifact = resolve_artifact(latest, source.name, config.runtime)
    return artifact.model_path, artifact.samples_path, config.signature_name or artifact.signature


def needed_runtime(model: Path | None) -> tuple[str, str] | None:
    """(runtime, reason) for `--runtime auto` when the model leaves no choice: a SavedModel, or a .tflite that
    optimize measured on TensorFlow (Select TF ops), runs only on TensorFlow; None when there is a choice."""
    if model is None:
        return None
    from builder.model.artifact import resolve_artifact

    from builder.model import registry

    artifact = resolve_artifact(model)
    runtime = artifact.runtime
    if runtime is None or not registry.on_tensorflow(runtime):
        return None
    if artifact.chosen_runtime == runtime and runtime != registry.TENSORFLOW_DEFAULT:
        return runtime, f"auto: optimize measured {runtime} fastest for it ({registry.runtime(runtime).summary})"
    if artifact.saved_model:
        return runtime, "auto: a SavedModel runs only on TensorFlow"
    return runtime, "auto: optimize measured this .tflite on TensorFlow (it needs Select TF ops)"


if __name__ == "__main__":
    sys.exit(main())
