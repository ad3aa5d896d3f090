"""The server's options, listed once.

Three places need them: the in-image entry point (`python -m builder.server`, argparse), `tfsmith serve` on
the host (which forwards its arguments to the same parser) and a serving image's CMD (built from values by
`to_argv`). Keeping the list here means an option added for the server is at once a `tfsmith serve` flag and
something a packaged image can be told.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from builder.model import registry

DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
RUNTIME_CHOICES = registry.CHOICES


def auto_count(text: str) -> int | None:
    """A count of at least 1, or `auto` (None: the server sizes it)."""
    if text.strip().lower() == "auto":
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number or auto, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (or auto), got {value}")
    return value


@dataclass(frozen=True)
class ServerOption:
    """One command-line option of the server; `dest` is the attribute and the key `to_argv` reads."""

    flag: str
    dest: str
    type: type
    default: Any
    help: str
    group: str = "model"
    choices: tuple[str, ...] | None = None
    shown_default: str | None = None  # what --help says the default is, where it is not `default` itself
    #: older spellings still accepted: not options of their own in --help, only named in this one's help
    aliases: tuple[str, ...] = ()
    metavar: str | None = None


OPTIONS: tuple[ServerOption, ...] = (
    ServerOption("--model-name", "model_name", str, None, "name in /v1/models/<name> (default: from the path)"),
    ServerOption("--model-base-path", "model_base_path", Path, None,
                 "serve the integer version folders under this path (TF Serving's layout) instead of MODEL"),
    ServerOption("--model-config-file", "model_config_file", Path, None,
                 "serve the models of a TF Serving model_config_list text file instead of MODEL"),
    ServerOption("--file-system-poll-wait-seconds", "poll_seconds", float, 1.0,
                 "with a base path or config file: look for new versions this often (0 = never)"),
    ServerOption("--model-version", "model_version", int, 1, "version number served"),
    ServerOption("--runtime", "runtime", str, None,
                 "runtime executing the model (default: tensorflow for a SavedModel or where the optimize report "
                 "chose it, else litert); auto measures the .tflite runtimes on this host (tfsmith only, not in "
                 "images)", choices=RUNTIME_CHOICES),
    ServerOption("--signature-name", "signature_name", str, None,
                 "signature a request without signature_name gets (default: the report's choice, else "
                 "serving_default, else the model's only one)"),
    ServerOption("--host", "host", str, "127.0.0.1", "address to listen on (0.0.0.0 for all)", group="network"),
    ServerOption("--port", "port", int, 8501, "REST port (TensorFlow Serving's is 8501)", group="network"),
    ServerOption("--grpc-port", "grpc_port", int, 8500,
                 "gRPC port, TensorFlow Serving's PredictionService/ModelService (0 = no gRPC)", group="network"),
    ServerOption("--max-body-bytes", "max_body_bytes", int, DEFAULT_MAX_BODY_BYTES,
                 "larger request bodies are refused with 413", group="network"),
    ServerOption("--model-processes", "processes", auto_count, None,
                 "model processes the front hands requests to, the least busy first (1: the models run in the "
                 "front's own process); auto: sized from the cores and the model's measured call time, and never more than "
                 "fit in the memory the server may use (each holds its own copy of the model)",
                 group="performance", shown_default="auto", aliases=("--processes",), metavar="N"),
    ServerOption("--interpreters", "workers", auto_count, None,
                 "model interpreters in each process (more than one: each on a worker thread of its own)",
                 group="performance", shown_default="auto", aliases=("--workers",), metavar="N"),
    ServerOption("--threads", "threads", auto_count, None, "intra-op threads per interpreter",
                 group="performance", shown_default="auto"),
    ServerOption("--prefer", "prefer", str, "throughput",
                 "what auto sizing serves best: throughput (the most answers from the cores) or latency (the "
                 "fastest single answer)", group="performance", choices=("throughput", "latency")),
    ServerOption("--pin-cores", "pin_cores", str, "off",
                 "pin each model process to cores of its own (on) or let the kernel place them (off)",
                 group="performance", choices=("on", "off")),
    ServerOption("--max-batch", "max_batch", auto_count, None,
                 "dynamic batching: most examples per batch (1 = off; auto: natural batching where a batch "
                 "measures cheaper per example)", group="performance", shown_default="auto"),
    ServerOption("--batch-timeout-us", "batch_timeout_us", int, 0,
                 "dynamic batching: longest wait for a fuller batch", group="performance"),
    ServerOption("--dispatch", "dispatch", str, "auto",
                 "run the model on the event loop (inline: every call; turns: one call per turn of the loop) or "
                 "worker threads; auto decides by the model's speed and its interpreters",
                 group="performance", choices=("auto", "inline", "turns", "threads")),
    ServerOption("--log-level", "log_level", str, "info", "log level", group="operations"),
    ServerOption("--access-log", "access_log", str, "off",
                 "access log: one JSON line per request on stderr (json) or none (off)", group="operations",
                 choices=("off", "json")),
    ServerOption("--drain-seconds", "drain_seconds", float, 30.0,
                 "on SIGTERM: longest wait for requests in flight to finish before exiting", group="operations"),
    ServerOption("--shutdown-delay-seconds", "shutdown_delay_seconds", float, 0.0,
                 "on SIGTERM: keep serving this long while /v2/health/ready says 503 (load balancers catch up)",
                 group="operations"),
    ServerOption("--tls-cert", "tls_cert", Path, None, "PEM certificate: serve REST and gRPC over TLS",
                 group="security"),
    ServerOption("--tls-key", "tls_key", Path, None, "PEM private key of --tls-cert", group="security"),
)

GROUP_TITLES = {
    "model": "model",
    "network": "network",
    "performance": "performance",
    "operations": "operations",
    "security": "security",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The model argument and every option, grouped as `--help` shows them."""
    parser.add_argument("model", type=Path, nargs="?", default=None,
                        help=".tflite file or `tfsmith optimize --out` folder (or --model-base-path/--model-config-file)")
    groups = {key: parser.add_argument_group(title) for key, title in GROUP_TITLES.items()}
    for option in OPTIONS:
        shown = option.shown_default if option.shown_default is not None else option.default
        text = option.help if shown is None else f"{option.help} (default: {shown})"
        if option.aliases:
            text += "; formerly " + ", ".join(f"`{alias}`" for alias in option.aliases) + ", still accepted"
        kwargs: dict[str, Any] = {"dest": option.dest, "type": option.type, "default": option.default, "help": text}
        if option.choices:
            kwargs["choices"] = option.choices
        if option.metavar:
            kwargs["metavar"] = option.metavar
        groups[option.group].add_argument(option.flag, **kwargs)
        for alias in option.aliases:  # the same option under its older name, not listed by --help
            parser.add_argument(alias, **{**kwargs, "default": argparse.SUPPRESS, "help": argparse.SUPPRESS})


