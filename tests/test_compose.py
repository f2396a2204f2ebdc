"""docker-compose.yml and docker/Dockerfile.triton, checked statically (Docker cannot run here).

The compose file must stay in step with what runs locally: the tritonserver flags of
ttscore/backend/launcher.py, the ports, the Triton release (24.10-py3 = Triton 2.51, the server bundled
in nvidia-pytriton 0.7.0 and the tritonclient 2.51 used by tests and perf), and the Python package
pins of requirements.txt.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from ttscore.backend import launcher as triton_env

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker-compose.yml"
NGC_TAG = "24.10-py3"
NGC_TO_TRITON = {"24.10": "2.51"}  # NGC container release -> Triton server version
IMAGE = f"nvcr.io/nvidia/tritonserver:{NGC_TAG}"
GENERATED_DIRS = ("build",)  # produced by `python -m ttscore.backend.repository` / export, not committed

TOP_LEVEL = {"name", "services", "volumes", "networks", "configs", "secrets"}
SERVICE_KEYS = {
    "build", "image", "command", "entrypoint", "ports", "volumes", "environment", "env_file", "shm_size",
    "ulimits", "deploy", "healthcheck", "restart", "depends_on", "networks", "working_dir", "user", "ipc",
    "stop_grace_period",
}


@pytest.fixture(scope="module")
def compose() -> dict:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict)
    return data


def dockerfile() -> str:
    return (ROOT / "docker" / "Dockerfile.triton").read_text()


def test_structure(compose):
    assert set(compose) - TOP_LEVEL == set() or all(k.startswith("x-") for k in set(compose) - TOP_LEVEL)
    assert set(compose["services"]) == {"triton", "gateway"}
    for name, service in compose["services"].items():
        unknown = set(service) - SERVICE_KEYS
        assert not unknown, f"{name}: unknown keys {unknown}"
        assert "image" in service or "build" in service
    deps = compose["services"]["gateway"]["depends_on"]
    assert deps["triton"]["condition"] == "service_healthy"


def _split_volume(spec: str) -> tuple[str, str]:
    """(host path with ${VAR:-default} resolved to its default, container path)."""
    if spec.startswith("${"):
        end = spec.index("}")
        var, rest = spec[2:end], spec[end + 2 :]
        host = var.split(":-", 1)[1] if ":-" in var else ""
    else:
        host, rest = spec.split(":", 1)
    return host, rest.split(":", 1)[0]


def test_local_paths_exist(compose):
    for service in compose["services"].values():
        assert (ROOT / service["build"]["context"]).is_dir()
        assert (ROOT / service["build"]["context"] / service["build"]["dockerfile"]).is_file()
    for service in compose["services"].values():
        for volume in service.get("volumes", []):
            host = Path(_split_volume(volume)[0])
            if host.parts and host.parts[0] in GENERATED_DIRS:
                continue
            assert (ROOT / host).exists(), f"missing {host}"
    for line in dockerfile().splitlines():
        if line.startswith("COPY "):
            for src in shlex.split(line)[1:-1]:
                assert (ROOT / src).exists(), f"Dockerfile copies missing {src}"


def test_image_is_triton_2_51(compose):
    first = next(line for line in dockerfile().splitlines() if line.startswith("FROM "))
    assert first.split()[1] == IMAGE
    assert NGC_TO_TRITON[NGC_TAG.split("-", maxsplit=1)[0]] == "2.51"
    import tritonclient

    assert getattr(tritonclient, "__version__", "2.51.0").startswith("2.51")
    assert compose["services"]["triton"]["image"].endswith(NGC_TAG)


def test_ports(compose):
    triton = compose["services"]["triton"]
    ports = {p.split(":")[0]: p.split(":")[1] for p in triton["ports"]}
    expected = {triton_env.DEFAULT_HTTP_PORT, triton_env.DEFAULT_GRPC_PORT, triton_env.DEFAULT_METRICS_PORT}
    assert {int(h) for h in ports} == expected and all(h == c for h, c in ports.items())
    assert compose["services"]["gateway"]["ports"] == ["8091:8091"]


def test_command_matches_triton_env(compose):
    command = compose["services"]["triton"]["command"]
    assert command[0] == "tritonserver"
    expected = triton_env.server_args(
        "/models", "/opt/tritonserver/backends",
        triton_env.DEFAULT_HTTP_PORT, triton_env.DEFAULT_GRPC_PORT, triton_env.DEFAULT_METRICS_PORT,
        triton_env.DEFAULT_EXIT_TIMEOUT_S,
    )
    assert command[1:] == expected
    volumes = compose["services"]["triton"]["volumes"]
    targets = {_split_volume(v)[1]: _split_volume(v)[0] for v in volumes}
    assert targets["/models"] == "./build/model_repository" and "/artifacts" in targets


def test_artifacts_mount_matches_committed_configs(compose):
    from ttscore.backend.repository import SOURCE_REPOSITORY, load_config

    for config_path in SOURCE_REPOSITORY.glob("*/config.pbtxt"):
        config = load_config(config_path)
        if "artifacts_dir" in config.parameters:
            assert config.parameters["artifacts_dir"].string_value == "/artifacts", config.name


def test_gpu_shm_and_healthcheck(compose):
    triton = compose["services"]["triton"]
    devices = triton["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    assert str(triton["shm_size"]).endswith(("gb", "g", "GB"))
    test = " ".join(triton["healthcheck"]["test"])
    assert f"localhost:{triton_env.DEFAULT_HTTP_PORT}/v2/health/ready" in test


def _pins(text: str) -> dict[str, str]:
    return {m.group(1).lower(): m.group(2) for m in re.finditer(r"([A-Za-z0-9_.-]+)(?:\[[a-z]+\])?==([0-9][^\s\"#]*)", text)}


def test_python_deps_match_requirements():
    docker = _pins(dockerfile())
    reqs = _pins((ROOT / "requirements.txt").read_text())
    for pkg in ("numpy", "tokenizers", "soundfile", "soxr", "tritonclient"):
        assert docker.get(pkg) == reqs.get(pkg), pkg
    assert docker["numpy"].startswith("1."), "the 2.51 python-backend stub needs numpy < 2"
    assert "onnxruntime-gpu" in docker


def test_gateway_service_runs_the_gateway_on_its_config(compose):
    from gateway.settings import Settings

    gw = compose["services"]["gateway"]
    command = gw["command"]
    assert command[:3] == ["python3", "-m", "gateway"]
    config = command[command.index("--config") + 1]
    mounts = {_split_volume(v)[1]: _split_volume(v)[0] for v in gw["volumes"]}
    host = ROOT / mounts[config]
    settings = Settings.from_file(host)  # parses with the gateway's own strict reader
    assert command[command.index("--port") + 1] == "8091"
    assert command[command.index("--triton-url") + 1] == f"triton:{triton_env.DEFAULT_GRPC_PORT}"
    assert all(str(m.artifacts_dir) == "/artifacts" for m in settings.models)
    # docker stop sends SIGTERM, then SIGKILL after the grace period: it must outlast the drain
    grace = gw["stop_grace_period"]
    assert grace.endswith("s") and float(grace[:-1]) > settings.drain_timeout_s
    dockerfile = (ROOT / "docker" / "Dockerfile.gateway").read_text()
    for line in dockerfile.splitlines():
        if line.startswith("COPY "):
            for src in shlex.split(line)[1:-1]:
                assert (ROOT / src).exists(), f"Dockerfile.gateway copies missing {src}"
    # /metrics needs prometheus-client in the image, at the pin of requirements.txt
    reqs = _pins((ROOT / "requirements.txt").read_text())
    assert "requirements-gateway.txt" in dockerfile
    image = _pins(dockerfile + (ROOT / "requirements-gateway.txt").read_text())
    assert image["prometheus-client"] == reqs["prometheus-client"]
