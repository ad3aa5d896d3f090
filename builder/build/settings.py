"""Build settings from flags, environment, a config file and defaults — one precedence rule, validated.

Precedence, for every key alike: command-line flag > environment variable `TFSMITH_<KEY>` > config file >
default. The file is `--config FILE`, else `./tfsmith.toml`, else `[tool.tfsmith]` in `./pyproject.toml`:

    [build]                       # tfsmith.toml  (pyproject.toml: [tool.tfsmith.build])
    target = "x86-64-v3"
    cuda_cc = "8.0,9.0"
    push = "registry.example.com/ml"

    [matrix]                      # the fleet `tfsmith matrix` fans out
    targets = ["x86-64-v3", "x86-64-v4"]

Which environment variables are settings is explicit: exactly `SETTINGS_ENV`'s names (one per setting);
no other TFSMITH_* variable is read here. The preflight guard's variables, which every built image sets,
are named TFSMITH_IMAGE_* and no setting may take that prefix, so tfsmith run inside an image never picks
up the image's own target.

Unknown sections and keys are errors that name the key and the closest valid one (a typo must never be
ignored silently), and every value is checked before anything is built. The result is a frozen dataclass:
no global mutable configuration. (After cibuildwheel's options.py.)
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from builder.errors import InputError

DEFAULT_STATE_DIR = Path(".tfsmith")
DEFAULT_MATRIX_TARGETS = ("x86-64-v3", "x86-64-v4", "sapphirerapids", "neoverse_v1")
SYSTEM_CA_BUNDLES = (Path("/etc/ssl/certs/ca-certificates.crt"), Path("/etc/pki/tls/certs/ca-bundle.crt"))

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_CUDA_CC = re.compile(r"^(auto|none|\d{1,2}\.\d(,\d{1,2}\.\d)*)$")
_TF_VERSION = re.compile(r"^\d+\.\d+\.\d+([a-z]+\d+)?$")
_PYTHON = re.compile(r"^3\.\d{1,2}$")
# An image reference: [host[:port]/]path[:tag][@digest], lower-case path components.
_IMAGE = re.compile(
    r"^(?:[A-Za-z0-9.-]+(?::\d+)?/)?[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$"
)
_REGISTRY = re.compile(r"^[A-Za-z0-9.-]+(?::\d+)?(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*$")
_GIT_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_./-]{0,99}$")
_URL = re.compile(r"^(https?|grpcs?)://[^\s'\"`$\\]+$")


# --- value parsers: text/TOML value -> validated Python value, InputError naming the key otherwise ----------
def _text(key: str, value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise InputError(f"{key}: expected a string, got {type(value).__name__}")
    return value.strip()


def _pattern(regex: re.Pattern[str], what: str) -> Callable[[str, Any], str]:
    def parse(key: str, value: Any) -> str:
        text = _text(key, value)
        if not regex.match(text):
            raise InputError(f"{key}: {text!r} is not {what}")
        return text

    return parse


def _list(item: Callable[[str, Any], str]) -> Callable[[str, Any], tuple[str, ...]]:
    def parse(key: str, value: Any) -> tuple[str, ...]:
        items = value if isinstance(value, (list, tuple)) else _text(key, value).split(",")
        parsed = tuple(item(key, part) for part in items if str(part).strip())
        return tuple(dict.fromkeys(parsed))

    return parse


def _existing_file(suffix: str | None = None) -> Callable[[str, Any], Path]:
    def parse(key: str, value: Any) -> Path:
        path = Path(_text(key, value)).expanduser()
        if suffix and path.suffix != suffix:
            raise InputError(f"{key}: {path} is not a {suffix} file")
        if not path.is_file():
            raise InputError(f"{key}: no such file {path}")
        return path.resolve()

    return parse


def _directory(key: str, value: Any) -> Path:
    path = Path(_text(key, value)).expanduser()
    if path.exists() and not path.is_dir():
        raise InputError(f"{key}: {path} exists and is not a directory")
    return path


def _ca_bundle(key: str, value: Any) -> Path | None:
    """`system` (default): the host's CA bundle when it has one; `none`: no bundle; else a file."""
    text = _text(key, value)
    if text == "none":
        return None
    if text == "system":
        return next((p for p in SYSTEM_CA_BUNDLES if p.is_file()), None)
    return _existing_file()(key, text)


def _tf_source(key: str, value: Any) -> str:
    """A local TensorFlow checkout (directory) or a git ref/URL the render stage fetches."""
    text = _text(key, value)
    if Path(text).expanduser().is_dir():
        return str(Path(text).expanduser().resolve())
    if text.startswith(("/", "./", "../", "~")):
        raise InputError(f"{key}: {text!r}: no such directory (a git ref cannot start with / . or ~)")
    if _GIT_REF.match(text) or _URL.match(text):
        return text
    raise InputError(f"{key}: {text!r} is neither a directory nor a git ref or URL")


