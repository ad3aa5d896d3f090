"""Every object `tfsmith deploy` writes validates offline, and carries the production defaults it promises.

Built-in kinds are validated against the Kubernetes OpenAPI schemas that the `kubernetes-validate` package
ships (strict: unknown fields are errors), pinned to K8S_VERSION. No package ships the NFD or KServe CRD
schemas, so:
- NodeFeatureRule: a JSON schema written here from NFD's API reference (tests/fixtures/nfd/);
- InferenceService: the predictor's PodSpec part is validated as a real PodSpec by kubernetes-validate,
  its KServe fields (replicas, scale metric, labels) against a small schema written from KServe's API
  reference, and metadata as real ObjectMeta.
Label keys/values and object names are checked against Kubernetes' own syntax rules as well (the OpenAPI
schemas only say "string").
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from builder.deploy import inputs, manifests, output, plan

K8S_VERSION = "1.35.0"  # a release still in support in 2026-11; the schemas ship with kubernetes-validate
OLDEST_K8S = "1.31.0"  # PodDisruptionBudget.unhealthyPodEvictionPolicy is GA from here on
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
NFD_SCHEMA = json.loads((FIXTURES / "nfd" / "nodefeaturerule-v1alpha1.schema.json").read_text())
KSERVE_FIELDS = {  # ComponentExtensionSpec fields tfsmith may set, with their types (KServe API reference)
    "type": "object",
    "properties": {
        "minReplicas": {"type": "integer", "minimum": 0},
        "maxReplicas": {"type": "integer", "minimum": 0},
        "scaleMetric": {"enum": ["cpu", "memory", "concurrency", "rps"]},
        "scaleTarget": {"type": "integer", "minimum": 1},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}
KSERVE_ONLY = set(KSERVE_FIELDS["properties"])
NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


# ---------------------------------------------------------------------------------------- validators
def check_label_key(key: str) -> None:
    prefix, slash, name = key.rpartition("/")
    assert len(name) <= 63 and NAME.match(name), f"label key name {key!r}"
    if slash:
        assert len(prefix) <= 253 and DNS_SUBDOMAIN.match(prefix), f"label key prefix {key!r}"


def check_labels(labels: dict[str, str]) -> None:
    for key, value in labels.items():
        check_label_key(key)
        assert isinstance(value, str) and len(value) <= 63 and (value == "" or NAME.match(value)), f"{key}={value!r}"


def check_meta(obj: dict[str, Any]) -> None:
    meta = obj["metadata"]
    limit, pattern = (63, DNS_LABEL) if obj["kind"] in ("Service", "InferenceService") else (253, DNS_SUBDOMAIN)
    assert len(meta["name"]) <= limit and pattern.match(meta["name"]), f"{obj['kind']} name {meta['name']!r}"
    check_labels(meta.get("labels", {}))
    for key in meta.get("annotations", {}):
        check_label_key(key)


def check_pod_spec_labels(spec: dict[str, Any]) -> None:
    affinity = spec["affinity"]["nodeAffinity"]
    terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    terms += [p["preference"] for p in affinity.get("preferredDuringSchedulingIgnoredDuringExecution", [])]
    for term in terms:
        for expression in term["matchExpressions"]:
            check_label_key(expression["key"])
            for value in expression.get("values", []):
                check_labels({"x": value})


def validate(obj: dict[str, Any], version: str = K8S_VERSION) -> None:
    """Raise when `obj` is not a valid object of its kind (see the module docstring for how)."""
    check_meta(obj)
    kind = obj["kind"]
    if kind == "NodeFeatureRule":
        jsonschema.validate(obj, NFD_SCHEMA)
        for rule in obj["spec"]["rules"]:
            check_labels(rule.get("labels", {}))
        return
    if kind == "InferenceService":
        assert obj["apiVersion"] == "serving.kserve.io/v1beta1"
        assert set(obj) == {"apiVersion", "kind", "metadata", "spec"} and set(obj["spec"]) == {"predictor"}
        predictor = obj["spec"]["predictor"]
        jsonschema.validate(predictor, KSERVE_FIELDS)
        check_labels(predictor.get("labels", {}))
        pod = {k: v for k, v in predictor.items() if k not in KSERVE_ONLY}
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": pod},
                                     version, strict=True)
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj["metadata"]},
                                     version, strict=True)
        check_pod_spec_labels(pod)
        return
    kubernetes_validate.validate(obj, version, strict=True)
    if kind == "Deployment":
        template = obj["spec"]["template"]
        check_labels(template["metadata"]["labels"])
        check_pod_spec_labels(template["spec"])


# ---------------------------------------------------------------------------------------- fleets
def fleet_plan(targets: str = "x86-64-v3,x86-64-v4,sapphirerapids", *, cuda_cc: str | None = None,
               **options: Any) -> plan.DeployPlan:
    images = inputs.from_targets(targets, "registry.example/digits", cuda_cc=cuda_cc, model_sha256="ab" * 32)
    opts = plan.DeployOptions(model_name=options.pop("model_name", "digits-cnn"), served_name="digits_cnn", **options)
    return plan.plan_fleet(images, opts, plan.default_resources())


@pytest.mark.parametrize("kw", [
    {}, {"namespace": "ml"}, {"kserve": True}, {"exclusive": True}, {"kserve": True, "namespace": "ml"},
])
@pytest.mark.parametrize("version", [K8S_VERSION, OLDEST_K8S])
def test_the_example_fleet_validates(kw: dict[str, Any], version: str) -> None:
    objects = manifests.fleet(fleet_plan(**kw))
    kinds = [o["kind"] for o in objects]
    workload = "InferenceService" if kw.get("kserve") else "Deployment"
    assert kinds.count(workload) == 3 and kinds.count("PodDisruptionBudget") == 3
    assert kinds.count("HorizontalPodAutoscaler") == (0 if kw.get("kserve") else 3)
    assert kinds[:2] == ["NodeFeatureRule", "Service"]
    for obj in objects:
        validate(obj, version)


def test_gpu_arm_and_generic_fleets_validate() -> None:
    for objects in (manifests.fleet(fleet_plan("x86-64-v3,icelake", cuda_cc="8.0,9.0")),
                    manifests.fleet(fleet_plan("neoverse_v1,neoverse_n1,aarch64")),
                    manifests.fleet(fleet_plan("x86-64-v3", cuda_cc="8.6", kserve=True))):
        for obj in objects:
            validate(obj)
    # targets that need no flag NFD can see: no NodeFeatureRule at all (an empty rule list is invalid)
    generic = manifests.fleet(fleet_plan("x86-64,armv8.2a"))
    assert [o["kind"] for o in generic][:1] == ["Service"]
    for obj in generic:
        validate(obj)


def test_a_fleet_of_every_resolvable_target_validates() -> None:
    from tests.unit.test_deploy_placement import targets

    resolved, _ = targets()
    images = tuple(plan.FleetImage(target=t, image=f"registry.example/m:{t.tag_token}") for t in resolved)
    objects = manifests.fleet(plan.plan_fleet(images, plan.DeployOptions(model_name="m"), plan.default_resources()))
    assert len(objects) == 2 + 3 * len(resolved)
    for obj in objects:
        validate(obj)


@pytest.mark.parametrize("breakage", ["unknown-field", "bad-label", "bad-op", "kserve-port-type", "rule-namespace"])
def test_the_validators_reject_broken_objects(breakage: str) -> None:
    """The validation is not a rubber stamp: each of these must fail."""
    objects = manifests.fleet(fleet_plan(kserve=breakage == "kserve-port-type"))
    rule, deploy = copy.deepcopy(objects[0]), copy.deepcopy(objects[2])
    if breakage == "unknown-field":
        deploy["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
        target = deploy
    elif breakage == "bad-label":
        deploy["metadata"]["labels"]["tfsmith.io/target"] = "x" * 64
        target = deploy
    elif breakage == "bad-op":
        next(iter(rule["spec"]["rules"][0]["matchFeatures"][0]["matchExpressions"].values()))["op"] = "Present"
        target = rule
    elif breakage == "rule-namespace":
        rule["metadata"]["namespace"] = "default"  # NodeFeatureRule is cluster-scoped
        target = rule
    else:
        deploy["spec"]["predictor"]["containers"][0]["ports"][0]["containerPort"] = "8501"
        target = deploy
    with pytest.raises((AssertionError, jsonschema.ValidationError, kubernetes_validate.ValidationError)):
        validate(target)


# ---------------------------------------------------------------------------------------- defaults
def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def test_probes_ports_security_and_metrics() -> None:
    objects = manifests.fleet(fleet_plan())
    for deploy in by_kind(objects, "Deployment"):
        pod = deploy["spec"]["template"]
        (server,) = pod["spec"]["containers"]
        assert [(p["name"], p["containerPort"]) for p in server["ports"]] == [("http", 8501), ("grpc", 8500)]
        assert server["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
        assert server["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert server["startupProbe"]["httpGet"]["path"] == "/healthz"
        security = server["securityContext"]
        assert security["runAsNonRoot"] and security["readOnlyRootFilesystem"]
        assert security["runAsUser"] == 10001 and not security["allowPrivilegeEscalation"]
        assert security["capabilities"] == {"drop": ["ALL"]}
        assert {"name": "tmp", "mountPath": "/tmp"} in server["volumeMounts"]
        assert pod["spec"]["automountServiceAccountToken"] is False
        notes = pod["metadata"]["annotations"]
        assert notes["prometheus.io/scrape"] == "true" and notes["prometheus.io/port"] == "8501"
        assert notes["prometheus.io/path"] == "/monitoring/prometheus/metrics"
        assert server["resources"] == {"requests": {"cpu": "1000m", "memory": "512Mi"},
                                       "limits": {"cpu": "1000m", "memory": "1024Mi"}}  # the server sizes itself to its CPU quota


def test_one_service_selects_every_member_and_selectors_are_consistent() -> None:
    objects = manifests.fleet(fleet_plan())
    (service,) = by_kind(objects, "Service")
    assert [(p["name"], p["port"]) for p in service["spec"]["ports"]] == [("http", 8501), ("grpc", 8500)]
    selector = service["spec"]["selector"].items()
    deployments = by_kind(objects, "Deployment")
    for deploy in deployments:
        labels = deploy["spec"]["template"]["metadata"]["labels"]
        assert selector <= labels.items()
        assert deploy["spec"]["selector"]["matchLabels"].items() <= labels.items()
    for extra in by_kind(objects, "PodDisruptionBudget") + by_kind(objects, "HorizontalPodAutoscaler"):
        assert extra["metadata"]["name"] in {d["metadata"]["name"] for d in deployments}
    for pdb in by_kind(objects, "PodDisruptionBudget"):
        assert pdb["spec"]["maxUnavailable"] == 1
    for hpa in by_kind(objects, "HorizontalPodAutoscaler"):
        assert hpa["spec"]["scaleTargetRef"]["name"] == hpa["metadata"]["name"]
        assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
        assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 6)


def test_labels_carry_target_model_digest_and_spec_digest() -> None:
    image = inputs.from_labels("registry.example/digits:spr", {
        "io.tfsmith.target": "sapphirerapids", "io.tfsmith.model.sha256": "cd" * 32,
        "io.tfsmith.model.name": "digits_cnn", "io.tfsmith.spec-digest": "sha256:" + "ef" * 32}, {})
    fleet = plan.plan_fleet((image,), plan.DeployOptions(model_name="digits"), plan.default_resources())
    (deploy,) = by_kind(manifests.fleet(fleet), "Deployment")
    labels = deploy["metadata"]["labels"]
    assert labels["tfsmith.io/target"] == "sapphirerapids"
    assert labels["tfsmith.io/model-sha256"] == ("cd" * 32)[:16]
    assert labels["tfsmith.io/spec-digest"] == ("ef" * 32)[:16]
    assert labels["tfsmith.io/deploy-digest"] == fleet.digest[:16]
    notes = deploy["spec"]["template"]["metadata"]["annotations"]
    assert notes["tfsmith.io/model-sha256"] == "cd" * 32 and notes["tfsmith.io/spec-digest"].endswith("ef" * 32)


def test_gpu_members_request_a_gpu_and_kserve_names_its_one_port_http1() -> None:
    objects = manifests.fleet(fleet_plan("x86-64-v3", cuda_cc="8.0,9.0", kserve=True))
    (isvc,) = by_kind(objects, "InferenceService")
    (server,) = isvc["spec"]["predictor"]["containers"]
    assert server["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert server["ports"] == [{"name": "http1", "containerPort": 8501, "protocol": "TCP"}]
    assert server["readinessProbe"]["httpGet"]["port"] == 8501
    assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "RawDeployment"


def test_layouts_yaml_and_kustomize_round_trip() -> None:
    import yaml

    fleet = fleet_plan(namespace="ml")
    objects = manifests.fleet(fleet)
    single = output.layout(fleet, objects, "yaml")
    assert list(yaml.safe_load_all(single["digits-cnn.yaml"])) == objects
    assert "&id" not in single["digits-cnn.yaml"]  # no YAML anchors
    folder = output.layout(fleet, objects, "kustomize")
    custom = yaml.safe_load(folder["kustomization.yaml"])
    assert "namespace" not in custom and len(custom["resources"]) == len(objects)
    assert all(o["metadata"].get("namespace") == ("ml" if o["kind"] != "NodeFeatureRule" else None) for o in objects)
    assert [yaml.safe_load(folder[name]) for name in custom["resources"]] == objects
    # strings that look like booleans or numbers stay strings
    assert "'true'" in single["digits-cnn.yaml"] and "'8501'" in single["digits-cnn.yaml"]
