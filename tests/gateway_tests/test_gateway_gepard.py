"""The Gepard-1.0 gateway adapter without Triton: the spec's Gepard table row by row (each refused
field or value a 400 naming it), and the tensors a plan sends (text, max_new_tokens, seed only)."""

from __future__ import annotations

from pathlib import Path

import gateway_plans as kit
import pytest

from gateway.errors import APIError
from gateway.families.gepard import ADAPTER
from gateway.planning import Deployment
from ttscore.contract import gepard as spec

pytestmark = pytest.mark.unit


@pytest.fixture
def dep(tmp_path: Path) -> Deployment:
    manifest = {"family": spec.FAMILY, "sample_rate": spec.SAMPLE_RATE, "samples_per_frame": spec.SAMPLES_PER_FRAME,
                "speakers": {"default": 0}}
    return kit.one_checkpoint(tmp_path, "gepard", manifest)


def plan(dep: Deployment, **fields):
    return kit.plan_for(dep, "gepard", **fields)


def fails(dep: Deployment, **fields) -> APIError:
    return kit.refusal(lambda: plan(dep, **fields))


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


test_streams = kit.streams_test(plan)


@pytest.mark.parametrize(("fields", "param"), [
    ({"input": "   "}, "input"),
    *kit.FOREIGN_VOICES,
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
    *kit.STYLE_FIELDS,
    ({"language": "Auto"}, "language"),
    *kit.QWEN_MODE_FIELDS,
])
def test_refused_fields_name_the_field(dep: Deployment, fields: dict, param: str) -> None:
    assert fails(dep, **fields).param == param


def test_no_voices_of_its_own() -> None:
    from gateway.voices.precomputed import SkipVoice

    with pytest.raises(SkipVoice, match="no precomputed voices"):
        ADAPTER.precomputed_voice(Path("."), "v", {"model_type": spec.FAMILY})
    assert spec.VOICES == ("default",)


def test_a_family_refusing_language_lists_no_language(dep: Deployment) -> None:
    # Gepard refuses `language` (400), so /v1/models must not advertise even "Auto" for it.
    kit.assert_no_language_listed(dep, fails)
