"""Voxtral TTS served: the deploy plan (inline vocoder, no voice features), the demo entry, the manifest's
preset voices, and the speech_generation tensors decoded into the runtime's request (the wire rows
the gateway sends: text, voice, max_new_tokens, seed, cfg_alpha; a foreign input refused naming it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from deploy_plans import assert_inline_only
from voxtral_tts_fixtures import *  # noqa: F403  (voxtral_tiny, voxtral_artifacts)

from ttscore.contract import tensors as triton_io
from ttscore.contract import voxtral_tts as spec
from ttscore.contract.errors import InvalidRequest

pytestmark = pytest.mark.export


def test_served_with_an_inline_vocoder_and_a_tiny_demo(voxtral_artifacts: Path) -> None:
    from export.families import FAMILIES
    from ttscore.contract.manifest import read_manifest

    assert [name for name, _ in FAMILIES[spec.FAMILY].demo] == ["Voxtral-TTS-tiny"]
    assert sorted(read_manifest(voxtral_artifacts).speakers) == ["casual_male", "neutral_female"]
    assert_inline_only(spec.FAMILY, voxtral_artifacts)


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
