"""The Breeze-TTS-2 gateway adapter without Triton: the four modes from the fields, the 400s naming
the field, stored voices (uploaded: the codes computed at upload through the checkpoint's encoder;
precomputed: a voice file checked against the served codecs), and the tensors each plan sends."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from gateway import refaudio
from gateway.checkpoints import ServedCheckpoint, from_manifest
from gateway.errors import APIError
from gateway.families.breeze_tts_2 import ADAPTER
from gateway.family_kit import CodecTarget
from gateway.planning import Deployment, SpeechFields, StoredVoice, plan_speech
from gateway.settings import CheckpointSettings, SettingsError
from gateway.voices.precomputed import SkipVoice
from ttscore.contract import breeze_tts_2 as spec
from ttscore.contract import tensors as triton_io
from ttscore.contract.breeze_tts_2.voicefile import write_breeze_tts_2_profile
from ttscore.contract.manifest import Manifest
from ttscore.contract.voicefile import MANIFEST_NAME

pytestmark = pytest.mark.unit

CODES = (np.arange(5 * 16).reshape(5, 16) % 2048).astype(np.int64)


def checkpoint(tmp_path: Path, name: str, sha: str | None = "aa", encoder: str | None = "enc") -> ServedCheckpoint:
    files = {"audio_tokenizer/model.safetensors": {"sha256": sha}} if sha else {}
    raw = {"format_version": 1, "family": spec.FAMILY, "variant": "base", "sample_rate": 24000,
           "samples_per_frame": 1920, "source": {"files": files}}
    settings = CheckpointSettings(name, "base", f"speech_generation_{name}", tmp_path, encoder)
    return from_manifest(settings, Manifest.parse(tmp_path, raw))


class Voices:
    def __init__(self, **voices: StoredVoice) -> None:
        self.voices = voices

    def resolve_voice(self, name: str) -> StoredVoice | None:
        return self.voices.get(name.strip().lower())

    def uploaded_voices(self) -> list:
        return []


def wav_url(seconds: float = 1.0, rate: int = 16000) -> str:
    buf = io.BytesIO()
    sf.write(buf, (0.1 * np.sin(np.arange(int(seconds * rate)) / 5)).astype(np.float32), rate, format="WAV")
    return refaudio.data_url(buf.getvalue())


@pytest.fixture
def dep(tmp_path: Path) -> Deployment:
    async def uploaded(model: str, prompt: bool) -> np.ndarray:
        assert (model, prompt) == ("enc", True)  # the upload's features were computed with its transcript
        return CODES

    voices = Voices(told=StoredVoice("told", ref_text="Its transcript.", model_features=uploaded),
                    untold=StoredVoice("untold", model_features=uploaded),
                    pre=StoredVoice("pre", ref_text="Stored.", family=spec.FAMILY, models=("breeze",),
                                    precomputed=CODES),
                    qwen=StoredVoice("qwen", ref_text="x", family="qwen3_tts", precomputed=(np.zeros(4), None)),
                    other=StoredVoice("other", ref_text="x", family=spec.FAMILY, models=("elsewhere",),
                                      precomputed=CODES))
    return Deployment([checkpoint(tmp_path, "breeze")], voices)


def plan(dep: Deployment, **fields):
    return plan_speech(SpeechFields(model="breeze", input=fields.pop("input", "Hello."), **fields), dep)


def fails(dep: Deployment, **fields) -> str | None:
    with pytest.raises(APIError) as info:
        plan(dep, **fields)
    assert info.value.status == 400, info.value.message
    return info.value.param


def test_a_served_checkpoint_needs_its_speech_encoder(tmp_path: Path) -> None:
    assert ADAPTER.clones_voices and not ADAPTER.caches_voice_features
    with pytest.raises(SettingsError, match="voice_features_model"):
        checkpoint(tmp_path, "breeze", encoder=None)


def test_the_four_modes_from_the_fields(dep: Deployment) -> None:
    plain = plan(dep, voice="s3")
    assert (plain.speaker, plain.ref_audio, plain.ref_text) == ("S3", None, None)
    assert not ADAPTER.needs_reference(plain)
    design = plan(dep, instructions="Calm.")
    assert design.instructions == "Calm." and not ADAPTER.needs_reference(design)
    url = wav_url()
    clone = plan(dep, ref_audio=url, ref_text=" The transcript. ", voice="S2")
    # The transcript as given: vLLM-Omni's adapter builds "[S2] The transcript. " from it (no strip).
    assert (clone.speaker, clone.ref_audio, clone.ref_text, clone.instructions) == ("S2", url, " The transcript. ", None)
    assert ADAPTER.needs_reference(clone)
    direction = plan(dep, ref_audio=url, ref_text="T.", instructions="Slowly.")
    assert ADAPTER.needs_reference(direction) and direction.instructions == "Slowly."
    tensors = ADAPTER.generation_inputs(direction, 0, CODES)
    kw = triton_io.request_kwargs(tensors, spec.FAMILY)
    assert kw["ref_text"] == "T." and kw["instructions"] == "Slowly." and kw["speaker"] == "S0"
    np.testing.assert_array_equal(kw["ref_codes"], CODES)
    assert "ref_codes" not in ADAPTER.generation_inputs(plain, 0, None)


@pytest.mark.parametrize(("fields", "param"), [
    ({"ref_text": "no audio"}, "ref_text"),
    ({"ref_audio": "REF"}, "ref_text"),
    ({"ref_audio": "REF", "ref_text": "   "}, "ref_text"),
    ({"voice": "untold"}, "ref_text"),
    ({"voice": "nobody"}, "voice"),
    ({"voice": "qwen"}, "voice"),
    ({"voice": "other"}, "voice"),
    ({"language": "English"}, "language"),
    ({"x_vector_only_mode": True, "ref_audio": "REF", "ref_text": "t"}, "x_vector_only_mode"),
    ({"sample_rate": 16000}, "sample_rate"),
    ({"speed": 2.0}, "speed"),
    ({"task_type": "Clone"}, "task_type"),
    ({"extra_params": {"guidance_scale": 2.0}}, "extra_params"),
    ({"extra_params": {"cfg_scale": 0.5}}, "extra_params"),
    ({"extra_params": {"guidance_scale": True}}, "extra_params"),
    ({"extra_params": {"guidance_scale": "1.0"}}, "extra_params"),
    ({"extra_params": {"temperature": 0.0}}, "extra_params"),
    ({"extra_params": {"top_k": 1}}, "extra_params"),
    ({"extra_params": {"negative_prompt": "noise"}}, "extra_params"),
])
def test_refused_fields_are_400s_naming_them(dep: Deployment, fields: dict, param: str) -> None:
    fields = {k: wav_url() if v == "REF" else v for k, v in fields.items()}
    assert fails(dep, **fields) == param


def test_guidance_at_one_is_greedy_decoding_and_accepted(dep: Deployment) -> None:
    plain = plan(dep, voice="S1")
    given = plan(dep, voice="S1", extra_params={"guidance_scale": 1.0, "cfg_scale": 1})
    assert ADAPTER.generation_inputs(given, 0, None).keys() == ADAPTER.generation_inputs(plain, 0, None).keys()
    assert (given.speaker, given.ref_audio, given.instructions) == (plain.speaker, plain.ref_audio, plain.instructions)


def test_stored_voices_are_the_reference(dep: Deployment) -> None:
    told = plan(dep, voice="told")
    assert told.stored_voice is not None and told.ref_text == "Its transcript." and told.speaker == "S0"
    untold = plan(dep, voice="untold", ref_text="Given now.")
    assert untold.ref_text == "Given now."
    pre = plan(dep, voice="pre", instructions="Warm.")
    assert pre.ref_text == "Stored." and ADAPTER.needs_reference(pre)
    inline = plan(dep, voice="told", ref_audio=wav_url(), ref_text="Inline.")
    assert inline.stored_voice is None and inline.ref_text == "Inline."  # ref_audio overrides a stored voice

    import asyncio

    async def features(p):
        return await ADAPTER.reference_features(p, None)  # type: ignore[arg-type]  # stored: no env needed

    np.testing.assert_array_equal(asyncio.run(features(pre)), CODES)
    np.testing.assert_array_equal(asyncio.run(features(told)), CODES)


def test_precomputed_voice_file_round_trip(tmp_path: Path) -> None:
    import json

    entry = write_breeze_tts_2_profile(tmp_path, "Pre", ref_codes=CODES, ref_text=" Hello there. ",
                                       checkpoint={"name": "ck", "audio_tokenizer_sha256": "aa"},
                                       speaker_description="calm")
    assert entry["model_type"] == spec.FAMILY and entry["ref_code_length"] == 5
    raw = json.loads((tmp_path / MANIFEST_NAME).read_text())["voices"]["Pre"]
    targets = [CodecTarget("a", "aa"), CodecTarget("b", "bb"), CodecTarget("c", None)]
    voice = ADAPTER.precomputed_voice(tmp_path.resolve(), "Pre", raw, targets=targets)
    assert voice.models == ("a", "c") and voice.ref_text == "Hello there." and voice.speaker_description == "calm"
    stored = ADAPTER.stored_voice(voice)
    np.testing.assert_array_equal(stored.precomputed, CODES)
    assert stored.family == spec.FAMILY and stored.ref_text == "Hello there."
    with pytest.raises(SkipVoice, match="codec"):
        ADAPTER.precomputed_voice(tmp_path.resolve(), "Pre", raw, targets=[CodecTarget("b", "bb")])
    with pytest.raises(SkipVoice, match="ref_text"):
        ADAPTER.precomputed_voice(tmp_path.resolve(), "Pre", {**raw, "ref_text": " "})
    from ttscore.contract.errors import InvalidRequest

    with pytest.raises(InvalidRequest) as info:
        write_breeze_tts_2_profile(tmp_path, "x", ref_codes=CODES, ref_text=None)
    assert info.value.param == "ref_text"
    with pytest.raises(InvalidRequest):
        write_breeze_tts_2_profile(tmp_path, "x", ref_codes=CODES + 2048, ref_text="t")


def test_precomputed_checks_read_each_checkpoints_codec(tmp_path: Path) -> None:
    a, b = checkpoint(tmp_path, "a", "aa"), checkpoint(tmp_path, "b", None)
    assert ADAPTER.precomputed_checks([a, b]) == {"targets": [CodecTarget("a", "aa"), CodecTarget("b", None)]}


def test_auto_language_accepted_and_listed(dep: Deployment) -> None:
    # "Auto" (the spec's default) is accepted, so /v1/models lists it; any other language is a 400.
    assert "auto" in dep.checkpoints[0].languages
    plan(dep, language="Auto")
    assert fails(dep, language="English") == "language"
