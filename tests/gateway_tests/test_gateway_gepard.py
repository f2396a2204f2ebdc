"""The Gepard-1.0 gateway adapter without Triton: the spec's Gepard table row by row (each refused
field or value a 400 naming it), and the tensors a plan sends (text, max_new_tokens, seed only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.checkpoints import from_manifest
from gateway.errors import APIError
from gateway.families.gepard import ADAPTER
from gateway.planning import Deployment, NoStoredVoices, SpeechFields, plan_speech
from gateway.settings import CheckpointSettings
from ttscore.contract import gepard as spec

pytestmark = pytest.mark.unit


@pytest.fixture
def dep(tmp_path: Path) -> Deployment:
    raw = {"format_version": 1, "family": spec.FAMILY, "variant": "base", "sample_rate": spec.SAMPLE_RATE,
           "samples_per_frame": spec.SAMPLES_PER_FRAME, "speakers": {"default": 0}}
    from ttscore.contract.manifest import Manifest

    settings = CheckpointSettings("gepard", "base", "speech_generation_gepard", tmp_path, None)
    return Deployment([from_manifest(settings, Manifest.parse(tmp_path, raw))], NoStoredVoices())


def plan(dep: Deployment, **fields):
    return plan_speech(SpeechFields(model="gepard", input=fields.pop("input", "Hello."), **fields), dep)


def fails(dep: Deployment, **fields) -> str | None:
    with pytest.raises(APIError) as info:
        plan(dep, **fields)
    assert info.value.status == 400, info.value.message
    return info.value.param


def test_defaults_and_the_tensors_sent(dep: Deployment) -> None:
    assert not ADAPTER.clones_voices and not ADAPTER.routes_by_task
    p = plan(dep)
    assert (p.output.format, p.output.sample_rate, p.output.stream) == ("wav", spec.SAMPLE_RATE, None)
    assert not p.needs_voice_features
    sent = p.generation_inputs(0, None)
    assert set(sent) == {"text"}  # max_new_tokens and seed: the runtime's defaults (1000, 42)
    p = plan(dep, voice="default", seed=7, max_new_tokens=4096, speed=1.0, sample_rate=22050)
    sent = p.generation_inputs(0, None)
    assert set(sent) == {"text", "max_new_tokens", "seed"}
    assert (int(sent["seed"].reshape(-1)[0]), int(sent["max_new_tokens"].reshape(-1)[0])) == (7, 4096)


@pytest.mark.parametrize("fmt", ["wav", "pcm", "flac", "mp3"])
def test_whole_formats(dep: Deployment, fmt: str) -> None:
    assert plan(dep, response_format=fmt).output.format == fmt


@pytest.mark.parametrize(("stream", "fmt"), [("sse", "pcm"), ("sse", "wav"), ("audio", "pcm"), ("audio", "wav")])
def test_streams(dep: Deployment, stream: str, fmt: str) -> None:
    assert plan(dep, stream_format=stream, response_format=fmt).output.stream == stream


@pytest.mark.parametrize(("fields", "param"), [
    ({"input": "   "}, "input"),
    ({"voice": "vivian"}, "voice"),
    ({"voice": "alloy"}, "voice"),
    ({"voice": "Default "}, "voice"),
    ({"response_format": "opus"}, "response_format"),
    ({"response_format": "aac"}, "response_format"),
    ({"stream_format": "audio", "response_format": "mp3"}, "response_format"),
    ({"stream_format": "sse", "response_format": "flac"}, "response_format"),
    ({"speed": 1.5}, "speed"),
    ({"max_new_tokens": 0}, "max_new_tokens"),
    ({"max_new_tokens": 4097}, "max_new_tokens"),
    ({"sample_rate": 24000}, "sample_rate"),
    ({"ref_audio": "data:audio/wav;base64,AAAA"}, "ref_audio"),
    ({"ref_text": "x"}, "ref_text"),
    ({"instructions": "calm"}, "instructions"),
    ({"language": "English"}, "language"),
    ({"language": "Auto"}, "language"),
    ({"task_type": "Base"}, "task_type"),
    ({"x_vector_only_mode": False}, "x_vector_only_mode"),
    ({"non_streaming_mode": True}, "non_streaming_mode"),
    ({"initial_codec_chunk_frames": 4}, "initial_codec_chunk_frames"),
])
def test_refused_fields_name_the_field(dep: Deployment, fields: dict, param: str) -> None:
    assert fails(dep, **fields) == param


def test_no_voices_of_its_own() -> None:
    from gateway.voices.precomputed import SkipVoice

    with pytest.raises(SkipVoice, match="no precomputed voices"):
        ADAPTER.precomputed_voice(Path("."), "v", {"model_type": spec.FAMILY})
    assert spec.VOICES == ("default",)


def test_a_family_refusing_language_lists_no_language(dep: Deployment) -> None:
    # Gepard refuses `language` (400), so /v1/models must not advertise even "Auto" for it.
    assert dep.checkpoints[0].languages == ()
    assert fails(dep, language="Auto") == "language"
