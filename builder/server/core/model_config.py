"""What to serve, from TensorFlow Serving's `--model_config_file` (text format) or a `--model-base-path`.

TF Serving users already have `model_config_list { config { name: ... base_path: ... model_version_policy
{ latest { num_versions: 2 } } version_labels { key: "stable" value: 1 } } }` files; they are read here as
they are, with TF Serving's own field names and numbers declared in a private descriptor pool (no TF Serving
package needed) and protobuf's text-format parser, so a misspelt field is refused with its line and column
instead of being ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory, text_format

from builder.errors import InputError
from builder.wire.tfs_proto import BOOL, ENUM, INT64, MAP, MESSAGE, REPEATED, STRING, UINT32, Field, file_proto

POLICY = ".tensorflow.serving.FileSystemStoragePathSourceConfig.ServableVersionPolicy"
CONFIG_MESSAGES: dict[str, list[Field]] = {
    "FileSystemStoragePathSourceConfig": [("fail_if_zero_versions_at_startup", 11, BOOL, None, None, None)],
    "FileSystemStoragePathSourceConfig.ServableVersionPolicy": [
        ("latest", 100, MESSAGE, None, f"{POLICY}.Latest", "policy_choice"),
        ("all", 101, MESSAGE, None, f"{POLICY}.All", "policy_choice"),
        ("specific", 102, MESSAGE, None, f"{POLICY}.Specific", "policy_choice"),
    ],
    "FileSystemStoragePathSourceConfig.ServableVersionPolicy.Latest": [("num_versions", 1, UINT32, None, None, None)],
    "FileSystemStoragePathSourceConfig.ServableVersionPolicy.All": [],
    "FileSystemStoragePathSourceConfig.ServableVersionPolicy.Specific": [("versions", 1, INT64, REPEATED, None, None)],
    "ModelConfig": [
        ("name", 1, STRING, None, None, None),
        ("base_path", 2, STRING, None, None, None),
        ("model_type", 3, ENUM, None, ".tensorflow.serving.ModelType", None),
        ("model_platform", 4, STRING, None, None, None),
        ("model_version_policy", 7, MESSAGE, None, POLICY, None),
        ("version_labels", 8, INT64, MAP, None, None),
    ],
    "ModelConfigList": [("config", 1, MESSAGE, REPEATED, ".tensorflow.serving.ModelConfig", None)],
    "ModelServerConfig": [
        ("model_config_list", 1, MESSAGE, None, ".tensorflow.serving.ModelConfigList", "config"),
        ("custom_model_config", 2, MESSAGE, None, ".google.protobuf.Any", "config"),
    ],
}


def _pool() -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    copied = descriptor_pb2.FileDescriptorProto()
    any_pb2.DESCRIPTOR.CopyToProto(copied)
    pool.Add(copied)
    pool.Add(file_proto("tfsmith/tf_serving_config.proto", "tensorflow.serving", CONFIG_MESSAGES,
                   ["google/protobuf/any.proto"],
                   {"ModelType": {"MODEL_TYPE_UNSPECIFIED": 0, "TENSORFLOW": 1, "OTHER": 2}}))
    return pool


ModelServerConfig = message_factory.GetMessageClass(
    _pool().FindMessageTypeByName("tensorflow.serving.ModelServerConfig"))


@dataclass(frozen=True)
class ModelSource:
    """One model to serve: versions are integer folders under `base_path`, chosen by the policy."""

    name: str
    base_path: Path
    policy: str = "latest"  # latest | all | specific
    latest: int = 1  # how many of the newest versions, for `latest`
    specific: tuple[int, ...] = ()
    labels: dict[str, int] = field(default_factory=dict)

    def wanted(self, available: list[int]) -> list[int]:
        """The versions to serve out of those on disk (ascending)."""
        ordered = sorted(available)
        if self.policy == "all":
            return ordered
        if self.policy == "specific":
            return [v for v in ordered if v in self.specific]
        return ordered[-self.latest:] if ordered else []


def read_config_file(path: Path) -> list[ModelSource]:
    """The models of a TF Serving model config file (text format), validated; InputError with the reason."""
    try:
        text = path.read_text()
    except OSError as error:
        raise InputError(f"{path}: unreadable model config file ({error.strerror})") from None
    config = ModelServerConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as error:
        raise InputError(f"{path}: {error}") from None
    if config.HasField("custom_model_config"):
        raise InputError(f"{path}: custom_model_config is not supported; use model_config_list")
    sources: list[ModelSource] = []
    for entry in config.model_config_list.config:
        if not entry.name or not entry.base_path:
            raise InputError(f"{path}: every config needs a name and a base_path")
        if entry.model_platform not in ("", "tensorflow", "tflite", "openvino"):
            raise InputError(f"{path}: {entry.name}: model_platform {entry.model_platform!r} is not served here")
        base = Path(entry.base_path)
        if not base.is_absolute():
            base = (path.parent / base).resolve()
        policy = entry.model_version_policy
        choice = policy.WhichOneof("policy_choice") or "latest"
        latest = max(1, policy.latest.num_versions) if choice == "latest" else 1
        sources.append(ModelSource(entry.name, base, choice, latest, tuple(policy.specific.versions),
                                   dict(entry.version_labels)))
    return check_sources(sources, str(path))


def check_sources(sources: list[ModelSource], where: str) -> list[ModelSource]:
    """Names unique and URL-safe, labels only where versions are pinned (TF Serving's rule), paths present."""
    if not sources:
        raise InputError(f"{where}: no models to serve")
    seen: set[str] = set()
    for source in sources:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", source.name):
            raise InputError(f"{where}: model name {source.name!r}: use letters, digits, '.', '-' and '_'")
        if source.name in seen:
            raise InputError(f"{where}: model {source.name!r} is configured twice")
        seen.add(source.name)
        if not source.base_path.is_dir():
            raise InputError(f"{where}: {source.name}: base_path {source.base_path} is not a folder")
        for label in source.labels:
            if not re.fullmatch(r"[A-Za-z0-9_-]+", label):
                raise InputError(f"{where}: {source.name}: version label {label!r}: use letters, digits, '-', '_'")
    return sources


def served_folders(source: ModelSource) -> dict[int, Path]:
    """The version folders `source`'s policy serves now; InputError, one line, when there is none."""
    folders = version_folders(source.base_path)
    wanted = source.wanted(list(folders))
    if not wanted:
        raise InputError(f"{source.name}: no version folder with a .tflite, an OpenVINO IR or a SavedModel "
                         f"under {source.base_path}")
    return {version: folders[version] for version in wanted}


def version_folders(base: Path) -> dict[int, Path]:
    """Integer-named folders under `base` that hold a model: a .tflite, an OpenVINO IR or a SavedModel (TF
    Serving's `<base>/<version>/` layout)."""
    from builder.model.artifact import folder_models

    found: dict[int, Path] = {}
    try:
        entries = list(base.iterdir())
    except OSError:
        return found
    for entry in entries:
        if entry.is_dir() and entry.name.isdigit() and ((entry / "saved_model.pb").is_file()
                                                         or folder_models(entry)):
            found[int(entry.name)] = entry
    return found
