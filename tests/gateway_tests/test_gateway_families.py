"""The gateway's family seams (issue 18): one adapter per contract family, limits from each family's rules."""

from __future__ import annotations

import numpy as np
import pytest

from gateway import protocol, refaudio
from gateway.families import ADAPTERS, adapter
from gateway.family import FamilyAdapter
from ttscore.contract import families
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.rules import RefAudioBounds
from ttscore.runtime.audio import check_reference

pytestmark = pytest.mark.unit


def test_every_contract_family_has_one_gateway_adapter_with_its_rules():
    assert set(ADAPTERS) == set(families.RULES)
    for family, a in ADAPTERS.items():
        assert a.family == family and a.rules is families.RULES[family]
        for name in FamilyAdapter.__annotations__:  # the protocol's data members
            assert hasattr(a, name), (family, name)
    with pytest.raises(KeyError, match="no gateway adapter"):
        adapter("no-such-family")


def test_the_request_schema_takes_the_widest_range_of_the_families():
    fields = protocol.SpeechRequest.model_fields
    for name in ("max_new_tokens", "initial_codec_chunk_frames", "seed"):
        lo, hi = families.field_range(name)
        assert lo == min(r.field(name).lo for r in families.RULES.values() if r.has_field(name))
        assert hi == max(r.field(name).hi for r in families.RULES.values() if r.has_field(name))
        bounds = {type(m).__name__: m for m in fields[name].metadata}
        assert (bounds["Ge"].ge, bounds["Le"].le) == (lo, hi), name


def test_reference_audio_bounds_are_the_familys():
    narrow = RefAudioBounds(min_rate=16000, max_rate=16000, min_seconds=0.5, max_seconds=1.0)
    assert narrow.widest(RefAudioBounds()) == RefAudioBounds()
    wav = np.zeros(16000, np.float32)
    assert check_reference(wav, 16000, bounds=narrow).size == 16000
    with pytest.raises(InvalidRequest, match=r"sample rate must be in \[16000, 16000\]"):
        check_reference(np.zeros(8000, np.float32), 8000, bounds=narrow)
    with pytest.raises(InvalidRequest, match="must last 0.5-1 s"):
        check_reference(np.zeros(32000, np.float32), 16000, bounds=narrow)
    assert families.ref_audio_bounds() == refaudio.BOUNDS  # without a family: the widest of them



# --- OmniVoice: planning (the adapter's rules, no Triton) ------------------------------------------


def _omnivoice_deployment():
    from pathlib import Path

    from gateway.families import adapter
    from gateway.families.omnivoice import OmniVoiceFacts
    from gateway.family import ServedCheckpoint
    from gateway.planning import Deployment
    from gateway.settings import CheckpointSettings

    ckpt = ServedCheckpoint(
        settings=CheckpointSettings("OmniVoice-tiny", "base", "sg_omni", Path("/nowhere")), speakers=(),
        adapter=adapter("omnivoice"),
        languages=("auto",), sample_rate=24000, samples_per_frame=960, family="omnivoice",
        facts=OmniVoiceFacts(language_ids={"english": "en", "chinese": "zh"}))
    return Deployment([ckpt])


def _plan(**fields):
    from gateway.planning import SpeechFields, plan_speech

    return plan_speech(SpeechFields(**{"input": "Hello there. How are you?", **fields}), _omnivoice_deployment())