def to_argv(values: Mapping[str, Any]) -> list[str]:
    """Command-line words for the given option values (by `dest`), in the list's order; None is left out."""
    known = {option.dest: option for option in OPTIONS}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise KeyError(f"not server options: {', '.join(unknown)}")
    argv: list[str] = []
    for option in OPTIONS:
        if option.dest in values and values[option.dest] is not None:
            argv += [option.flag, str(values[option.dest])]
    return argv


def defaults() -> dict[str, Any]:
    return {option.dest: option.default for option in OPTIONS}


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad argument in one line (no usage dump), like every other tfsmith error."""

    error_prefix = "tfsmith-serve"

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.error_prefix}: error: {message} (see {self.prog} --help)\n")


def error_prefix(prog: str) -> str:
    """`tfsmith` when run as `tfsmith serve`, `tfsmith-serve` inside an image."""
    return "tfsmith" if prog.startswith("tfsmith") else "tfsmith-serve"


def parser(prog: str) -> argparse.ArgumentParser:
    result = OneLineParser(prog=prog, description="TensorFlow Serving-compatible model server")
    result.error_prefix = error_prefix(prog)
    add_arguments(result)
    return result


def parse(argv: Sequence[str], prog: str) -> argparse.Namespace:
    return parser(prog).parse_args(list(argv))
