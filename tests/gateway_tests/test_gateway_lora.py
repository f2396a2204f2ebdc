"""GET /v1/models shows the startup LoRA adapter a served model's artifacts were exported with (the
manifest's `adapter`, ttscore.contract.manifest); a model without one has no `adapter` field."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from gateway_fixtures import FakeBackend, fake_deployment

from gateway.app import create_app

pytestmark = pytest.mark.gateway

ADAPTER = {"name": "my-voice", "format": "voxcpm2-native-lora", "sha256": "ab" * 32, "r": 4, "alpha": 8.0,
           "groups": {"lm": ["q_proj"]}, "merged_layers": 12}


def test_models_list_the_adapter_from_the_manifest(tmp_path):
    settings = fake_deployment(tmp_path)
    base = next(m for m in settings.models if m.variant == "base")
    path = base.artifacts_dir / "manifest.json"
    manifest = json.loads(path.read_text())
    path.write_text(json.dumps({**manifest, "adapter": ADAPTER}))
    with TestClient(create_app(settings, backend_factory=lambda s: FakeBackend())) as client:
        cards = {m["id"]: m for m in client.get("/v1/models").json()["data"]}
    assert cards[base.name]["adapter"] == {k: ADAPTER[k] for k in ("name", "format", "sha256", "r", "alpha")}
    assert all("adapter" not in card for name, card in cards.items() if name != base.name)
