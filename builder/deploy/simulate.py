"""What NFD and the Kubernetes scheduler would do with rendered manifests, for one node, without a cluster.

No cluster runs on the machines tfsmith is developed on, so the manifests' placement is checked the way
the real components decide it, on the rendered objects themselves (not on the plan that produced them):
- `node_labels`: the labels NFD would put on a machine with these /proc/cpuinfo flags: its default cpuid
  labels (builder.deploy.nfd's table) plus the labels of every NodeFeatureRule among the objects;
- `can_schedule`: the scheduler's requiredDuringScheduling node-affinity semantics (terms ORed,
  expressions ANDed; In, NotIn, Exists, DoesNotExist, Gt, Lt);
- `best_for_node`: of the workloads that may run there, the one its preferred terms rank first.
Used by the property tests and by `tfsmith deploy --explain-node`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from builder.deploy import nfd

Obj = dict[str, Any]
GPU_MAJOR = "nvidia.com/gpu.compute.major"
GPU_MINOR = "nvidia.com/gpu.compute.minor"


def _rule_matches(rule: Obj, cpuid: frozenset[str]) -> bool:
    for term in rule.get("matchFeatures", []):
        if term["feature"] != nfd.CPUID_FEATURE:
            raise ValueError(f"simulate knows only {nfd.CPUID_FEATURE} rules, not {term['feature']}")
        for name, expression in term.get("matchExpressions", {}).items():
            op = expression["op"]
            if op == "Exists" and name not in cpuid:
                return False
            if op == "DoesNotExist" and name in cpuid:
                return False
            if op not in ("Exists", "DoesNotExist"):
                raise ValueError(f"simulate does not evaluate op {op} on flags")
    return True


def node_labels(arch: str, cpuinfo_flags: Iterable[str], objects: Iterable[Obj],
                gpu: tuple[int, int] | None = None) -> dict[str, str]:
    """Labels of a node with this CPU (and optionally one GPU model, as NVIDIA GPU feature discovery
    labels it) once NFD and the fleet's NodeFeatureRules have run."""
    flags = frozenset(cpuinfo_flags)
    labels = nfd.default_labels(arch, flags)
    cpuid = nfd.node_cpuid(arch, flags)
    for obj in objects:
        if obj.get("kind") != "NodeFeatureRule":
            continue
        for rule in obj["spec"]["rules"]:
            if _rule_matches(rule, cpuid):
                labels.update(rule.get("labels", {}))
    if gpu is not None:
        labels[GPU_MAJOR], labels[GPU_MINOR] = str(gpu[0]), str(gpu[1])
    return labels


def expression_matches(expression: Obj, labels: Mapping[str, str]) -> bool:
    """One NodeSelectorRequirement, as the scheduler evaluates it."""
    key, op, values = expression["key"], expression["operator"], expression.get("values", [])
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        try:
            have, bound = int(labels[key]), int(values[0])
        except (KeyError, ValueError, IndexError):
            return False
        return have > bound if op == "Gt" else have < bound
    raise ValueError(f"unknown node selector operator {op!r}")


def term_matches(term: Obj, labels: Mapping[str, str]) -> bool:
    return all(expression_matches(e, labels) for e in term.get("matchExpressions", []))


def pod_spec(obj: Obj) -> Obj | None:
    """The pod spec of a workload object (Deployment, or a KServe predictor, which embeds one)."""
    if obj.get("kind") == "Deployment":
        return obj["spec"]["template"]["spec"]
    if obj.get("kind") == "InferenceService":
        return obj["spec"]["predictor"]
    return None


def can_schedule(obj: Obj, labels: Mapping[str, str]) -> bool:
    """Whether the scheduler may place this workload's pods on a node with these labels."""
    spec = pod_spec(obj)
    if spec is None:
        raise ValueError(f"{obj.get('kind')} is not a workload")
    affinity = spec.get("affinity", {}).get("nodeAffinity", {})
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not required:
        return True
    return any(term_matches(term, labels) for term in required["nodeSelectorTerms"])


def workloads(objects: Iterable[Obj]) -> list[Obj]:
    return [obj for obj in objects if pod_spec(obj) is not None]


def best_for_node(objects: Iterable[Obj], labels: Mapping[str, str]) -> list[str]:
    """Names of the workloads that may run on the node and whose every preference it satisfies: the
    image(s) this node should run (several only when targets are incomparable)."""
    names = []
    for obj in workloads(objects):
        if not can_schedule(obj, labels):
            continue
        preferred = (pod_spec(obj) or {}).get("affinity", {}).get("nodeAffinity", {}).get(
            "preferredDuringSchedulingIgnoredDuringExecution", [])
        if all(term_matches(p["preference"], labels) for p in preferred):
            names.append(obj["metadata"]["name"])
    return names