def _jobs(key: str, value: Any) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise InputError(f"{key}: {value!r} is not a whole number") from None
    if not 1 <= number <= 1024:
        raise InputError(f"{key}: {number} is out of range (1-1024)")
    return number


def _bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = _text(key, value).lower()
    if text in {"1", "true", "yes", "on"}:
        return True
    if text in {"0", "false", "no", "off", ""}:
        return False
    raise InputError(f"{key}: {value!r} is not true or false")


def _labels(key: str, value: Any) -> tuple[tuple[str, str], ...]:
    """Image labels: a TOML table, or KEY=VALUE items (a list, or comma-separated text)."""
    if isinstance(value, Mapping):
        items = [(str(k), v) for k, v in value.items()]
    else:
        items = []
        for part in value if isinstance(value, (list, tuple)) else _text(key, value).split(","):
            if isinstance(part, tuple) and len(part) == 2:
                items.append((str(part[0]), part[1]))
                continue
            name, sep, text = _text(key, part).partition("=")
            if not sep:
                raise InputError(f"{key}: {part!r} is not KEY=VALUE")
            items.append((name.strip(), text))
    return tuple((name, _text(f"{key} {name}", text)) for name, text in items if name)


def _optional(parse: Callable[[str, Any], Any]) -> Callable[[str, Any], Any]:
    def wrapped(key: str, value: Any) -> Any:
        if value is None or (isinstance(value, str) and value.strip() == ""):
            return None
        return parse(key, value)

    return wrapped


@dataclass(frozen=True)
class BuildConfig:
    """Every build/matrix setting, validated. None means "not set: the stage's own default applies"."""

    target: str = "host"
    cuda_cc: str | None = None  # "8.0,9.0", "auto" or "none"; None: builder.targets.choose_cuda decides
    tf_version: str | None = None
    python: str | None = None
    base_image: str | None = None
    toolchain_image: str | None = None
    tf_source: str | None = None
    ca_bundle: Path | None = None
    remote_cache: str | None = None
    jobs: int | None = None
    wheel: Path | None = None
    repository: str | None = None  # image repository, default tfsmith/tensorflow
    tags: tuple[str, ...] = ()
    push: str | None = None
    export_wheel: Path | None = None
    state_dir: Path = DEFAULT_STATE_DIR
    dry_run: bool = False
    labels: tuple[tuple[str, str], ...] = ()  # extra image labels
    facts: Path | None = None  # a saved `tfsmith detect --json`: what `host` and `--cuda-cc auto` mean
    targets: tuple[str, ...] = DEFAULT_MATRIX_TARGETS  # [matrix]
    matrix_cuda_cc: tuple[str, ...] = ()  # [matrix] cuda_cc: CUDA variants added to each x86 target


# key -> (section in the file, key in that section, parser). Flags and env use the dataclass field name.
_PARSERS: dict[str, tuple[str, str, Callable[[str, Any], Any]]] = {
    "target": ("build", "target", _pattern(_NAME, "a target name (e.g. host, x86-64-v3, icelake)")),
    "cuda_cc": ("build", "cuda_cc", _optional(_pattern(_CUDA_CC, "a CUDA capability list like 8.0,9.0 (or auto, none)"))),
    "tf_version": ("build", "tf_version", _optional(_pattern(_TF_VERSION, "a TensorFlow version like 2.21.0"))),
    "python": ("build", "python", _optional(_pattern(_PYTHON, "a Python version like 3.12"))),
    "base_image": ("build", "base_image", _optional(_pattern(_IMAGE, "a base image reference"))),
    "toolchain_image": ("build", "toolchain_image", _optional(_pattern(_IMAGE, "a toolchain image reference"))),
    "tf_source": ("build", "tf_source", _optional(_tf_source)),
    "ca_bundle": ("build", "ca_bundle", _ca_bundle),
    "remote_cache": ("build", "remote_cache", _optional(_pattern(_URL, "an http(s)/grpc(s) URL"))),
    "jobs": ("build", "jobs", _optional(_jobs)),
    "wheel": ("build", "wheel", _optional(_existing_file(".whl"))),
    "repository": ("build", "repository", _optional(_pattern(_REGISTRY, "an image repository like team/tensorflow"))),
    "tags": ("build", "tags", _list(_pattern(_IMAGE, "an image tag (name:tag)"))),
    "push": ("build", "push", _optional(_pattern(_REGISTRY, "a registry like host:5000/team"))),
    "export_wheel": ("build", "export_wheel", _optional(_directory)),
    "state_dir": ("build", "state_dir", _directory),
    "dry_run": ("build", "dry_run", _bool),
    "labels": ("build", "labels", _labels),
    "facts": ("build", "facts", _optional(_existing_file())),
    "targets": ("matrix", "targets", _list(_pattern(_NAME, "a target name"))),
    "matrix_cuda_cc": ("matrix", "cuda_cc", _list(_pattern(_CUDA_CC, "a CUDA capability list like 8.0,9.0"))),
}
_DEFAULT_TEXT = {"ca_bundle": "system"}  # defaults that go through their parser (resolved at load time)
_FLAG_NAMES = {"labels": "--label", "tags": "--tag", "matrix_cuda_cc": "--cuda-cc"}  # where a flag differs
# The environment variable of each setting, and no other: TFSMITH_IMAGE_* belongs to the images' guard.
SETTINGS_ENV: dict[str, str] = {name: f"TFSMITH_{name.upper()}" for name in _PARSERS}


