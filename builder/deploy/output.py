"""Objects -> files: one multi-document YAML for `kubectl apply -f`, or a kustomize folder (one file per
object plus kustomization.yaml). Written to a staging folder and renamed into place, so an interrupted or
refused run never leaves half a fleet behind.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from builder.deploy.plan import DeployPlan
from builder.errors import InputError
from builder.staging import staged_dir

FORMATS = ("yaml", "kustomize")
# JSON saying a folder is ours to replace. No .json/.yaml suffix: `kubectl apply -f DIR` sends those too.
MARKER = ".tfsmith-deploy"


class _Dumper(yaml.SafeDumper):
    """Block style, keys in the order built (apiVersion, kind, metadata, spec reads as people write it), and
    no YAML anchors: a label set shared by metadata and the pod template is written out twice, as people
    (and some tools) expect."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(objects: list[dict[str, Any]]) -> str:
    """Multi-document YAML; strings that look like numbers or booleans ("true", "8501") stay quoted."""
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, default_flow_style=False, explicit_start=True)


def file_name(obj: dict[str, Any]) -> str:
    """`deployment-digits-x86-64-v3.yaml`: unique per kind and name within one fleet."""
    return f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"


def kustomization(files: list[str]) -> dict[str, Any]:
    """The resource list only. The namespace is already on each namespaced object: kustomize's `namespace:`
    field would also stamp it on the NodeFeatureRule, a cluster-scoped custom resource it cannot know."""
    return {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": files}


def layout(plan: DeployPlan, objects: list[dict[str, Any]], fmt: str) -> dict[str, str]:
    """File name -> text, for either format; pure so tests can read what would be written."""
    if fmt not in FORMATS:
        raise InputError(f"--format {fmt!r}: choose yaml or kustomize")
    files: dict[str, str] = {}
    if fmt == "yaml":
        files[f"{plan.options.model_name}.yaml"] = to_yaml(objects)
    else:
        for obj in objects:
            files[file_name(obj)] = to_yaml([obj])
        files["kustomization.yaml"] = to_yaml([kustomization(list(files))])
    files[MARKER] = json.dumps({"deploy_digest": plan.digest, "model": plan.options.model_name,
                                "notes": list(plan.notes)}, indent=2) + "\n"
    return files


def write(out: Path, files: dict[str, str]) -> Path:
    """Write the files as folder `out`, replacing an earlier tfsmith deploy output but nothing else."""
    out = Path(out)
    if out.exists():
        if not out.is_dir():
            raise InputError(f"--out {out}: exists and is not a folder")
        if any(out.iterdir()) and not (out / MARKER).is_file():
            raise InputError(f"--out {out}: not empty and not written by tfsmith deploy; choose another folder")
    with staged_dir(out) as tmp:
        for name, text in files.items():
            (tmp / name).write_text(text, encoding="utf-8")
    return out
