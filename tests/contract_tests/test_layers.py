"""The layering that import-linter cannot see: what importing the gateway loads, and what its image installs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
MODEL_PACKAGES = ("torch", "onnxruntime", "tokenizers")


def test_importing_the_gateway_loads_no_model_code():
    code = (
        "import sys, gateway, gateway.app, gateway.__main__; "
        "app = gateway.app.create_app; "
        f"print(','.join(sorted({{m.split('.')[0] for m in sys.modules}} & set({MODEL_PACKAGES!r}))))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"importing the gateway loaded {out.stdout.strip()}"


def _pins(text: str) -> dict[str, str]:
    return {m.group(1).lower(): m.group(2) for m in re.finditer(r"^([A-Za-z0-9_.-]+)==(\S+)", text, re.M)}


def test_gateway_image_requirements_have_no_model_code_and_share_the_pins():
    gateway_reqs = _pins((ROOT / "requirements-gateway.txt").read_text())
    assert not set(gateway_reqs) & set(MODEL_PACKAGES)
    all_reqs = _pins((ROOT / "requirements.txt").read_text())
    for pkg, version in gateway_reqs.items():
        assert all_reqs.get(pkg) == version, f"{pkg} pinned differently from requirements.txt"
    dockerfile = (ROOT / "docker" / "Dockerfile.gateway").read_text()
    installs = " ".join(line for line in dockerfile.splitlines() if "pip install" in line)
    assert "-r requirements-gateway.txt" in installs
    assert not any(pkg in installs for pkg in MODEL_PACKAGES)


def test_model_repository_templates_ship_inside_the_package():
    from importlib.resources import files

    templates = files("ttscore.backend") / "model_repository"
    for model in ("speech_generation", "code2wav", "voice_features"):
        assert (templates / model / "config.pbtxt").is_file()
        assert (templates / model / "1").is_dir()  # Triton needs the version folder, even an ensemble's
    assert (files("triton_tts.bench") / "data" / "speech_generation.json").is_file()
