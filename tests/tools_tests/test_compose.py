"""docker-compose.yml and docker/Dockerfile.triton, checked statically (Docker cannot run here).

The compose file must stay in step with what runs locally: the tritonserver flags of
ttscore/backend/triton_server.py, the ports, the Triton release (24.10-py3 = Triton 2.51, the server bundled
in nvidia-pytriton 0.7.0 and the tritonclient 2.51 used by tests and perf), and the Python package
pins of requirements.txt. It is valid Compose (the compose-spec parser, after `${VAR:-default}`
interpolation as compose does it) for each profile, and one command brings it up: every file the
servers mount is made by the init service (`triton-tts prepare`, run here for real on a tiny checkpoint).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest
import yaml

from ttscore.backend import triton_server

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
NGC_TAG = "24.10-py3"
NGC_TO_TRITON = {"24.10": "2.51"}  # NGC container release -> Triton server version
IMAGE = f"nvcr.io/nvidia/tritonserver:{NGC_TAG}"
GENERATED_DIRS = ("build",)  # produced by the init service (`triton-tts prepare`), not committed

TOP_LEVEL = {"name", "services", "volumes", "networks", "configs", "secrets"}
SERVICE_KEYS = {
    "build", "image", "command", "entrypoint", "ports", "volumes", "environment", "env_file", "shm_size",
    "ulimits", "deploy", "healthcheck", "restart", "depends_on", "networks", "working_dir", "user", "ipc",
    "stop_grace_period", "profiles",
}
PROFILES = {"gpu": ("init", "triton", "gateway"), "cpu": ("init-cpu", "triton-cpu", "gateway-cpu")}
# Written at run time by the gateway itself (uploaded voices), so it starts empty: not an init output.
RUNTIME_DATA = {"/voices"}

_VARIABLE = re.compile(r"\$(?:(\$)|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


def interpolate(value, env: dict[str, str]):
    """Compose's variable substitution on every string value: $$, $VAR, ${VAR}, ${VAR:-default},
    ${VAR-default}, ${VAR:?error}, ${VAR?error} (keys are never interpolated)."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def substitute(m: re.Match) -> str:
        if m.group(1):
            return "$"
        name = m.group(2) or m.group(5)
        op, arg = m.group(3), m.group(4)
        current = env.get(name)
        unset_or_empty = not current if op and op.startswith(":") else current is None
        if op in (":-", "-") and unset_or_empty:
            return arg
        if op in (":?", "?") and unset_or_empty:
            raise ValueError(f"required variable {name}: {arg}")
        return current or ""

    return _VARIABLE.sub(substitute, value)


def load(env: dict[str, str] | None = None) -> dict:
    data = yaml.safe_load(COMPOSE.read_text())  # (resolves the YAML anchors and merge keys)
    assert isinstance(data, dict)
    return interpolate(data, env or {})


def active(data: dict, profiles: set[str]) -> dict:
    """The project compose runs with `profiles` enabled: services without profiles, or with one of them."""
    services = {n: s for n, s in data["services"].items() if not s.get("profiles") or set(s["profiles"]) & profiles}
    return {**data, "services": services}


@pytest.fixture(scope="module")
def compose() -> dict:
    return load()


def dockerfile() -> str:
    return (ROOT / "docker" / "Dockerfile.triton").read_text()


def test_structure(compose):
    assert set(compose) - TOP_LEVEL == set() or all(k.startswith("x-") for k in set(compose) - TOP_LEVEL)
    assert set(compose["services"]) == {s for services in PROFILES.values() for s in services}
    for name, service in compose["services"].items():
        unknown = set(service) - SERVICE_KEYS
        assert not unknown, f"{name}: unknown keys {unknown}"
        assert "image" in service or "build" in service
    for init, triton, gateway in PROFILES.values():
        services = compose["services"]
        assert services[gateway]["depends_on"][triton]["condition"] == "service_healthy"
        assert services[triton]["depends_on"][init]["condition"] == "service_completed_successfully"
        assert services[init]["restart"] == "no"
        # the init service reuses the Triton image (one build), which carries the exporter
        assert services[init]["image"] == services[triton]["image"] and services[init]["build"] == services[triton]["build"]


