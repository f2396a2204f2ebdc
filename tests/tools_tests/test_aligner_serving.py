"""The forced aligner in a deployment (issue 40): `serve --aligner` prepares its export like a checkpoint's
(ensure_artifacts, reused while up to date) and the plan renders `forced_aligner` over it beside the speech models;
without one the plan has no aligner model."""

from __future__ import annotations

from pathlib import Path

import pytest
from aligner_fixtures import *  # noqa: F403  (aligner_tiny)
from deploy_plans import served_from_manifest

pytestmark = pytest.mark.export


def test_the_plan_renders_forced_aligner_over_its_export(aligner_tiny: Path, tmp_path: Path) -> None:
    from triton_tts.artifacts import ensure_artifacts
    from triton_tts.serve import plan_deployment
    from ttscore.backend import repository as r

    art = ensure_artifacts(aligner_tiny, "fp32", tmp_path / "aligner", quiet=True)
    made = (art / "manifest.json").stat().st_mtime_ns
    assert ensure_artifacts(aligner_tiny, "fp32", tmp_path / "aligner", quiet=True) == art  # up to date: kept
    assert (art / "manifest.json").stat().st_mtime_ns == made
    served = [served_from_manifest(tmp_path, "cv", {"family": "qwen3_tts", "variant": "custom_voice",
                                                    "code2wav": {"state_size": 12}})]
    assert plan_deployment(served)["aligner_model"] is None
    plan = plan_deployment(served, aligner=art)
    assert plan["aligner_model"] == "forced_aligner" and "forced_aligner" in plan["models"]
    repo = r.render_repository(tmp_path / "repo", plan["settings"], models=plan["models"], aliases=plan["aliases"])
    config = r.load_config(repo / "forced_aligner" / "config.pbtxt")
    assert config.parameters["artifacts_dir"].string_value == str(art)
    assert (repo / "forced_aligner" / "1" / "model.py").is_file()


def test_prepare_exports_and_renders_the_aligner(aligner_tiny: Path, dummy_artifacts: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """`triton-tts prepare --aligner` (the compose init step): the aligner exported to ARTIFACTS/forced-aligner and
    rendered; the speech checkpoint's export is stood in for by the dummy Qwen3-TTS one."""
    import json

    from triton_tts import artifacts, prepare
    from ttscore.backend import repository as r

    real = artifacts.ensure_artifacts

    def ensure(checkpoint, precision="fp32", out=None, **kw):  # type: ignore[no-untyped-def]
        return real(checkpoint, precision, out, **kw) if Path(checkpoint.path) == aligner_tiny else dummy_artifacts

    monkeypatch.setattr(artifacts, "ensure_artifacts", ensure)
    speech = tmp_path / "speech"
    speech.mkdir()
    (speech / "config.json").write_text("{}")
    config = prepare.prepare([speech], tmp_path / "art", tmp_path / "repo", tmp_path / "gw.json",
                             triton_url="triton:8001", quiet=True, aligner=aligner_tiny)
    assert [m["name"] for m in config["models"]] == ["speech"]
    rendered = r.load_config(tmp_path / "repo" / "forced_aligner" / "config.pbtxt")
    assert rendered.parameters["artifacts_dir"].string_value == str(tmp_path / "art" / prepare.ALIGNER_DIR)
    assert json.loads((tmp_path / "art" / prepare.ALIGNER_DIR / "manifest.json").read_text())["family"] == \
        "qwen3_forced_aligner"