def _sections() -> dict[str, dict[str, str]]:
    sections: dict[str, dict[str, str]] = {}
    for name, (section, key, _) in _PARSERS.items():
        sections.setdefault(section, {})[key] = name
    return sections


def _unknown(kind: str, name: str, valid: list[str]) -> InputError:
    close = difflib.get_close_matches(name, valid, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else f" (valid: {', '.join(sorted(valid))})"
    return InputError(f"unknown {kind} {name!r}{hint}")


def find_config_file(cwd: Path) -> tuple[Path, dict[str, Any]] | None:
    """`tfsmith.toml` in cwd, else pyproject.toml's [tool.tfsmith]; (path, the tfsmith table) or None."""
    own = cwd / "tfsmith.toml"
    if own.is_file():
        return own, _read_toml(own)
    pyproject = cwd / "pyproject.toml"
    if pyproject.is_file():
        table = _read_toml(pyproject).get("tool", {}).get("tfsmith")
        if table is not None:
            return pyproject, table
    return None


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise InputError(f"cannot read {path}: {error}") from None


def file_values(table: Mapping[str, Any], source: Path) -> dict[str, Any]:
    """Flatten a [build]/[matrix] table into field names; unknown sections/keys are errors."""
    sections = _sections()
    values: dict[str, Any] = {}
    for section, body in table.items():
        if section not in sections:
            raise _unknown(f"section in {source.name}", section, list(sections))
        if not isinstance(body, Mapping):
            raise InputError(f"{source.name}: [{section}] must be a table")
        for key, value in body.items():
            if key not in sections[section]:
                raise _unknown(f"key in {source.name} [{section}]", key, list(sections[section]))
            values[sections[section][key]] = value
    return values


def env_values(env: Mapping[str, str]) -> dict[str, str]:
    """The settings given in the environment: exactly the variables named in `SETTINGS_ENV`. Any other
    TFSMITH_* variable (the images' TFSMITH_IMAGE_*, the engine's TFSMITH_DEBIAN_MIRROR) is not a setting."""
    return {name: env[variable] for name, variable in SETTINGS_ENV.items() if variable in env}


def load_config(
    flags: Mapping[str, Any] | None = None,
    *,
    config_file: Path | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> BuildConfig:
    """Merge flags > env > file > defaults, validate each value, return the frozen result.

    `flags` holds only what the user passed (None values are "not given"); unknown names are a bug.
    """
    env = os.environ if env is None else env
    cwd = cwd or Path.cwd()
    if config_file is not None:
        if not config_file.is_file():
            raise InputError(f"--config: no such file {config_file}")
        table = _read_toml(config_file)
        if config_file.name == "pyproject.toml":
            table = table.get("tool", {}).get("tfsmith", {})
        found: tuple[Path, dict[str, Any]] | None = (config_file, table)
    else:
        found = find_config_file(cwd)
    from_file = file_values(found[1], found[0]) if found else {}
    given_flags = {k: v for k, v in (flags or {}).items() if v is not None and v != ()}
    unknown = set(given_flags) - set(_PARSERS)
    if unknown:
        raise _unknown("setting", sorted(unknown)[0], list(_PARSERS))
    from_env = env_values(env)
    defaults = {f.name: f.default for f in fields(BuildConfig)}
    merged: dict[str, Any] = {}
    for name, (section, key, parse) in _PARSERS.items():
        for source, values in (("flag", given_flags), ("environment", from_env), ("file", from_file)):
            if name in values:
                label = {
                    "flag": _FLAG_NAMES.get(name, f"--{name.replace('_', '-')}"),
                    "environment": SETTINGS_ENV[name],
                    "file": f"{found[0].name if found else ''} [{section}] {key}",
                }[source]
                merged[name] = parse(label, values[name])
                break
        else:
            merged[name] = parse(name, _DEFAULT_TEXT[name]) if name in _DEFAULT_TEXT else defaults[name]
    return BuildConfig(**merged)
