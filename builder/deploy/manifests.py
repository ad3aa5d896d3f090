"""DeployPlan -> Kubernetes objects (plain dicts, in the order `kubectl apply` should create them).

Production defaults, each for a reason:
- probes on the server's real endpoints: startup and liveness on `/healthz` (the process answers), readiness
  on `/v2/health/ready` (the model is loaded and warmed; 503 while a stop drains, so the Service stops
  sending before the pod goes);
- named ports `http` (8501) and `grpc` (8500), the names KServe and Prometheus tooling look for, and the
  prometheus.io scrape annotations pointing at `/monitoring/prometheus/metrics`;
- the image's own non-root user (uid 10001), no privilege escalation, all capabilities dropped, the
  runtime's seccomp profile, a read-only root filesystem with an emptyDir on /tmp for anything scratch;
- requests/limits from the measured report (or stated defaults), a PodDisruptionBudget (one pod at a time)
  and a CPU HorizontalPodAutoscaler per Deployment, spread across nodes when it can be;
- labels: Kubernetes' recommended app.kubernetes.io/* set plus the target, the model digest, the image's
  build spec digest (when known) and this plan's digest; full digests in annotations (label values stop
  at 63 characters).
"""

from __future__ import annotations

from typing import Any

from builder.deploy import nfd
from builder.deploy.plan import DeployPlan, Member

Obj = dict[str, Any]

NFD_API = "nfd.k8s-sigs.io/v1alpha1"
KSERVE_API = "serving.kserve.io/v1beta1"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_MAJOR = "nvidia.com/gpu.compute.major"
GPU_MINOR = "nvidia.com/gpu.compute.minor"
RUN_AS = 10001  # the user the serving images are built with (USER 10001:10001)
METRICS_PATH = "/monitoring/prometheus/metrics"
HEALTH_PATH = "/healthz"
#: 200 once the model is loaded and warmed, 503 while loading or draining (Open Inference Protocol).
READY_PATH = "/v2/health/ready"
SHORT = 16  # hex digits of a digest that fit a label value comfortably


def _meta(plan: DeployPlan, name: str, labels: dict[str, str], *, namespaced: bool = True,
          annotations: dict[str, str] | None = None) -> Obj:
    meta: Obj = {"name": name}
    if namespaced and plan.options.namespace:
        meta["namespace"] = plan.options.namespace
    meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return meta


def common_labels(plan: DeployPlan) -> dict[str, str]:
    """Labels on every object of the fleet (and what the Service selects, with the component)."""
    labels = {
        "app.kubernetes.io/name": plan.options.model_name,
        "app.kubernetes.io/component": "server",
        "app.kubernetes.io/managed-by": "tfsmith",
        "tfsmith.io/deploy-digest": plan.digest[:SHORT],
    }
    if plan.model_sha256:
        labels["tfsmith.io/model-sha256"] = plan.model_sha256[:SHORT]
    return labels


def member_labels(plan: DeployPlan, member: Member) -> dict[str, str]:
    labels = common_labels(plan) | {
        "app.kubernetes.io/instance": member.name,
        "tfsmith.io/target": member.image.target.name,
        "tfsmith.io/preference": str(member.rank),
    }
    if member.image.spec_digest:
        labels["tfsmith.io/spec-digest"] = member.image.spec_digest.removeprefix("sha256:")[:SHORT]
    return labels


def selector_labels(plan: DeployPlan, member: Member) -> dict[str, str]:
    """The Deployment's selector: immutable once applied, so only what never changes for this member."""
    return {"app.kubernetes.io/name": plan.options.model_name, "app.kubernetes.io/instance": member.name}


def pod_annotations(plan: DeployPlan, member: Member) -> dict[str, str]:
    notes = {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(plan.options.http_port),
        "prometheus.io/path": METRICS_PATH,
        "tfsmith.io/target-features": ",".join(sorted(member.image.target.features)),
        "tfsmith.io/resources": plan.resources.source,
    }
    if member.placement.invisible:
        notes["tfsmith.io/guard-only-features"] = ",".join(member.placement.invisible)
    if plan.model_sha256:
        notes["tfsmith.io/model-sha256"] = plan.model_sha256
    if member.image.spec_digest:
        notes["tfsmith.io/spec-digest"] = member.image.spec_digest
    if plan.resources.p50_us is not None:
        notes["tfsmith.io/measured-p50-us"] = f"{plan.resources.p50_us:.1f}"
    return notes


