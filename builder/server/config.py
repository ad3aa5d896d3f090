"""What the server is asked to serve and how: `ServerConfig`, built from the user's options by `configure`
(which refuses what cannot be served before anything listens), and its JSON form, which carries it to the
worker processes of `--model-processes N` (they start fresh, from the environment).

The JSON form is derived from the dataclass's fields both ways, so a field added to `ServerConfig` reaches
the workers without being listed anywhere else.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builder.errors import InputError
from builder.server.core.runner import BatchingConfig
from builder.server.core.model_config import ModelSource, version_folders
from builder.server.options import DEFAULT_MAX_BODY_BYTES


@dataclass(frozen=True)
class ServerConfig:
    """Everything the server needs to know; built by the CLI (or the container's entry point)."""

    model_path: Path
    model_name: str
    version: int = 1
    runtime: str = "litert"
    runtime_reason: str = "requested"
    workers: int = 2
    threads: int = 1
    batching: BatchingConfig = field(default_factory=BatchingConfig)
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_request_batch: int = 4096
    dispatch: str = "auto"  # auto (`runner.dispatch_mode`) | inline | turns | threads
    samples_path: Path | None = None  # the model's own example inputs (optimize's samples.npz), for warm-up
    sources: tuple[ModelSource, ...] = ()  # models from a config file or a base path (instead of model_path)
    poll_seconds: float = 0.0  # look for new versions this often (0 = never)
    grpc_port: int = 0  # 0 = no gRPC
    address: str = "127.0.0.1"  # the address the front listens on (REST and gRPC; `--host`)
    access_log: bool = False
    drain_seconds: float = 30.0
    shutdown_delay_seconds: float = 0.0
    tls_cert: Path | None = None
    tls_key: Path | None = None
    #: the signature a request naming none gets: --signature-name (required to exist) or the report's choice
    #: (used when the model has it); None: serving_default, else the model's only signature
    signature_name: str | None = None
    signature_required: bool = False

    @property
    def tls(self) -> tuple[Path, Path] | None:
        return None if self.tls_cert is None or self.tls_key is None else (self.tls_cert, self.tls_key)


def configure(
    artifact: Path | None,
    *,
    model_name: str | None = None,
    version: int = 1,
    runtime: str | None = None,
    runtime_reason: str = "requested",
    workers: int = 2,
    threads: int | None = 1,
    max_batch: int = 1,
    batch_timeout_us: int = 0,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    dispatch: str = "auto",
    grpc_port: int = 0,
    address: str = "127.0.0.1",
    access_log: str = "off",
    drain_seconds: float = 30.0,
    shutdown_delay_seconds: float = 0.0,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
    model_base_path: Path | None = None,
    model_config_file: Path | None = None,
    poll_seconds: float = 1.0,
    signature_name: str | None = None,
) -> ServerConfig:
    """A validated ServerConfig from user-facing options; the runtime is named (auto is resolved by the caller)
    or None: what the model needs (tensorflow for a SavedModel, or where optimize measured it there), else
    litert. With runtime tensorflow, TensorFlow is prepared here (`prepare_tensorflow`: threads, the one-line
    device report, the GPU requirement) so a server that cannot serve as asked refuses before it listens."""
    from builder.model.artifact import resolve_artifact
    from builder.model import registry
    from builder.model.create import check_reads
    from builder.model.tensorflow import prepare_tensorflow

    if workers < 1 or (threads is not None and threads < 1):
        raise InputError("--interpreters and --threads must be at least 1")
    if version < 0:
        raise InputError("--model-version must be a non-negative integer")
    if dispatch not in ("auto", "inline", "turns", "threads"):
        raise InputError(f"unknown --dispatch {dispatch!r}; choose auto, inline, turns or threads")
    if max_body_bytes < 1024:
        raise InputError("--max-body-bytes must be at least 1024")
    if not 0 <= grpc_port <= 65535:
        raise InputError("--grpc-port must be a port number (0 = no gRPC)")
    if drain_seconds < 0 or shutdown_delay_seconds < 0:
        raise InputError("--drain-seconds and --shutdown-delay-seconds must not be negative")
    if (tls_cert is None) != (tls_key is None):
        raise InputError("--tls-cert and --tls-key go together")
    for tls_file in (tls_cert, tls_key):
        if tls_file is not None and not tls_file.is_file():
            raise InputError(f"{tls_file}: no such TLS certificate/key file")
    if runtime is not None:
        registry.check(runtime)
    if signature_name is not None and not signature_name:
        raise InputError("--signature-name must not be empty")
    try:
        batching = BatchingConfig(max_batch, batch_timeout_us)
    except ValueError as error:
        raise InputError(str(error)) from None

    def tensorflow_threads() -> int:
        """TensorFlow's intra-op pool: as asked, else (auto) the cores this process may use."""
        from builder.measure.cores import read_cores

        chosen = threads if threads is not None else read_cores().count
        common["threads"] = chosen
        return chosen

    common: dict[str, Any] = dict(  # the same in both forms below: one model file, or model sources
        runtime_reason=runtime_reason, workers=workers, threads=threads or 1, batching=batching,
        max_body_bytes=max_body_bytes, dispatch=dispatch, grpc_port=grpc_port, address=address,
        access_log=access_log == "json", drain_seconds=drain_seconds, shutdown_delay_seconds=shutdown_delay_seconds,
        tls_cert=tls_cert, tls_key=tls_key, signature_required=signature_name is not None)
    given = [a for a in (artifact, model_base_path, model_config_file) if a is not None]
    if len(given) != 1:
        raise InputError("serve one of: a MODEL (.tflite or optimize folder), --model-base-path DIR (integer version "
                         "folders) or --model-config-file FILE (TF Serving's model_config_list)")
    if poll_seconds < 0:
        raise InputError("--file-system-poll-wait-seconds must not be negative")
    if artifact is None:
        from builder.model.artifact import model_name_for
        from builder.server.core.model_config import check_sources, read_config_file

        if model_config_file is not None:
            sources = read_config_file(model_config_file)
        else:
            assert model_base_path is not None
            sources = check_sources([ModelSource(model_name or model_name_for(model_base_path), model_base_path)],
                                    str(model_base_path))
        runtime = runtime or sources_runtime(sources)
        if registry.on_tensorflow(runtime):
            prepare_tensorflow(tensorflow_threads(), workers)
        return ServerConfig(model_path=sources[0].base_path, model_name=sources[0].name, runtime=runtime,
                            sources=tuple(sources), poll_seconds=poll_seconds, signature_name=signature_name,
                            **common)
    resolved = resolve_artifact(artifact, model_name, runtime)
    if runtime is None:
        runtime = resolved.runtime or "litert"
    elif resolved.saved_model and not registry.runtime(runtime).serves(registry.SAVED_MODEL_FORMAT):
        serving = ", ".join(r.name for r in registry.serving(registry.SAVED_MODEL_FORMAT))
        raise InputError(f"{resolved.model_path}: a SavedModel runs only on TensorFlow; use --runtime "
                         f"{serving} (not {runtime})")
    check_reads(runtime, resolved.model_path)  # refused before listening: an OpenVINO IR off OpenVINO, say
    if registry.on_tensorflow(runtime):
        prepare_tensorflow(tensorflow_threads(), workers)
    return ServerConfig(model_path=resolved.model_path, model_name=resolved.name,
                        version=version, runtime=runtime, samples_path=resolved.samples_path,
                        signature_name=signature_name or resolved.signature, **common)


def sources_runtime(sources: Sequence[ModelSource]) -> str:
    """tensorflow when a served version folder holds a SavedModel (TF Serving's usual layout); openvino when
    every one holds an OpenVINO IR and no .tflite (what OpenVINO Model Server serves); else litert."""
    from builder.model.artifact import folder_models, is_ir, is_saved_model

    folders = [folder for source in sources for folder in version_folders(source.base_path).values()]
    if any(is_saved_model(folder) for folder in folders):
        return "tensorflow"
    if folders and all(is_ir(model) for folder in folders for model in folder_models(folder)):
        return "openvino"
    return "litert"


# --- the JSON form, for worker processes ----------------------------------------------------------------


def config_to_json(config: ServerConfig) -> str:
    """The config for worker processes (they start fresh and read it from the environment): every field of
    `ServerConfig` (dataclasses.asdict, nested dataclasses included), paths as strings."""
    return json.dumps(dataclasses.asdict(config), default=_path_as_text)


def config_from_json(text: str) -> ServerConfig:
    """`config_to_json`'s inverse: each field rebuilt as its annotation says (paths, nested dataclasses, tuples)."""
    return _from_json_value(json.loads(text), ServerConfig)


def _path_as_text(value: Any) -> str:
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"a {type(value).__name__} in ServerConfig has no JSON form for worker processes")


def _from_json_value(value: Any, kind: Any) -> Any:
    """`value` as json.loads gave it, turned back into the annotated type `kind`."""
    if value is None:
        return None
    if dataclasses.is_dataclass(kind):
        hints = typing.get_type_hints(kind)
        return kind(**{name: _from_json_value(item, hints[name]) for name, item in value.items()})
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):  # `X | None`: value is not None here
        (inner,) = [arg for arg in args if arg is not type(None)]
        return _from_json_value(value, inner)
    if origin is tuple:
        return tuple(_from_json_value(item, args[0]) for item in value)
    if kind is Path:
        return Path(value)
    return value
