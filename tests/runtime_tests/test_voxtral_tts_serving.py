"""Voxtral TTS served: the deploy plan (inline vocoder, no voice features), the demo entry, the manifest's
preset voices, and the speech_generation tensors decoded into the runtime's request (the wire rows
the gateway sends: text, voice, max_new_tokens, seed, cfg_alpha; a foreign input refused naming it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from voxtral_tts_fixtures import *  # noqa: F403  (voxtral_tiny, voxtral_artifacts)

from ttscore.contract import tensors as triton_io
from ttscore.contract import voxtral_tts as spec
from ttscore.contract.errors import InvalidRequest

pytestmark = pytest.mark.export


def test_served_with_an_inline_vocoder_and_a_tiny_demo(voxtral_artifacts: Path) -> None:
    from export.families import FAMILIES
    from ttscore.backend.families import FAMILIES as SERVED
    from ttscore.contract.manifest import Manifest, read_manifest

    entry = FAMILIES[spec.FAMILY]
    assert [name for name, _ in entry.demo] == ["Voxtral-TTS-tiny"]
    assert SERVED[spec.FAMILY].models == () and SERVED[spec.FAMILY].voice_features is None

    @dataclass
    class Served:
        name: str
        artifacts: Path
        manifest: Manifest

    manifest = read_manifest(voxtral_artifacts)
    assert sorted(manifest.speakers) == ["casual_male", "neutral_female"]
    plan = entry.deploy([Served("a", voxtral_artifacts, manifest), Served("b", voxtral_artifacts, manifest)])
    assert plan.vocoder == {"a": "inline", "b": "inline"} and plan.voice_features == {"a": None, "b": None}
    assert plan.models == [] and plan.readiness == []


def test_request_from_tensors() -> None:
    from ttscore.runtime.families import FAMILIES
    from ttscore.runtime.families.voxtral_tts.request import VoxtralRequest

    family = FAMILIES[spec.FAMILY]
    sent = triton_io.request_tensors(text="Hi.", voice="casual_male", max_new_tokens=12, seed=3, cfg_alpha=1.5)
    assert family.request_from_tensors(sent) == VoxtralRequest(text="Hi.", voice="casual_male", max_new_tokens=12,
                                                               seed=3, cfg_alpha=1.5)
    assert family.request_from_tensors(triton_io.request_tensors(text="Hi.")) == VoxtralRequest(text="Hi.")
    with pytest.raises(InvalidRequest) as info:
        family.request_from_tensors(triton_io.request_tensors(text="Hi.", speaker="casual_male"))
    assert info.value.param == "speaker"


def test_prepare_finds_a_checkpoint_without_config_json(voxtral_tiny: Path, tmp_path: Path) -> None:
    """Mistral's layout has params.json, no config.json: prepare finds it directly and in a parent."""
    from triton_tts.prepare import find_checkpoints

    assert not (voxtral_tiny / "config.json").exists()
    assert [c.path for c in find_checkpoints(voxtral_tiny)] == [voxtral_tiny]
    (tmp_path / "Voxtral-TTS-tiny").symlink_to(voxtral_tiny, target_is_directory=True)
    (tmp_path / "not-a-checkpoint").mkdir()
    assert [c.name for c in find_checkpoints(tmp_path)] == ["Voxtral-TTS-tiny"]