# ------------------------------------------------------------------------------------------ placement
def _expr(key: str, operator: str, *values: str) -> Obj:
    expr: Obj = {"key": key, "operator": operator}
    if values:
        expr["values"] = list(values)
    return expr


def _gpu_terms(member: Member) -> list[list[Obj]]:
    """One alternative per capability the image can run on (node selector terms are ORed)."""
    gpu = member.placement.gpu
    if gpu is None:
        return [[]]
    terms = []
    for major, minor in gpu.exact:
        term = [_expr(GPU_MAJOR, "In", str(major))]
        if minor > 0:
            term.append(_expr(GPU_MINOR, "Gt", str(minor - 1)))
        terms.append(term)
    if gpu.newer_than_major is not None:
        terms.append([_expr(GPU_MAJOR, "Gt", str(gpu.newer_than_major))])
    return terms


def node_affinity(plan: DeployPlan, member: Member) -> Obj:
    """Required: a node that can run this image. Preferred (or required with --exclusive): a node where no
    better image of the fleet can run."""
    place = member.placement
    base = [_expr(nfd.ARCH_LABEL, "In", place.arch)]
    base += [_expr(nfd.LABEL_PREFIX + flag, "In", "true") for flag in place.labelled]
    if place.rule_only:
        base.append(_expr(place.rule_label, "In", "true"))
    avoid = [_expr(label, "DoesNotExist") for label in member.better]
    required = [base + gpu + (avoid if plan.options.exclusive else []) for gpu in _gpu_terms(member)]
    affinity: Obj = {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": term} for term in required]
        }
    }
    if avoid and not plan.options.exclusive:
        affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": 100, "preference": {"matchExpressions": avoid}}
        ]
    return affinity


def node_feature_rule(plan: DeployPlan) -> Obj | None:
    """One NFD rule per CPU target: publish the target's label where cpu.cpuid has every flag it needs
    (None when no target needs a flag)."""
    rules, seen = [], set()
    for member in plan.members:
        place = member.placement
        if place.rule_label in seen or not place.observable:
            continue  # a target needing no visible flag (x86-64, armv8.x) needs no label: nothing refers to it
        seen.add(place.rule_label)
        rule: Obj = {"name": f"tfsmith {member.image.target.name}", "labels": {place.rule_label: "true"}}
        rule["matchFeatures"] = [{
            "feature": nfd.CPUID_FEATURE,
            "matchExpressions": {flag: {"op": "Exists"} for flag in place.observable},
        }]
        rules.append(rule)
    if not rules:
        return None
    return {
        "apiVersion": NFD_API,
        "kind": "NodeFeatureRule",
        "metadata": _meta(plan, f"{plan.options.model_name}-tfsmith-targets", common_labels(plan), namespaced=False),
        "spec": {"rules": rules},
    }


# ------------------------------------------------------------------------------------------ pods
def _resources(plan: DeployPlan, member: Member) -> Obj:
    res = plan.resources
    requests: Obj = {"cpu": f"{res.cpu_millis}m", "memory": f"{res.memory_mib}Mi"}
    limits: Obj = {"cpu": f"{res.cpu_limit_millis}m", "memory": f"{res.memory_limit_mib}Mi"}
    if member.image.target.cuda is not None:
        requests[GPU_RESOURCE] = 1
        limits[GPU_RESOURCE] = 1
    return {"requests": requests, "limits": limits}


def _probe(path: str, port: int | str, *, period: int, failures: int) -> Obj:
    return {"httpGet": {"path": path, "port": port}, "periodSeconds": period, "timeoutSeconds": 2,
            "failureThreshold": failures}


def container(plan: DeployPlan, member: Member, *, kserve: bool = False) -> Obj:
    """The server container; KServe allows one port and wants it named http1."""
    opts = plan.options
    port: int | str = opts.http_port if kserve else "http"
    ports = (
        [{"name": "http1", "containerPort": opts.http_port, "protocol": "TCP"}]
        if kserve
        else [{"name": "http", "containerPort": opts.http_port, "protocol": "TCP"},
              {"name": "grpc", "containerPort": opts.grpc_port, "protocol": "TCP"}]
    )
    return {
        "name": "kserve-container" if kserve else "server",
        "image": member.image.image,
        "imagePullPolicy": "IfNotPresent",
        "ports": ports,
        "startupProbe": _probe(HEALTH_PATH, port, period=2, failures=90),
        "readinessProbe": _probe(READY_PATH, port, period=5, failures=3),
        "livenessProbe": _probe(HEALTH_PATH, port, period=10, failures=3),
        "resources": _resources(plan, member),
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS,
            "runAsGroup": RUN_AS,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }


