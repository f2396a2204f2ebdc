"""The Voxtral TTS gateway adapter without Triton: preset voices (required, lower-case accepted), each
refused field or value a 400 naming it (cloning fields with the no-encoder reason), `extra_params.cfg_alpha`
bounded as the runtime bounds it, `speed` whole clips only, and the tensors a plan sends."""

from __future__ import annotations

from pathlib import Path

import gateway_plans as kit
import pytest

from gateway.errors import APIError
from gateway.families.voxtral_tts import ADAPTER
from gateway.planning import Deployment, NoStoredVoices, StoredVoice
from ttscore.contract import voxtral_tts as spec

pytestmark = pytest.mark.unit

PRESETS = {"casual_male": 0, "neutral_female": 1}


class OneUpload(NoStoredVoices):
    def resolve_voice(self, name: str) -> StoredVoice | None:
        return StoredVoice(name="mine") if name == "mine" else None


@pytest.fixture
def dep(tmp_path: Path) -> Deployment:
    manifest = {"family": spec.FAMILY, "sample_rate": 24000, "samples_per_frame": 1920, "speakers": PRESETS}
    return kit.one_checkpoint(tmp_path, "voxtral", manifest, voices=OneUpload())


def plan(dep: Deployment, **fields):
    fields.setdefault("voice", "casual_male")
    return kit.plan_for(dep, "voxtral", **fields)


def fails(dep: Deployment, **fields) -> APIError:
    return kit.refusal(lambda: plan(dep, **fields))


def test_defaults_and_the_tensors_sent(dep: Deployment) -> None:
    assert not ADAPTER.clones_voices and not ADAPTER.routes_by_task
    assert dep.checkpoints[0].speakers == ("casual_male", "neutral_female")
    p = plan(dep)
    assert (p.output.format, p.output.sample_rate, p.output.stream, p.output.speed) == ("wav", 24000, None, 1.0)
    assert not p.needs_voice_features
    sent = p.generation_inputs(0, None)
    assert set(sent) == {"text", "voice", "seed"}  # max_new_tokens, cfg_alpha: the runtime's defaults
    assert p.seed_drawn  # no seed: random, as vLLM-Omni; the gateway's draw makes it replayable (X-Seed)
    assert sent["voice"].reshape(-1)[0] == b"casual_male"
    p = plan(dep, voice="NEUTRAL_Female", seed=7, max_new_tokens=4096, extra_params={"cfg_alpha": 2})
    sent = p.generation_inputs(0, None)
    assert set(sent) == {"text", "voice", "max_new_tokens", "seed", "cfg_alpha"}
    assert sent["voice"].reshape(-1)[0] == b"neutral_female"
    assert (int(sent["seed"].reshape(-1)[0]), int(sent["max_new_tokens"].reshape(-1)[0])) == (7, 4096)
    assert float(sent["cfg_alpha"].reshape(-1)[0]) == 2.0


def test_whole_formats_rates_and_speed(dep: Deployment) -> None:
    for fmt in ("wav", "pcm", "flac", "mp3", "opus", "aac"):
        assert plan(dep, response_format=fmt).output.format == fmt
    assert plan(dep, response_format="wav", sample_rate=8000).output.sample_rate == 8000
    assert plan(dep, speed=1.5).output.speed == 1.5  # whole clips: the shared time-stretch


test_streams = kit.streams_test(plan)


@pytest.mark.parametrize(("fields", "param"), [
    ({"input": "   "}, "input"),
    ({"voice": None}, "voice"),
    ({"voice": " "}, "voice"),
    *kit.FOREIGN_VOICES,
    ({"voice": "default"}, "voice"),
    *kit.STREAM_LIMITS,
    ({"speed": 5.0}, "speed"),
    ({"sample_rate": 1}, "sample_rate"),
    ({"response_format": "opus", "sample_rate": 44100}, "sample_rate"),
    *kit.TOKEN_AND_SEED_BOUNDS,
    ({"extra_params": {"cfg_alpha": 10.5}}, "extra_params"),
    ({"extra_params": {"cfg_alpha": -0.1}}, "extra_params"),
    ({"extra_params": {"cfg_alpha": "1.2"}}, "extra_params"),
    ({"extra_params": {"cfg_alpha": True}}, "extra_params"),
    ({"extra_params": {"temperature": 0.5}}, "extra_params"),
    *kit.STYLE_FIELDS,
    ({"language": "Auto"}, "language"),
    *kit.QWEN_MODE_FIELDS,
])
def test_refused_fields_name_the_field(dep: Deployment, fields: dict, param: str) -> None:
    assert fails(dep, **fields).param == param


@pytest.mark.parametrize(("fields", "param"), [
    ({"ref_audio": "data:audio/wav;base64,AAAA"}, "ref_audio"),
    ({"ref_text": "x"}, "ref_text"),
    ({"voice": "mine"}, "voice"),  # an uploaded voice
])
def test_cloning_is_refused_with_the_reason(dep: Deployment, fields: dict, param: str) -> None:
    err = fails(dep, **fields)
    assert err.param == param and "no codec encoder" in err.message


def test_a_missing_or_unknown_voice_lists_the_presets(dep: Deployment) -> None:
    for voice in (None, "nobody"):
        err = fails(dep, voice=voice)
        assert "casual_male" in err.message and "neutral_female" in err.message


def test_no_voices_of_its_own() -> None:
    from gateway.voices.precomputed import SkipVoice

    with pytest.raises(SkipVoice, match="no precomputed voices"):
        ADAPTER.precomputed_voice(Path("."), "v", {"model_type": spec.FAMILY})


def test_language_refused_so_none_listed(dep: Deployment) -> None:
    kit.assert_no_language_listed(dep, fails)