def test_omnivoice_plan_sends_its_fields_and_knobs():
    plan = _plan(language="English", instructions="female, low pitch", seed=7, speed=1.5,
                 extra_params={"num_step": 8, "guidance_scale": 0, "position_temperature": 0.0,
                               "class_temperature": 0, "t_shift": 0.5})
    sent = plan.generation_fields(0)
    assert sent["language"] == "en" and sent["instructions"] == "female, low pitch" and sent["seed"] == 7
    assert sent["speed"] == 1.5 and plan.output.speed == 1.0  # the model applies speed (duration scaling)
    assert (sent["num_step"], sent["guidance_scale"], sent["t_shift"]) == (8, 0.0, 0.5)
    assert (sent["position_temperature"], sent["class_temperature"]) == (0.0, 0.0)
    assert sent["sentence_chunks"] is None  # a whole clip: one generation, as the reference
    assert _plan(stream=True, response_format="pcm").generation_fields(0)["sentence_chunks"] is True
    assert _plan(stream_format="audio", response_format="pcm", speed=2.0).generation_fields(0)["speed"] == 2.0
    for voice in (None, "default", "DEFAULT"):
        assert _plan(voice=voice).generation_fields(0)["language"] is None
    assert _plan(language="Auto").generation_fields(0)["language"] is None
    assert _plan(language="zh").generation_fields(0)["language"] == "zh"
    tensors = plan.generation_inputs(0, None)
    assert tensors["num_step"].dtype == np.int32 and tensors["guidance_scale"].dtype == np.float32


def test_omnivoice_clones_from_ref_audio_with_the_reference_s_transcript_rule():
    plan = _plan(ref_audio="data:audio/wav;base64,AAAA", ref_text="  nice to meet you ", voice="default")
    assert plan.needs_voice_features and plan.ref_audio is not None
    sent = plan.generation_fields(0)
    assert sent["ref_text"] == "nice to meet you."  # create_voice_clone_prompt's add_punctuation
    codes = np.arange(16).reshape(8, 2)
    tensors = plan.generation_inputs(0, codes)
    assert tensors["ref_audio_codes"].dtype == np.int64 and tensors["ref_audio_codes"].shape == (8, 2)
    assert not _plan().needs_voice_features and "ref_audio_codes" not in _plan().generation_inputs(0, None)
    # with a reference the estimate is at the clip's rate: the model checks max_new_tokens then
    assert _plan(ref_audio="data:audio/wav;base64,AAAA", max_new_tokens=3).max_new_tokens == 3


@pytest.mark.parametrize(("fields", "param"), [
    ({"voice": "alloy"}, "voice"),
    ({"language": "Klingon"}, "language"),
    ({"instructions": "sounds like a dragon"}, "instructions"),
    ({"ref_text": "a transcript"}, "ref_text"),
    ({"max_new_tokens": 3}, "max_new_tokens"),
    ({"extra_params": {"temperature": 0.7}}, "extra_params"),
    ({"extra_params": {"num_step": 0}}, "extra_params"),
    ({"extra_params": {"guidance_scale": "high"}}, "extra_params"),
    ({"extra_params": {"class_temperature": -1.0}}, "extra_params"),
    ({"x_vector_only_mode": True}, "x_vector_only_mode"),
    ({"non_streaming_mode": False}, "non_streaming_mode"),
    ({"initial_codec_chunk_frames": 2}, "initial_codec_chunk_frames"),
    ({"task_type": "CustomVoice"}, "task_type"),
    ({"speed": 5.0}, "speed"),
    ({"response_format": "mp3", "sample_rate": 22000}, "sample_rate"),
])
def test_omnivoice_refuses_naming_the_field(fields, param):
    from gateway.errors import APIError

    with pytest.raises(APIError) as err:
        _plan(**fields)
    assert err.value.param == param, err.value


def test_extra_params_for_a_family_without_knobs_is_refused_as_before():
    from pathlib import Path

    from gateway.errors import APIError
    from gateway.families import adapter
    from gateway.family import ServedCheckpoint
    from gateway.planning import Deployment, SpeechFields, plan_speech
    from gateway.settings import CheckpointSettings

    # Gepard-1.0's rules list no extra_params keys (Breeze-TTS-2's now list its greedy-only ones)
    ckpt = ServedCheckpoint(settings=CheckpointSettings("Gepard", "base", "sg", Path("/nowhere")), speakers=(),
                            adapter=adapter("gepard"),
                            languages=("auto",), sample_rate=22050, samples_per_frame=1024, family="gepard")
    with pytest.raises(APIError) as err:
        plan_speech(SpeechFields(input="Hi", extra_params={}), Deployment([ckpt]))
    assert err.value.param == "extra_params" and "Unrecognized request argument" in str(err.value)