@pytest.mark.parametrize("env", [{}, {"TTS_CHECKPOINTS": "/models/qwen", "TTS_BUILD": "/srv/tts", "TTS_API_KEYS": "a,b",
                                      "TTS_PRECISION": "int8"}])
@pytest.mark.parametrize("profiles", [None, {"gpu"}, {"cpu"}])
def test_valid_compose_specification(env, profiles):
    """The compose-spec parser (strict: unknown keys, bad volume or port syntax, dangling network or
    volume references all fail) accepts the file as compose sees it, whole and per profile."""
    from compose_spec import PyCompose

    data = load(env)
    if profiles is not None:
        data = active(data, profiles)
        assert set(data["services"]) == set(PROFILES[next(iter(profiles))])
        for service in data["services"].values():  # no service depends on one the profile leaves out
            assert set(service.get("depends_on", {})) <= set(data["services"])
    project = PyCompose.from_yaml(yaml.safe_dump(data))
    project.validate()
    spec = project.to_spec()
    assert set(spec.services) == set(data["services"])
    if env:
        assert "/models/qwen:/checkpoints:ro" in data["services"].get("init", {"volumes": ["/models/qwen:/checkpoints:ro"]})[
            "volumes"]


def test_typos_fail_validation():
    from compose_spec import PyCompose

    data = load()
    data["services"]["triton"]["shm_sise"] = "2gb"
    with pytest.raises(ValueError, match="shm_sise"):
        PyCompose.from_yaml(yaml.safe_dump(data))


def test_gpu_is_the_default_and_cpu_reserves_no_gpu(compose):
    env_file = dict(line.split("=", 1) for line in (ROOT / ".env").read_text().splitlines()
                    if line.strip() and not line.startswith("#"))
    assert env_file == {"COMPOSE_PROFILES": "gpu"}  # `docker compose up` = the gpu profile; --profile cpu replaces it
    for name in PROFILES["cpu"]:
        assert "deploy" not in compose["services"][name], name
    assert "--demo" in compose["services"]["init-cpu"]["command"]
    gpu_init = compose["services"]["init"]["command"]
    assert gpu_init[gpu_init.index("--device") + 1] == "gpu"


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
    """Committed paths exist; every other host path is under build/ (made by the init service) or is
    the user's checkpoint directory (read-only input)."""
    for service in compose["services"].values():
        assert (ROOT / service["build"]["context"]).is_dir()
        assert (ROOT / service["build"]["context"] / service["build"]["dockerfile"]).is_file()
    for service in compose["services"].values():
        for volume in service.get("volumes", []):
            host = Path(_split_volume(volume)[0])
            if (host.parts and host.parts[0] in GENERATED_DIRS) or _split_volume(volume)[1] == "/checkpoints":
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
    expected = {triton_server.DEFAULT_HTTP_PORT, triton_server.DEFAULT_GRPC_PORT, triton_server.DEFAULT_METRICS_PORT}
    assert {int(h) for h in ports} == expected and all(h == c for h, c in ports.items())
    assert compose["services"]["gateway"]["ports"] == ["8091:8091"]


def test_command_matches_triton_env(compose):
    command = compose["services"]["triton"]["command"]
    assert command[0] == "tritonserver"
    expected = triton_server.server_args(
        "/models", "/opt/tritonserver/backends",
        triton_server.DEFAULT_HTTP_PORT, triton_server.DEFAULT_GRPC_PORT, triton_server.DEFAULT_METRICS_PORT,
        triton_server.DEFAULT_EXIT_TIMEOUT_S,
    )
    assert command[1:] == expected
    volumes = compose["services"]["triton"]["volumes"]
    targets = {_split_volume(v)[1]: _split_volume(v)[0] for v in volumes}
    assert targets["/models"] == "./build/compose/model_repository" and "/artifacts" in targets


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
    assert f"localhost:{triton_server.DEFAULT_HTTP_PORT}/v2/health/ready" in test


def _pins(text: str) -> dict[str, str]:
    return {m.group(1).lower(): m.group(2) for m in re.finditer(r"([A-Za-z0-9_.-]+)(?:\[[a-z]+\])?==([0-9][^\s\"#]*)", text)}


