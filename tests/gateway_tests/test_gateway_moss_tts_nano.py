"""The MOSS-TTS-Nano gateway adapter without Triton: `ref_audio`, an uploaded or a precomputed voice required (a
400 naming `ref_audio` without either; a voice file's codes checked against the served codec's checksum, another
codec's or family's voice a 400 naming `voice`), `ref_text` accepted and not sent, no preset voices (an unknown one a 400 naming
`voice`), 48 kHz output by the shared rules, max_new_tokens 1..4096 and seed checked, the sampling knobs of
`extra_params` each checked (other keys a 400 naming extra_params), the tensors a plan sends and the codes
taken from the checkpoint's moss_codec_encoder (an upload's computed at upload)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import gateway_plans as kit
import numpy as np
import pytest

from gateway.backend import INVALID_ARG, BackendError
from gateway.errors import APIError
from gateway.families.moss_tts_nano import ADAPTER
from gateway.planning import Deployment, NoStoredVoices, StoredVoice
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.moss_tts_nano import rules as spec

pytestmark = pytest.mark.unit

CLIP = "data:audio/wav;base64,AAAA"
UPLOAD_CODES = np.arange(32, dtype=np.int64).reshape(2, 16)
FILED_CODES = np.arange(48, dtype=np.int64).reshape(3, 16) + 100
ENCODER = "moss_codec_encoder_nano"


async def _upload_features(model: str, prompt: bool) -> np.ndarray:
    assert model == ENCODER
    return UPLOAD_CODES


class Uploads(NoStoredVoices):
    def resolve_voice(self, name: str) -> StoredVoice | None:
        if name == "mine":
            return StoredVoice(name="mine", ref_text="My transcript.", model_features=_upload_features)
        if name == "filed":  # a precomputed voice file of this family, made with the served codec
            return StoredVoice(name="filed", precomputed=FILED_CODES, family=spec.FAMILY, models=("nano",))
        if name == "elsewhere":  # ... made with another checkpoint's codec
            return StoredVoice(name="elsewhere", precomputed=FILED_CODES, family=spec.FAMILY, models=("other",))
        if name == "breeze":  # another family's voice file
            return StoredVoice(name="breeze", precomputed=FILED_CODES, family="breeze_tts_2", ref_text="Hi.")
        return None


@pytest.fixture
def dep(tmp_path: Path) -> Deployment:
    manifest = {"family": spec.FAMILY, "sample_rate": 48000, "samples_per_frame": 3840}
    return kit.one_checkpoint(tmp_path, "nano", manifest, ENCODER, Uploads())


def plan(dep: Deployment, **fields: Any) -> Any:
    return kit.plan_for(dep, "nano", **fields)


def fails(dep: Deployment, **fields: Any) -> APIError:
    return kit.refusal(lambda: plan(dep, **fields))


def scalar(sent: dict[str, np.ndarray], name: str) -> Any:
    return sent[name].reshape(-1)[0]


def test_defaults_and_the_tensors_sent(dep: Deployment) -> None:
    assert ADAPTER.clones_voices and not ADAPTER.routes_by_task and not ADAPTER.caches_voice_features
    codes = np.ones((3, 16), np.int64)
    for voice in (None, "default", "DEFAULT"):
        p = plan(dep, voice=voice, ref_audio=CLIP, ref_text="ignored transcript")
        assert (p.output.format, p.output.sample_rate, p.output.stream, p.output.speed) == ("wav", 48000, None, 1.0)
        assert p.needs_voice_features and p.ref_text is None  # ref_text accepted, never sent
        sent = p.generation_inputs(0, codes)
        assert set(sent) == {"text", "ref_audio_tokens"}  # max_new_tokens, seed, knobs: the runtime's defaults
        assert np.array_equal(sent["ref_audio_tokens"], codes)
    knobs = {"do_sample": False, "text_temperature": 0.5, "text_top_p": 0.9, "text_top_k": 2,
             "audio_temperature": 1.1, "audio_top_p": 0.5, "audio_top_k": 0, "audio_repetition_penalty": 1.0}
    p = plan(dep, ref_audio=CLIP, seed=7, max_new_tokens=4096, extra_params=knobs)
    sent = p.generation_inputs(0, codes)
    assert set(sent) == {"text", "max_new_tokens", "seed", "ref_audio_tokens", *knobs}
    assert (int(scalar(sent, "seed")), int(scalar(sent, "max_new_tokens"))) == (7, 4096)
    assert sent["do_sample"].dtype == np.bool_ and not scalar(sent, "do_sample")
    for name, value in knobs.items():
        assert scalar(sent, name) == pytest.approx(value), name
    assert set(knobs) == set(spec.KNOB_DEFAULTS) == {k.name for k in spec.KNOBS}


def test_an_uploaded_voice_gives_its_codes(dep: Deployment) -> None:
    up = plan(dep, voice="mine")
    assert up.stored_voice is not None and up.needs_voice_features and up.ref_text is None
    assert np.array_equal(asyncio.run(ADAPTER.reference_features(up, FakeEnv())), UPLOAD_CODES)  # not again
    inline = plan(dep, voice="mine", ref_audio=CLIP)  # inline ref_audio overrides the voice
    assert inline.stored_voice is None and inline.ref_audio == CLIP


def FakeEnv() -> kit.EncoderEnv:
    return kit.EncoderEnv({"ref_audio_tokens": np.full((4, 16), 3, np.int32)}, spec.REF_AUDIO)


def test_reference_codes_come_from_the_encoder(dep: Deployment) -> None:
    env = FakeEnv()
    codes = asyncio.run(ADAPTER.reference_features(plan(dep, ref_audio=CLIP), env))
    assert codes.shape == (4, 16) and codes.dtype == np.int64
    (model, inputs), = env.backend.calls
    assert model == ENCODER and int(inputs["sample_rate"][0]) == 16000 and inputs["audio"].size == 8000


def test_an_encoder_refusal_names_ref_audio(dep: Deployment) -> None:
    env = kit.EncoderEnv(BackendError(INVALID_ARG, "reference audio must last 0.1-60 s"), spec.REF_AUDIO)
    with pytest.raises(InvalidRequest) as info:
        asyncio.run(ADAPTER.reference_features(plan(dep, ref_audio=CLIP), env))
    assert info.value.param == "ref_audio"


@pytest.mark.parametrize("fmt", ["wav", "pcm", "flac", "mp3", "aac", "opus"])
def test_whole_formats(dep: Deployment, fmt: str) -> None:
    assert plan(dep, ref_audio=CLIP, response_format=fmt).output.format == fmt  # 48 kHz is an Opus rate


def test_rates_and_speed(dep: Deployment) -> None:
    assert plan(dep, ref_audio=CLIP, sample_rate=16000).output.sample_rate == 16000  # the shared resampler
    assert plan(dep, ref_audio=CLIP, speed=1.5).output.speed == 1.5  # whole clips: the shared time-stretch


def _streamed(dep: Deployment, **fields: Any) -> Any:
    return plan(dep, ref_audio=CLIP, **fields)


test_streams = kit.streams_test(_streamed)


def test_no_reference_names_ref_audio(dep: Deployment) -> None:
    for fields in ({}, {"ref_text": "a transcript alone"}, {"voice": "default"}):
        err = fails(dep, **fields)
        assert err.param == "ref_audio" and "requires 'ref_audio'" in err.message, fields


def test_an_unknown_voice_is_named(dep: Deployment) -> None:
    for voice in ("vivian", "alloy", "nobody"):
        for fields in ({}, {"ref_audio": CLIP}):
            err = fails(dep, voice=voice, **fields)
            assert err.param == "voice" and f"'{voice}'" in err.message and "no built-in speakers" in err.message
    for voice, says in (("elsewhere", "precomputed with another MOSS-TTS-Nano codec"),
                        ("breeze", "is a precomputed Breeze-TTS-2 voice")):
        err = fails(dep, voice=voice)
        assert err.param == "voice" and says in err.message, err.message


def test_a_precomputed_voice_gives_its_codes(dep: Deployment) -> None:
    filed = plan(dep, voice="Filed", ref_text="ignored")
    assert filed.stored_voice is not None and filed.ref_text is None
    env = FakeEnv()
    assert np.array_equal(asyncio.run(ADAPTER.reference_features(filed, env)), FILED_CODES)
    assert env.backend.calls == []  # no encoder call
    sent = filed.generation_inputs(0, FILED_CODES)
    assert np.array_equal(sent["ref_audio_tokens"], FILED_CODES)
    inline = plan(dep, voice="filed", ref_audio=CLIP)  # inline ref_audio overrides it
    assert inline.stored_voice is None and inline.ref_audio == CLIP


def test_voice_files_checked_against_the_served_codec(tmp_path: Path) -> None:
    """A voice file's codes load for the checkpoints whose manifest codec.sha256 it records (either unknown:
    fits); bad codes are skipped."""
    from gateway.family_kit import CodecFacts, CodecTarget
    from gateway.voice_registry import precomputed_loaders
    from gateway.voices.precomputed import load_precomputed_voices
    from ttscore.contract.moss_tts_nano.voicefile import write_moss_tts_nano_profile

    raw = {"family": spec.FAMILY, "codec": {"sha256": "a" * 64}}
    facts = ADAPTER.manifest_facts(type("M", (), {"raw": raw})())  # type: ignore[arg-type]
    assert facts == CodecFacts(codec_sha256="a" * 64)
    assert ADAPTER.manifest_facts(type("M", (), {"raw": {}})()) == CodecFacts()  # type: ignore[arg-type]
    write_moss_tts_nano_profile(tmp_path, "Mine", ref_codes=FILED_CODES, checkpoint={"name": "ck",
                                                                                     "codec_sha256": "a" * 64})
    for targets, models in (([CodecTarget("nano", "a" * 64), CodecTarget("other", "b" * 64)], ("nano",)),
                            ([CodecTarget("nano", None)], ("nano",)), ([], None)):
        voices = load_precomputed_voices(tmp_path, precomputed_loaders({spec.FAMILY: {"targets": targets}}))
        v = voices["mine"]
        assert (v.model_type, v.models, v.ref_text) == (spec.FAMILY, models, None)
        np.testing.assert_array_equal(v.ref_codes, FILED_CODES)  # type: ignore[attr-defined]
    other = precomputed_loaders({spec.FAMILY: {"targets": [CodecTarget("nano", "b" * 64)]}})
    assert load_precomputed_voices(tmp_path, other) == {}
    for bad in (np.zeros((0, 16), np.int32), np.zeros((2, 8), np.int32), np.full((2, 16), 1024, np.int32)):
        with pytest.raises(Exception, match="ref_code"):
            ADAPTER.checked_codes(bad)


@pytest.mark.parametrize(("fields", "param"), [
    ({"input": "   "}, "input"),
    *kit.STREAM_LIMITS,
    ({"sample_rate": 1}, "sample_rate"),
    *kit.TOKEN_AND_SEED_BOUNDS,
    ({"extra_params": {"do_sample": 1}}, "extra_params"),
    ({"extra_params": {"do_sample": "false"}}, "extra_params"),
    ({"extra_params": {"text_temperature": 0}}, "extra_params"),
    ({"extra_params": {"audio_temperature": 10.5}}, "extra_params"),
    ({"extra_params": {"audio_temperature": "0.8"}}, "extra_params"),
    ({"extra_params": {"text_top_p": 0}}, "extra_params"),
    ({"extra_params": {"audio_top_p": 1.01}}, "extra_params"),
    ({"extra_params": {"audio_top_k": 1.5}}, "extra_params"),
    ({"extra_params": {"text_top_k": -1}}, "extra_params"),
    ({"extra_params": {"audio_top_k": True}}, "extra_params"),
    ({"extra_params": {"audio_repetition_penalty": 0}}, "extra_params"),
    ({"extra_params": {"temperature": 0.8}}, "extra_params"),
    ({"extra_params": {"repetition_penalty": 1.1}}, "extra_params"),
    *kit.STYLE_FIELDS,
    *kit.QWEN_MODE_FIELDS,
])
def test_refused_fields_name_the_field(dep: Deployment, fields: dict, param: str) -> None:
    assert fails(dep, **{"ref_audio": CLIP, **fields}).param == param


def test_an_unknown_knob_is_named_in_the_message(dep: Deployment) -> None:
    err = fails(dep, ref_audio=CLIP, extra_params={"temperature": 0.8})
    assert "'temperature'" in err.message and "audio_temperature" in err.message


def test_language_refused_so_none_listed(dep: Deployment) -> None:
    kit.assert_no_language_listed(dep, lambda d, **f: fails(d, ref_audio=CLIP, **f))
