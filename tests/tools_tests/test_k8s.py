"""deploy/k8s, checked statically (no cluster here), like tests/tools_tests/test_compose.py checks docker-compose.yml.

- Each overlay (gpu, the default, and cpu) is rendered by tests/kustomize_lite.py (and, where kubectl
  is installed, by `kubectl kustomize`, which must render the very same resources) and every
  resource is validated offline against the Kubernetes 1.32 OpenAPI schemas (kubernetes-validate,
  strict: unknown fields fail); ServiceMonitor (a CRD) against the fields used of its schema.
- The manifests match the code: tritonserver's flags are triton_server.server_args, ports are the
  server's and the gateway's defaults, probe paths are real routes (Triton's and the gateway's),
  the gateway's and the prepare Job's command lines parse with the real parsers, the paths the Job
  writes are the ones Triton and the gateway mount, env names are the ones the code reads, the
  HPA's metrics are ones the speech_generation model publishes and the adapter rules serve, and
  every selector selects what it should.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml
from kustomize_lite import KustomizeError, apply_operation, render

from ttscore.backend import triton_server

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
OVERLAYS = ("gpu", "cpu")
K8S_VERSION = "1.32"
NAMESPACE = "triton-tts"
TRITON, GATEWAY, PREPARE = "triton-tts-triton", "triton-tts-gateway", "triton-tts-prepare"
TRITON_PROBES = {"readinessProbe": "/v2/health/ready", "livenessProbe": "/v2/health/live",
                 "startupProbe": "/v2/health/ready"}
EXPECTED_KINDS = {"Namespace", "PersistentVolumeClaim", "Job", "Deployment", "Service", "HorizontalPodAutoscaler",
                  "PodDisruptionBudget", "ServiceMonitor"}

# The fields of monitoring.coreos.com/v1 ServiceMonitor these manifests use (the CRD's schema is
# not in kubernetes-validate's bundle); anything else fails.
SERVICE_MONITOR_SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": "ServiceMonitor"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object", "additionalProperties": False, "required": ["selector", "endpoints"],
            "properties": {
                "selector": {"type": "object", "additionalProperties": False,
                             "properties": {"matchLabels": {"type": "object",
                                                            "additionalProperties": {"type": "string"}}}},
                "endpoints": {"type": "array", "minItems": 1, "items": {
                    "type": "object", "additionalProperties": False, "required": ["port"],
                    "properties": {"port": {"type": "string"}, "path": {"type": "string"},
                                   "interval": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"}}}},
            },
        },
    },
}


@pytest.fixture(scope="module", params=OVERLAYS)
def overlay(request) -> tuple[str, list[dict[str, Any]]]:
    return request.param, render(K8S / "overlays" / request.param)


def find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["spec"]["template"]["spec"]


def container(doc: dict[str, Any]) -> dict[str, Any]:
    containers = pod_spec(doc)["containers"]
    assert len(containers) == 1
    return containers[0]


def mounts(doc: dict[str, Any], c: dict[str, Any]) -> dict[str, tuple[str, str, bool]]:
    """mount path -> (claim name, sub path, read-only)."""
    claims = {v["name"]: v.get("persistentVolumeClaim", {}).get("claimName", v["name"]) for v in pod_spec(doc)["volumes"]}
    return {m["mountPath"]: (claims[m["name"]], m.get("subPath", ""), bool(m.get("readOnly"))) for m in c["volumeMounts"]}


def on_claim(mounted: dict[str, tuple[str, str, bool]], path: str) -> tuple[str, str]:
    """(claim, path inside the claim) of a file path as a container sees it (longest mount wins)."""
    best = max((m for m in mounted if PurePosixPath(path).is_relative_to(m)), key=len)
    claim, sub, _ = mounted[best]
    return claim, str(PurePosixPath("/", sub, PurePosixPath(path).relative_to(best)))


# --- rendering and schemas ---------------------------------------------------------------------------


def test_overlays_render_every_kind_in_the_namespace(overlay):
    name, docs = overlay
    assert {d["kind"] for d in docs} == EXPECTED_KINDS
    for d in docs:
        if d["kind"] != "Namespace":
            assert d["metadata"]["namespace"] == NAMESPACE, d["metadata"]
    assert ("PersistentVolumeClaim", "triton-tts-checkpoints") in {(d["kind"], d["metadata"]["name"]) for d in docs} \
        or name == "cpu"


def test_every_resource_validates_against_the_kubernetes_schemas(overlay):
    import jsonschema
    import kubernetes_validate

    _, docs = overlay
    for doc in docs:
        if doc["kind"] == "ServiceMonitor":
            jsonschema.validate(doc, SERVICE_MONITOR_SCHEMA)
        else:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_validation_catches_typos(overlay):
    import kubernetes_validate

    _, docs = overlay
    deployment = find(docs, "Deployment", TRITON)
    apply_operation(deployment := yaml.safe_load(yaml.safe_dump(deployment)),
                    {"op": "add", "path": "/spec/replicass", "value": 2})
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with its built-in kustomize) is not installed")
@pytest.mark.parametrize("name", OVERLAYS)
def test_the_renderer_matches_kubectl_kustomize(name):
    out = subprocess.run(["kubectl", "kustomize", str(K8S / "overlays" / name)], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    def key(d: dict[str, Any]) -> tuple[str, str]:
        return d["kind"], d["metadata"]["name"]

    theirs = sorted((d for d in yaml.safe_load_all(out) if d), key=key)
    ours = sorted(render(K8S / "overlays" / name), key=key)
    assert [key(d) for d in ours] == [key(d) for d in theirs]
    for a, b in zip(ours, theirs, strict=True):
        assert a == b, key(a)


def test_renderer_is_strict(tmp_path):
    (tmp_path / "kustomization.yaml").write_text("resources: [a.yaml]\ncommonLabels: {a: b}\n")
    with pytest.raises(KustomizeError, match="commonLabels"):
        render(tmp_path)
    doc = {"spec": {"args": ["a", "b"]}}
    with pytest.raises(KustomizeError, match="out of range"):
        apply_operation(doc, {"op": "replace", "path": "/spec/args/2", "value": "c"})
    with pytest.raises(KustomizeError, match="does not exist"):
        apply_operation(doc, {"op": "remove", "path": "/spec/nope"})
    apply_operation(doc, {"op": "add", "path": "/spec/limits~1gpu", "value": 1})
    apply_operation(doc, {"op": "add", "path": "/spec/args/-", "value": "c"})
    assert doc == {"spec": {"args": ["a", "b", "c"], "limits/gpu": 1}}


# --- Triton ------------------------------------------------------------------------------------------


def test_triton_matches_the_launcher(overlay):
    name, docs = overlay
    triton = find(docs, "Deployment", TRITON)
    c = container(triton)
    assert c["command"] == ["tritonserver"]
    assert c["args"] == triton_server.server_args(
        "/models", "/opt/tritonserver/backends", triton_server.DEFAULT_HTTP_PORT, triton_server.DEFAULT_GRPC_PORT,
        triton_server.DEFAULT_METRICS_PORT, triton_server.DEFAULT_EXIT_TIMEOUT_S)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"http": triton_server.DEFAULT_HTTP_PORT, "grpc": triton_server.DEFAULT_GRPC_PORT,
                     "metrics": triton_server.DEFAULT_METRICS_PORT}
    for probe, path in TRITON_PROBES.items():
        assert c[probe]["httpGet"] == {"path": path, "port": "http"}, probe
    assert c["image"].endswith(":24.10-py3")  # Triton 2.51, as tests/tools_tests/test_compose.py pins
    shm = next(v for v in pod_spec(triton)["volumes"] if v["name"] == "shm")
    assert shm["emptyDir"]["medium"] == "Memory" and mounts(triton, c)["/dev/shm"]
    gpus = c["resources"].get("limits", {}).get("nvidia.com/gpu")
    assert gpus == (1 if name == "gpu" else None)


def test_triton_service_is_headless_and_selects_the_triton_pods(overlay):
    _, docs = overlay
    service = find(docs, "Service", TRITON)
    assert service["spec"]["clusterIP"] == "None"
    labels = find(docs, "Deployment", TRITON)["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    assert ports["grpc"] == triton_server.DEFAULT_GRPC_PORT and ports["metrics"] == triton_server.DEFAULT_METRICS_PORT


def test_the_model_repository_sees_the_artifacts_where_prepare_wrote_them(overlay):
    from triton_tts.cli import build_parser
    from ttscore.backend.repository import SOURCE_REPOSITORY, load_config

    _, docs = overlay
    job = find(docs, "Job", PREPARE)
    c = container(job)
    args = build_parser().parse_args(c["args"])  # the real CLI accepts the command
    assert c["command"] == ["triton-tts"] and args.func.__name__ == "_cmd_prepare"
    assert pod_spec(job)["restartPolicy"] == "Never"
    job_mounts = mounts(job, c)
    triton = find(docs, "Deployment", TRITON)
    triton_mounts = mounts(triton, container(triton))
    gateway = find(docs, "Deployment", GATEWAY)
    gateway_mounts = mounts(gateway, container(gateway))
    # Triton reads the repository the Job renders, and everyone sees the artifacts at one path
    # (the committed configs name /artifacts), read-only outside the Job.
    model_repository = next(a.split("=", 1)[1] for a in container(triton)["args"] if a.startswith("--model-repository="))
    assert on_claim(triton_mounts, model_repository) == on_claim(job_mounts, args.repository)
    assert args.artifacts == "/artifacts"
    for mounted in (triton_mounts, gateway_mounts):
        assert on_claim(mounted, "/artifacts") == on_claim(job_mounts, "/artifacts")
        assert all(ro for path, (claim, _, ro) in mounted.items() if claim == "triton-tts-build")
    for config in SOURCE_REPOSITORY.glob("*/config.pbtxt"):
        parsed = load_config(config)
        if "artifacts_dir" in parsed.parameters:
            assert parsed.parameters["artifacts_dir"].string_value == "/artifacts"
    # The init containers wait for the file the Job writes last.
    for deployment in (triton, gateway):
        init = pod_spec(deployment)["initContainers"][0]
        waited = init["command"][-1].split("-f ", 1)[1].split(" ]", 1)[0]
        assert on_claim(mounts(deployment, init), waited) == on_claim(job_mounts, args.gateway_config)


def test_prepare_job_per_overlay(overlay):
    from triton_tts.cli import build_parser

    name, docs = overlay
    c = container(find(docs, "Job", PREPARE))
    args = build_parser().parse_args(c["args"])
    from triton_tts.serve import ALIGNER_ENV, RUNAWAY_FACTOR_ENV, RUNAWAY_MIN_S_ENV

    env = {e["name"]: e.get("value") for e in c["env"]}
    # The runaway guard's settings and the aligner, there to set (empty: the defaults, no aligner).
    assert env[RUNAWAY_FACTOR_ENV] == env[RUNAWAY_MIN_S_ENV] == env[ALIGNER_ENV] == ""
    if name == "gpu":
        assert args.device == "gpu" and args.checkpoints == "/checkpoints" and not args.demo
        assert mounts(find(docs, "Job", PREPARE), c)["/checkpoints"] == ("triton-tts-checkpoints", "", True)
    else:
        assert args.device == "cpu" and args.demo and "/checkpoints" not in mounts(find(docs, "Job", PREPARE), c)


# --- the gateway ---------------------------------------------------------------------------------------


def test_gateway_matches_its_command_line_routes_and_env(overlay):
    from gateway.__main__ import API_KEYS_ENV, build_parser
    from gateway.routers import router
    from gateway.settings import DEFAULT_PORT, split_host_port
    from gateway.voices.admission import ENV_SAMPLES_DIR
    from triton_tts.cli import build_parser as cli_parser

    _, docs = overlay
    gateway = find(docs, "Deployment", GATEWAY)
    c = container(gateway)
    assert c["command"] == ["python3", "-m", "gateway"]
    args = build_parser().parse_args(c["args"])
    assert args.port == DEFAULT_PORT and {p["name"]: p["containerPort"] for p in c["ports"]} == {"http": DEFAULT_PORT}
    # Every Triton pod, through the headless Service's name.
    host, port = split_host_port(args.triton_url[0])
    assert (host, port) == (TRITON, triton_server.DEFAULT_GRPC_PORT) and len(args.triton_url) == 1
    prepare = cli_parser().parse_args(container(find(docs, "Job", PREPARE))["args"])
    assert prepare.triton_url == args.triton_url[0]
    routes = {r.path for r in router.routes}  # type: ignore[attr-defined]
    assert c["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "http"} and "/ready" in routes
    assert c["livenessProbe"]["httpGet"] == {"path": "/health", "port": "http"} and "/health" in routes
    env = {e["name"]: e for e in c["env"]}
    from gateway.settings import ENV_NAMES

    numbers = set(ENV_NAMES.values())  # the admission and word-timestamp settings the gateway reads
    assert set(env) == {ENV_SAMPLES_DIR, API_KEYS_ENV} | numbers
    assert all(env[name]["value"] == "" for name in numbers)  # there to set; empty: the documented defaults
    voices = env[ENV_SAMPLES_DIR]["value"]
    assert mounts(gateway, c)[voices] == ("triton-tts-voices", "", False)
    assert env[API_KEYS_ENV]["valueFrom"]["secretKeyRef"]["optional"] is True
    job_mounts = mounts(find(docs, "Job", PREPARE), container(find(docs, "Job", PREPARE)))
    assert on_claim(mounts(gateway, c), args.config) == on_claim(job_mounts, prepare.gateway_config)
    from gateway.__main__ import SHUTDOWN_GRACE_S
    from gateway.settings import Settings

    drain = Settings.model_fields["drain_timeout_s"].default
    assert pod_spec(gateway)["terminationGracePeriodSeconds"] > drain + SHUTDOWN_GRACE_S  # the drain fits


def test_shared_volumes_are_read_write_many(overlay):
    _, docs = overlay
    for claim in ("triton-tts-build", "triton-tts-voices"):
        assert find(docs, "PersistentVolumeClaim", claim)["spec"]["accessModes"] == ["ReadWriteMany"]


# --- scaling, disruption, monitoring ------------------------------------------------------------------------


def test_autoscalers_target_their_deployments_on_published_metrics(overlay):
    from ttscore.backend.triton_metrics import SPECS

    _, docs = overlay
    triton_hpa = find(docs, "HorizontalPodAutoscaler", TRITON)
    assert triton_hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": TRITON}
    names = {m["pods"]["metric"]["name"] for m in triton_hpa["spec"]["metrics"] if m["type"] == "Pods"}
    published = {s.name for s in SPECS}
    assert names and names <= published, names - published
    rules = yaml.safe_load((K8S / "prometheus-adapter-rules.yaml").read_text())["rules"]["custom"]
    served = {r["name"]["as"] for r in rules}
    assert names <= served
    for rule in rules:
        assert rule["seriesQuery"].startswith(rule["name"]["as"] + "{")
    gateway_hpa = find(docs, "HorizontalPodAutoscaler", GATEWAY)
    assert gateway_hpa["spec"]["scaleTargetRef"]["name"] == GATEWAY
    (metric,) = gateway_hpa["spec"]["metrics"]
    assert metric["resource"]["name"] == "cpu"
    assert container(find(docs, "Deployment", GATEWAY))["resources"]["requests"]["cpu"]  # utilization needs it


def test_disruption_budgets_and_service_monitors_select_the_right_things(overlay):
    _, docs = overlay
    for name, metrics_port in ((TRITON, "metrics"), (GATEWAY, "http")):
        pods = find(docs, "Deployment", name)["spec"]["template"]["metadata"]["labels"]
        pdb = find(docs, "PodDisruptionBudget", name)
        assert pdb["spec"]["selector"]["matchLabels"].items() <= pods.items() and pdb["spec"]["minAvailable"] == 1
        service = find(docs, "Service", name)
        monitor = find(docs, "ServiceMonitor", name)
        assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["port"] == metrics_port and endpoint["path"] == "/metrics"
        assert metrics_port in {p["name"] for p in service["spec"]["ports"]}
    # Another component's pods never match: the gateway's selector leaves Triton out and back.
    triton_pods = find(docs, "Deployment", TRITON)["spec"]["template"]["metadata"]["labels"]
    assert not find(docs, "PodDisruptionBudget", GATEWAY)["spec"]["selector"]["matchLabels"].items() <= \
        triton_pods.items()