def test_python_deps_match_requirements():
    docker = _pins(dockerfile())
    reqs = _pins((ROOT / "requirements.txt").read_text())
    # serving, progress, and the exporter the init service runs
    for pkg in ("numpy", "tokenizers", "soundfile", "soxr", "tritonclient", "rich", "torch", "onnx", "onnxscript",
                "transformers", "accelerate", "einops", "safetensors", "librosa"):
        assert docker.get(pkg) == reqs.get(pkg), pkg
    nodeps = _pins((ROOT / "requirements-nodeps.txt").read_text())
    for pkg in ("qwen-tts", "qwen-asr", "nagisa", "dynet38", "six", "soynlp"):  # the aligner's word splitting too
        assert docker[pkg] == nodeps[pkg], pkg
    assert docker["numpy"].startswith("1."), "the 2.51 python-backend stub needs numpy < 2"
    assert "onnxruntime-gpu" in docker


# --- the init service makes every file the servers mount -------------------------------------------


def _flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def _mounts(service: dict) -> list[tuple[str, str, bool]]:
    """(host path, container path, read-only) of each bind mount."""
    out = []
    for volume in service.get("volumes", []):
        host, rest = volume.split(":", 1)
        target, _, mode = rest.partition(":")
        out.append((host, target, mode == "ro"))
    return out


def _in_init(init: dict, host: str) -> str | None:
    """Where the init service sees host path `host` (its writable mounts; the longest prefix wins)."""
    best = None
    for h, target, ro in _mounts(init):
        if ro:
            continue
        rel = PurePosixPath(host).relative_to(h) if PurePosixPath(host).is_relative_to(h) else None
        if rel is not None and (best is None or len(h) > len(best[0])):
            best = (h, str(PurePosixPath(target) / rel))
    return best[1] if best else None


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_every_mounted_file_is_made_by_the_init_service(compose, profile):
    """Static proof that `docker compose up` needs no hand-made file: each server mount is a directory
    the init command writes (its --artifacts, --repository, or the folder of --gateway-config), and
    the servers' own arguments name exactly what it writes."""
    from triton_tts.cli import build_parser

    init_name, triton_name, gateway_name = PROFILES[profile]
    services = compose["services"]
    init = services[init_name]
    assert init["command"][0] == "triton-tts"
    args = build_parser().parse_args(init["command"][1:])  # the real CLI accepts the command
    assert args.func.__name__ == "_cmd_prepare"
    outputs = {args.artifacts, args.repository, str(PurePosixPath(args.gateway_config).parent)}
    for name in (triton_name, gateway_name):
        for host, target, ro in _mounts(services[name]):
            if target in RUNTIME_DATA:
                continue
            assert ro, f"{name} mounts {target} writable"
            assert _in_init(init, host) in outputs, f"{name}:{target} ({host}) is not written by {init_name}"
    triton_mounts = {t: _in_init(init, h) for h, t, _ in _mounts(services[triton_name])}
    model_repository = next(a.split("=", 1)[1] for a in services[triton_name]["command"]
                            if a.startswith("--model-repository="))
    assert triton_mounts[model_repository] == args.repository
    gateway = services[gateway_name]["command"]
    config = PurePosixPath(_flag(gateway, "--config"))
    gateway_mounts = {t: _in_init(init, h) for h, t, _ in _mounts(services[gateway_name])}
    assert str(PurePosixPath(gateway_mounts[str(config.parent)]) / config.name) == args.gateway_config
    # Triton and the gateway see the artifacts where init wrote them, so the paths in the repository
    # and the config need no translation.
    assert args.artifacts == "/artifacts" and triton_mounts["/artifacts"] == gateway_mounts["/artifacts"] == "/artifacts"
    assert _flag(gateway, "--triton-url") == args.triton_url == f"{triton_name}:{triton_server.DEFAULT_GRPC_PORT}"