def pod_spec_fields(plan: DeployPlan, member: Member) -> Obj:
    """PodSpec fields shared by the Deployment and the KServe predictor (which embeds a PodSpec)."""
    return {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 30,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS,
            "runAsGroup": RUN_AS,
            "fsGroup": RUN_AS,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "affinity": {"nodeAffinity": node_affinity(plan, member)},
        "topologySpreadConstraints": [{
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": selector_labels(plan, member)},
        }],
        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}],
    }


def deployment(plan: DeployPlan, member: Member) -> Obj:
    labels = member_labels(plan, member)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(plan, member.name, labels, annotations={"tfsmith.io/image": member.image.image}),
        "spec": {
            "replicas": plan.options.replicas,
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": selector_labels(plan, member)},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "template": {
                "metadata": {"labels": labels, "annotations": pod_annotations(plan, member)},
                "spec": {"containers": [container(plan, member)], **pod_spec_fields(plan, member)},
            },
        },
    }


def service(plan: DeployPlan) -> Obj:
    """One Service for the whole fleet: every member's pods, whatever their target."""
    opts = plan.options
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(plan, opts.model_name, common_labels(plan)),
        "spec": {
            "type": "ClusterIP",
            "selector": {"app.kubernetes.io/name": opts.model_name, "app.kubernetes.io/component": "server"},
            "ports": [
                {"name": "http", "port": opts.http_port, "targetPort": opts.http_port, "protocol": "TCP",
                 "appProtocol": "http"},
                {"name": "grpc", "port": opts.grpc_port, "targetPort": opts.grpc_port, "protocol": "TCP",
                 "appProtocol": "kubernetes.io/h2c"},
            ],
        },
    }


def pod_disruption_budget(plan: DeployPlan, member: Member) -> Obj:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(plan, member.name, member_labels(plan, member)),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": selector_labels(plan, member)},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def autoscaler(plan: DeployPlan, member: Member) -> Obj:
    opts = plan.options
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": _meta(plan, member.name, member_labels(plan, member)),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": member.name},
            "minReplicas": opts.replicas,
            "maxReplicas": opts.max_replicas,
            "metrics": [{"type": "Resource", "resource": {
                "name": "cpu", "target": {"type": "Utilization", "averageUtilization": opts.cpu_target_percent}}}],
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 300}},
        },
    }


def inference_service(plan: DeployPlan, member: Member) -> Obj:
    """KServe's alternative to Deployment+HPA: a custom-container predictor in RawDeployment mode."""
    opts = plan.options
    labels = member_labels(plan, member)
    return {
        "apiVersion": KSERVE_API,
        "kind": "InferenceService",
        "metadata": _meta(plan, member.name, labels, annotations={
            "serving.kserve.io/deploymentMode": "RawDeployment",
            "serving.kserve.io/autoscalerClass": "hpa",
            "tfsmith.io/image": member.image.image,
        }),
        "spec": {
            "predictor": {
                "minReplicas": opts.replicas,
                "maxReplicas": opts.max_replicas,
                "scaleMetric": "cpu",
                "scaleTarget": opts.cpu_target_percent,
                "labels": labels,
                "annotations": pod_annotations(plan, member),
                "containers": [container(plan, member, kserve=True)],
                **pod_spec_fields(plan, member),
            }
        },
    }


def fleet(plan: DeployPlan) -> list[Obj]:
    """Every object, in apply order: the NFD rule (labels must exist before pods can be placed), the
    Service, then per member its workload, disruption budget and (plain mode) autoscaler."""
    rule = node_feature_rule(plan)
    objects = ([rule] if rule else []) + [service(plan)]
    for member in plan.members:
        if plan.options.kserve:
            objects += [inference_service(plan, member), pod_disruption_budget(plan, member)]
        else:
            objects += [deployment(plan, member), pod_disruption_budget(plan, member), autoscaler(plan, member)]
    return objects
