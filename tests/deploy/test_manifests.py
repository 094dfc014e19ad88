"""deploy/: Kustomize overlays rendered offline with kubectl, every object checked against the Kubernetes
schemas (kubernetes-validate) or, for KServe's and the Prometheus operator's kinds, against their CRD
schemas (vendored under schemas/, see its README), and the wiring between them checked."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from nereid.cli import parse_settings
from tests.conftest import ROOT

DEPLOY = ROOT / "deploy"
SCHEMAS = Path(__file__).parent / "schemas"
KUSTOMIZATIONS = ["kubernetes/base", "kubernetes/overlays/s3", "kubernetes/overlays/gpu", "kserve"]
# The oldest Kubernetes release still commonly run, and the newest the validator knows.
KUBERNETES_VERSIONS = ["1.29.0", kubernetes_validate.latest_version()]
CRD_SCHEMAS = {
    ("serving.kserve.io/v1alpha1", "ServingRuntime"): "kserve_servingruntime_v1alpha1.json",
    ("serving.kserve.io/v1beta1", "InferenceService"): "kserve_inferenceservice_v1beta1.json",
    ("monitoring.coreos.com/v1", "PodMonitor"): "prometheus_podmonitor_v1.json",
}


@cache
def render(kustomization: str) -> tuple[dict[str, Any], ...]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        if os.environ.get("CI"):
            raise RuntimeError("kubectl is needed to render deploy/ (apt-get install kubectl)")
        pytest.skip("kubectl is not installed here (CI has it)")
    rendered = subprocess.run(
        [kubectl, "kustomize", str(DEPLOY / kustomization)], capture_output=True, text=True, timeout=60
    )
    assert rendered.returncode == 0, rendered.stderr
    return tuple(doc for doc in yaml.safe_load_all(rendered.stdout) if doc)


def objects(kustomization: str, kind: str) -> list[dict[str, Any]]:
    return [doc for doc in render(kustomization) if doc["kind"] == kind]


def _strict(instance: Any, schema: dict[str, Any], path: str) -> list[str]:
    """Fields the schema does not know: the API server would drop them without a word."""
    if isinstance(instance, dict) and schema.get("type") == "object":
        if schema.get("x-kubernetes-preserve-unknown-fields") or "properties" not in schema:
            return []
        unknown = [f"{path}.{key}" for key in instance if key not in schema["properties"]]
        return unknown + [
            problem
            for key, value in instance.items()
            if key in schema["properties"]
            for problem in _strict(value, schema["properties"][key], f"{path}.{key}")
        ]
    if isinstance(instance, list) and "items" in schema:
        return [p for i, item in enumerate(instance) for p in _strict(item, schema["items"], f"{path}[{i}]")]
    return []


def validate_custom(doc: dict[str, Any]) -> None:
    vendored = json.loads((SCHEMAS / CRD_SCHEMAS[doc["apiVersion"], doc["kind"]]).read_text())
    schema = vendored["openAPIV3Schema"]
    jsonschema.validate(doc, schema)
    assert _strict(doc, schema, doc["kind"]) == []


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_every_object_matches_its_schema(kustomization: str) -> None:
    docs = render(kustomization)
    assert docs
    for doc in docs:
        if (doc["apiVersion"], doc["kind"]) in CRD_SCHEMAS:
            validate_custom(doc)
            continue
        for version in KUBERNETES_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)


def test_an_unknown_field_is_caught() -> None:
    runtime = json.loads(json.dumps(objects("kserve", "ServingRuntime")[0]))
    runtime["spec"]["protocolVersion"] = "v2"  # the InferenceService's field, misplaced
    with pytest.raises(AssertionError, match=r"ServingRuntime\.spec\.protocolVersion"):
        validate_custom(runtime)
    deployment = json.loads(json.dumps(objects("kubernetes/base", "Deployment")[0]))
    deployment["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[-1], strict=True)


def _container(deployment: dict[str, Any]) -> dict[str, Any]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS[:3])
def test_deployment_probes_and_draining(kustomization: str) -> None:
    (deployment,) = objects(kustomization, "Deployment")
    container = _container(deployment)
    settings, warnings = parse_settings(container["args"])  # flags Nereid knows, and no ignored ones
    assert warnings == []
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert container["startupProbe"]["httpGet"]["path"] == "/v2/health/live"
    pause = int(container["lifecycle"]["preStop"]["exec"]["command"][-1])
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > pause + settings.exit_timeout_secs
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": settings.http_port, "grpc": settings.grpc_port, "metrics": settings.metrics_port}
    assert deployment["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True


def test_service_hpa_and_podmonitor_reach_the_pods() -> None:
    (deployment,) = objects("kubernetes/base", "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    container_ports = {p["name"] for p in _container(deployment)["ports"]}
    (service,) = objects("kubernetes/base", "Service")
    assert {p["port"] for p in service["spec"]["ports"]} == {8000, 8001, 8002}
    assert {p["targetPort"] for p in service["spec"]["ports"]} == container_ports
    assert service["spec"]["selector"].items() <= pod_labels.items()
    (monitor,) = objects("kubernetes/base", "PodMonitor")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert {e["port"] for e in monitor["spec"]["podMetricsEndpoints"]} == {"metrics"}
    (hpa,) = objects("kubernetes/base", "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    adapter = yaml.safe_load((DEPLOY / "prometheus-adapter" / "values.yaml").read_text())
    served = {rule["name"]["as"] for rule in adapter["rules"]["custom"]}
    assert {m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"]} <= served


def test_overlays_point_at_object_storage() -> None:
    (s3,) = objects("kubernetes/overlays/s3", "Deployment")
    settings, _ = parse_settings(_container(s3)["args"])
    assert settings.remote_repositories == ("s3://my-models/triton",)
    assert settings.model_control_mode == "poll"
    assert s3["metadata"]["namespace"] == "inference"
    (gpu,) = objects("kubernetes/overlays/gpu", "Deployment")
    assert _container(gpu)["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert _container(gpu)["image"].endswith("-cuda")


def test_kserve_runtime_serves_what_the_inference_services_ask_for() -> None:
    (runtime,) = objects("kserve", "ServingRuntime")
    (container,) = runtime["spec"]["containers"]
    settings, warnings = parse_settings(container["args"])
    assert warnings == [] and container["command"] == ["nereid"]
    assert settings.model_repositories == (Path("/mnt/models"),)  # where KServe's storage initializer writes
    assert (settings.http_port, settings.grpc_port) == (8080, 9000)
    formats = {f["name"] for f in runtime["spec"]["supportedModelFormats"]}
    for service in objects("kserve", "InferenceService"):
        model = service["spec"]["predictor"]["model"]
        assert model["runtime"] == runtime["metadata"]["name"]
        assert model["modelFormat"]["name"] in formats
        assert model["protocolVersion"] in runtime["spec"]["protocolVersions"]
        if model["protocolVersion"] == "grpc-v2":
            assert [p["containerPort"] for p in model["ports"]] == [settings.grpc_port]