@pytest.fixture(scope="module")
def prepared(compose, tiny_custom_voice_greedy, tmp_path_factory):
    """The gpu init command, run for real (container paths under a temporary root, the checkpoint
    directory holding one tiny checkpoint), twice."""
    root = tmp_path_factory.mktemp("compose-init")
    (root / "checkpoints").mkdir()
    (root / "checkpoints" / "Qwen3-TTS-tiny-CustomVoice").symlink_to(tiny_custom_voice_greedy[0])
    command = compose["services"]["init"]["command"]
    local = [str(root / a.lstrip("/")) if a.startswith("/") else a for a in command[1:]]
    runs = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-m", "triton_tts.cli", *local], capture_output=True, text=True,
                              timeout=900, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr[-3000:]
        manifest = root / "artifacts" / "Qwen3-TTS-tiny-CustomVoice" / "manifest.json"
        runs.append((proc, manifest.stat().st_mtime_ns))
    return {"root": root, "command": command, "runs": runs}


@pytest.mark.export
@pytest.mark.slow
def test_the_init_service_makes_what_the_servers_mount(compose, prepared):
    from tritonclient.grpc import model_config_pb2 as mc

    from gateway.checkpoints import load_checkpoints
    from gateway.settings import Settings
    from ttscore.backend.repository import load_config

    root = prepared["root"]
    (first, exported), (second, unchanged) = prepared["runs"]
    assert "export Qwen3-TTS-tiny-CustomVoice: [1/" in first.stderr  # stages, as plain lines (no terminal)
    assert exported == unchanged and "export" not in second.stderr  # skipped when current
    repo = root / "build" / "model_repository"
    assert sorted(p.name for p in repo.iterdir() if p.is_dir()) == ["code2wav", "speech_generation"]
    config = load_config(repo / "speech_generation" / "config.pbtxt")
    assert config.parameters["artifacts_dir"].string_value == str(root / "artifacts" / "Qwen3-TTS-tiny-CustomVoice")
    assert config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU  # --device gpu
    settings = Settings.from_file(root / "build" / "gateway" / "gateway.json")  # the gateway's own strict reader
    (served,) = load_checkpoints(settings)
    assert served.name == "Qwen3-TTS-tiny-CustomVoice" and served.task == "CustomVoice"
    assert settings.triton_url == f"triton:{triton_server.DEFAULT_GRPC_PORT}"
    assert json.loads((root / "build" / "gateway" / "gateway.json").read_text())["readiness_models"] == ["code2wav"]


def test_gateway_service_runs_the_gateway(compose):
    from gateway.settings import Settings

    for name in (PROFILES["gpu"][2], PROFILES["cpu"][2]):
        gw = compose["services"][name]
        command = gw["command"]
        assert command[:3] == ["python3", "-m", "gateway"]
        assert _flag(command, "--port") == "8091" and gw["ports"] == ["8091:8091"]
        # docker stop sends SIGTERM, then SIGKILL after the grace period: it must outlast the drain
        grace = gw["stop_grace_period"]
        assert grace.endswith("s") and float(grace[:-1]) > Settings.model_fields["drain_timeout_s"].default
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
    # ... and uvicorn's C HTTP parser and event loop, at the same pins
    for pkg in ("uvicorn", "httptools", "uvloop"):
        assert image[pkg] == reqs[pkg], pkg


def test_settings_reach_the_services_that_read_them(compose, monkeypatch):
    """TTS_ALIGNER mounts the aligner checkpoint where prepare's --aligner default points; the gateway gets the
    admission and word-timestamp settings it reads (gateway.settings.ENV_NAMES)."""
    from gateway.settings import ENV_NAMES
    from triton_tts.cli import build_parser
    from triton_tts.serve import ALIGNER_ENV

    for profile in PROFILES.values():
        init, gateway = compose["services"][profile[0]], compose["services"][profile[2]]
        assert ALIGNER_ENV in init["environment"]  # (interpolated: empty unless the host sets it)
        assert ("./build/no-aligner", "/aligner", True) in _mounts(init)
        assert set(ENV_NAMES.values()) <= set(gateway["environment"])
    monkeypatch.setenv(ALIGNER_ENV, "/aligner")
    args = build_parser().parse_args(["prepare", "--checkpoints", "/c", "--artifacts", "/a", "--repository", "/r",
                                      "--gateway-config", "/g.json"])
    assert args.aligner == "/aligner"
    monkeypatch.setenv(ALIGNER_ENV, "")
    assert build_parser().parse_args(["serve"]).aligner is None
