"""The Fish Speech S2 Pro gateway adapter without Triton: `voice` default/omitted or an uploaded voice (its
stored transcript), `ref_audio` + `ref_text` cloning (each without the other a 400 naming `ref_text`), 44.1 kHz
output (opus there a 400 naming `sample_rate`), `extra_params` temperature/top_k/top_p bounded, each refused
field a 400 naming it, the tensors a plan sends, and the reference codes taken from the checkpoint's
dac_encoder (an upload's computed at upload)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import gateway_plans as kit
import numpy as np
import pytest

from gateway.errors import APIError
from gateway.families.fish_speech import ADAPTER
from gateway.planning import Deployment, NoStoredVoices, StoredVoice
from ttscore.contract import fish_speech as spec
from ttscore.contract.errors import InvalidRequest

pytestmark = pytest.mark.unit

CLIP = "data:audio/wav;base64,AAAA"
UPLOAD_CODES = np.arange(20, dtype=np.int64).reshape(2, 10)


async def _upload_features(model: str, prompt: bool) -> np.ndarray:
    assert model == "dac_encoder_fish"
    return UPLOAD_CODES


class Uploads(NoStoredVoices):
    def resolve_voice(self, name: str) -> StoredVoice | None:
        if name == "mine":
            return StoredVoice(name="mine", ref_text="My transcript.", model_features=_upload_features)
        if name == "silent":
            return StoredVoice(name="silent", model_features=_upload_features)
        return None


@pytest.fixture
def dep(tmp_path: Path) -> Deployment:
    manifest = {"family": spec.FAMILY, "sample_rate": 44100, "samples_per_frame": 2048}
    return kit.one_checkpoint(tmp_path, "fish", manifest, "dac_encoder_fish", Uploads())


def plan(dep: Deployment, **fields: Any) -> Any:
    return kit.plan_for(dep, "fish", **fields)


def fails(dep: Deployment, **fields: Any) -> APIError:
    return kit.refusal(lambda: plan(dep, **fields))


def test_defaults_and_the_tensors_sent(dep: Deployment) -> None:
    assert ADAPTER.clones_voices and not ADAPTER.routes_by_task and not ADAPTER.caches_voice_features
    for voice in (None, "default", "DEFAULT"):
        p = plan(dep, voice=voice)
        assert (p.output.format, p.output.sample_rate, p.output.stream, p.output.speed) == ("wav", 44100, None, 1.0)
        assert not p.needs_voice_features
        assert set(p.generation_inputs(0, None)) == {"text"}  # max_new_tokens, seed, knobs: the runtime's defaults
    p = plan(dep, seed=7, max_new_tokens=4096, extra_params={"temperature": 0.5, "top_k": 10, "top_p": 0.7})
    sent = p.generation_inputs(0, None)
    assert set(sent) == {"text", "max_new_tokens", "seed", "temperature", "top_k", "top_p"}
    assert (int(sent["seed"].reshape(-1)[0]), int(sent["max_new_tokens"].reshape(-1)[0])) == (7, 4096)
    assert float(sent["temperature"].reshape(-1)[0]) == 0.5 and int(sent["top_k"].reshape(-1)[0]) == 10
    assert float(sent["top_p"].reshape(-1)[0]) == pytest.approx(0.7)
    p = plan(dep, extra_params={"temperature": 0, "top_k": 0, "top_p": 1})  # greedy, top-k off, top-p off
    assert float(p.generation_inputs(0, None)["temperature"].reshape(-1)[0]) == 0.0


def test_cloning_sends_the_codes_and_the_transcript(dep: Deployment) -> None:
    p = plan(dep, ref_audio=CLIP, ref_text="The transcript.")
    assert p.needs_voice_features and p.ref_text == "The transcript."
    codes = np.ones((3, 10), np.int64)
    sent = p.generation_inputs(0, codes)
    assert set(sent) == {"text", "ref_text", "ref_dac_codes"}
    assert np.array_equal(sent["ref_dac_codes"], codes) and sent["ref_text"].reshape(-1)[0] == b"The transcript."
    up = plan(dep, voice="mine")  # an uploaded voice: its stored transcript
    assert up.stored_voice is not None and up.ref_text == "My transcript." and up.needs_voice_features
    assert plan(dep, voice="mine", ref_text="Other.").ref_text == "Other."
    assert plan(dep, voice="silent", ref_text="Given.").ref_text == "Given."
    inline = plan(dep, voice="mine", ref_audio=CLIP, ref_text="Inline.")  # inline ref_audio overrides the voice
    assert inline.stored_voice is None and inline.ref_audio == CLIP


def FakeEnv() -> kit.EncoderEnv:
    return kit.EncoderEnv({"ref_dac_codes": np.full((4, 10), 3, np.int64)}, spec.REF_AUDIO)


def test_reference_codes_come_from_the_dac_encoder(dep: Deployment) -> None:
    env = FakeEnv()
    codes = asyncio.run(ADAPTER.reference_features(plan(dep, ref_audio=CLIP, ref_text="T."), env))
    assert codes.shape == (4, 10)
    (model, inputs), = env.backend.calls
    assert model == "dac_encoder_fish" and int(inputs["sample_rate"][0]) == 16000 and inputs["audio"].size == 8000
    up = asyncio.run(ADAPTER.reference_features(plan(dep, voice="mine"), FakeEnv()))
    assert np.array_equal(up, UPLOAD_CODES)  # computed at upload, not again


@pytest.mark.parametrize("fmt", ["wav", "pcm", "flac", "mp3", "aac"])
def test_whole_formats(dep: Deployment, fmt: str) -> None:
    assert plan(dep, response_format=fmt).output.format == fmt


def test_rates_and_speed(dep: Deployment) -> None:
    assert plan(dep, response_format="opus", sample_rate=48000).output.sample_rate == 48000  # an Opus rate
    assert plan(dep, response_format="wav", sample_rate=16000).output.sample_rate == 16000
    assert plan(dep, speed=1.5).output.speed == 1.5  # whole clips: the shared time-stretch


test_streams = kit.streams_test(plan)


@pytest.mark.parametrize(("fields", "param"), [
    ({"input": "   "}, "input"),
    *kit.FOREIGN_VOICES,
    ({"ref_audio": CLIP}, "ref_text"),
    ({"ref_audio": CLIP, "ref_text": "  "}, "ref_text"),
    ({"ref_text": "no clip"}, "ref_text"),
    ({"voice": "silent"}, "ref_text"),  # an upload without a transcript
    ({"response_format": "opus"}, "sample_rate"),  # 44.1 kHz is not an Opus rate
    ({"response_format": "opus", "sample_rate": 44100}, "sample_rate"),
    *kit.STREAM_LIMITS,
    ({"sample_rate": 1}, "sample_rate"),
    *kit.TOKEN_AND_SEED_BOUNDS,
    ({"extra_params": {"temperature": 10.5}}, "extra_params"),
    ({"extra_params": {"temperature": -0.1}}, "extra_params"),
    ({"extra_params": {"temperature": "0.5"}}, "extra_params"),
    ({"extra_params": {"top_k": 1.5}}, "extra_params"),
    ({"extra_params": {"top_k": True}}, "extra_params"),
    ({"extra_params": {"top_k": -1}}, "extra_params"),
    ({"extra_params": {"top_p": 0}}, "extra_params"),
    ({"extra_params": {"top_p": 1.01}}, "extra_params"),
    ({"extra_params": {"cfg_alpha": 1.0}}, "extra_params"),
    ({"extra_params": {"repetition_penalty": 1.1}}, "extra_params"),
    *kit.STYLE_FIELDS,
    *kit.QWEN_MODE_FIELDS,
])
def test_refused_fields_name_the_field(dep: Deployment, fields: dict, param: str) -> None:
    assert fails(dep, **fields).param == param


def test_an_encoder_refusal_names_ref_audio(dep: Deployment) -> None:
    from gateway.backend import INVALID_ARG, BackendError

    env = kit.EncoderEnv(BackendError(INVALID_ARG, "reference audio must last 0.1-60 s"), spec.REF_AUDIO)
    with pytest.raises(InvalidRequest) as info:
        asyncio.run(ADAPTER.reference_features(plan(dep, ref_audio=CLIP, ref_text="T."), env))
    assert info.value.param == "ref_audio"


def test_language_refused_so_none_listed(dep: Deployment) -> None:
    kit.assert_no_language_listed(dep, fails)
