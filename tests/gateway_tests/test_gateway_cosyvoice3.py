"""The CosyVoice3 gateway adapter without Triton: `ref_audio` (or an uploaded voice) and `ref_text` (or the
upload's transcript) required, each a 400 naming the missing one; `voice` omitted/"default" only with a
reference; max_new_tokens 1..4096 and seed checked; `speed` whole clips only; unsupported fields 400 naming
them; the tensors a plan sends (the clip's three features from prompt_encoder or the upload) and how the
features are fetched."""

from __future__ import annotations

import asyncio
from pathlib import Path

import gateway_plans as kit
import numpy as np
import pytest

from gateway.backend import INVALID_ARG, BackendError
from gateway.errors import APIError
from gateway.families.cosyvoice3 import ADAPTER
from gateway.planning import Deployment, NoStoredVoices, StoredVoice
from ttscore.contract import cosyvoice3 as spec
from ttscore.contract.errors import InvalidRequest

pytestmark = pytest.mark.unit

REF = "data:audio/wav;base64,AAAA"
FEATURES = (np.arange(4, dtype=np.int64), np.ones((8, 80), np.float32), np.full(192, 0.5, np.float32))
asked: list[tuple[str, bool]] = []


async def _uploaded(model: str, prompt: bool):
    asked.append((model, prompt))
    return FEATURES


class Uploads(NoStoredVoices):
    def resolve_voice(self, name: str) -> StoredVoice | None:
        if name == "told":
            return StoredVoice(name="told", ref_text="stored transcript", model_features=_uploaded)
        if name == "plain":
            return StoredVoice(name="plain", model_features=_uploaded)
        if name == "precomputed":
            return StoredVoice(name="precomputed", family="omnivoice", precomputed=np.zeros((8, 3)))
        return None


@pytest.fixture
def dep(tmp_path: Path) -> Deployment:
    manifest = {"family": spec.FAMILY, "sample_rate": 24000, "samples_per_frame": 960}
    return kit.one_checkpoint(tmp_path, "cosy", manifest, spec.ENCODER_MODEL, Uploads())


def plan(dep: Deployment, **fields):
    fields.setdefault("ref_audio", REF)
    fields.setdefault("ref_text", "a transcript")
    return kit.plan_for(dep, "cosy", **fields)


def fails(dep: Deployment, **fields) -> APIError:
    return kit.refusal(lambda: plan(dep, **fields))


def test_defaults_and_the_tensors_sent(dep: Deployment) -> None:
    assert ADAPTER.clones_voices and not ADAPTER.routes_by_task and not ADAPTER.caches_voice_features
    p = plan(dep)
    assert (p.output.format, p.output.sample_rate, p.output.stream, p.output.speed) == ("wav", 24000, None, 1.0)
    assert p.needs_voice_features and p.ref_audio == REF and p.stored_voice is None
    sent = p.generation_inputs(0, FEATURES)
    assert set(sent) == {"text", "ref_text", "prompt_speech_tokens", "prompt_mel", "prompt_embedding", "seed"}
    assert p.seed_drawn  # no seed: random, as vLLM-Omni; the gateway's draw makes it replayable (X-Seed)
    assert sent["ref_text"].reshape(-1)[0] == b"a transcript"
    np.testing.assert_array_equal(sent["prompt_speech_tokens"], FEATURES[0])
    assert sent["prompt_mel"].shape == (8, 80) and sent["prompt_embedding"].shape == (192,)
    p = plan(dep, voice="default", seed=7, max_new_tokens=4096)
    sent = p.generation_inputs(0, FEATURES)
    assert (int(sent["seed"].reshape(-1)[0]), int(sent["max_new_tokens"].reshape(-1)[0])) == (7, 4096)
    # extra_params: the RAS sampling of this request, as vLLM-Omni applies them
    p = plan(dep, extra_params={"temperature": 0, "top_k": 5, "top_p": 0.5})
    sent = p.generation_inputs(0, FEATURES)
    assert (float(sent["temperature"][0]), int(sent["top_k"][0]), float(sent["top_p"][0])) == (0.0, 5, 0.5)


def test_speed_formats_and_streams(dep: Deployment) -> None:
    assert plan(dep, speed=1.5).output.speed == 1.5  # whole clips: the shared time-stretch
    for fmt in ("wav", "pcm", "flac", "mp3", "opus"):
        assert plan(dep, response_format=fmt).output.format == fmt
    assert plan(dep, stream_format="audio", response_format="pcm").output.stream == "audio"
    assert plan(dep, stream_format="sse", response_format="pcm").output.stream == "sse"


def test_an_uploaded_voice_gives_its_features_and_transcript(dep: Deployment) -> None:
    p = plan(dep, voice="told", ref_audio=None, ref_text=None)
    assert p.stored_voice is not None and p.ref_text == "stored transcript"
    asked.clear()
    got = asyncio.run(ADAPTER.reference_features(p, None))  # an upload needs no request env
    assert got is FEATURES and asked == [(spec.ENCODER_MODEL, True)]  # the mode of an upload with a transcript
    asked.clear()
    asyncio.run(ADAPTER.reference_features(plan(dep, voice="plain", ref_audio=None), None))
    assert asked == [(spec.ENCODER_MODEL, False)]
    assert plan(dep, voice="told", ref_audio=None).ref_text == "a transcript"  # the request's wins
    assert plan(dep, voice="plain", ref_audio=None).ref_text == "a transcript"
    p = plan(dep, voice="told")  # inline ref_audio overrides the upload
    assert p.stored_voice is None and p.ref_audio == REF


@pytest.mark.parametrize(("fields", "param", "words"), [
    ({"ref_audio": None}, "ref_audio", "requires 'ref_audio'"),
    ({"ref_audio": None, "ref_text": None}, "ref_audio", "requires 'ref_audio'"),
    ({"ref_text": None}, "ref_text", "requires 'ref_text'"),
    ({"ref_text": "  "}, "ref_text", "requires 'ref_text'"),
    ({"voice": "plain", "ref_audio": None, "ref_text": None}, "ref_text", "requires 'ref_text'"),
    ({"voice": "default", "ref_audio": None}, "ref_audio", "requires 'ref_audio'"),
])
def test_a_missing_reference_or_transcript_is_named(dep: Deployment, fields: dict, param: str, words: str) -> None:
    err = fails(dep, **fields)
    assert err.param == param and words in err.message


@pytest.mark.parametrize(("fields", "param"), [
    ({"input": "   "}, "input"),
    ({"voice": "vivian"}, "voice"),
    ({"voice": "nobody"}, "voice"),
    ({"voice": "precomputed", "ref_audio": None}, "voice"),  # another family's voice file
    ({"stream_format": "sse", "speed": 1.5}, "speed"),
    ({"speed": 5.0}, "speed"),
    *kit.TOKEN_AND_SEED_BOUNDS,
    ({"extra_params": {"temperature": -0.5}}, "extra_params"),
    ({"extra_params": {"top_p": 0}}, "extra_params"),
    ({"extra_params": {"top_k": 2.5}}, "extra_params"),
    ({"extra_params": {"repetition_penalty": 1.1}}, "extra_params"),
    *kit.STYLE_FIELDS,
    *kit.QWEN_MODE_FIELDS,
])
def test_refused_fields_name_the_field(dep: Deployment, fields: dict, param: str) -> None:
    assert fails(dep, **fields).param == param


class FakeBackend:
    def __init__(self, fail: bool = False) -> None:
        self.fail, self.calls = fail, []

    async def infer(self, model, inputs, request_id):
        self.calls.append((model, inputs))
        if self.fail:
            raise BackendError(INVALID_ARG, "'ref_audio' is too short", "ref_audio")
        return {"prompt_speech_tokens": FEATURES[0], "prompt_mel": FEATURES[1], "prompt_embedding": FEATURES[2]}


def test_clip_features_through_prompt_encoder() -> None:
    backend = FakeBackend()
    got = asyncio.run(ADAPTER.clip_features(backend, "prompt_encoder", np.zeros(100, np.float64), 16000, False, "r"))
    assert [g.dtype for g in got] == [np.int64, np.float32, np.float32]
    model, inputs = backend.calls[0]
    assert model == "prompt_encoder" and inputs["audio"].dtype == np.float32 and inputs["sample_rate"].tolist() == [16000]
    with pytest.raises(InvalidRequest) as err:
        asyncio.run(ADAPTER.clip_features(FakeBackend(True), "prompt_encoder", np.zeros(10), 16000, False, "r"))
    assert err.value.param == "ref_audio"


def test_request_from_tensors_builds_the_clip_and_names_a_missing_feature() -> None:
    from ttscore.contract import tensors as triton_io
    from ttscore.runtime.families import FAMILIES

    to_request = FAMILIES[spec.FAMILY].request_from_tensors
    tokens, mel, emb = FEATURES
    req = to_request(triton_io.request_tensors(text="hi", ref_text="t", seed=3, prompt_speech_tokens=tokens,
                                               prompt_mel=mel, prompt_embedding=emb))
    assert (req.text, req.ref_text, req.seed, req.ref_audio) == ("hi", "t", 3, None)
    np.testing.assert_array_equal(req.clip.speech_tokens, tokens)
    assert req.clip.feat.shape == (8, 80)
    assert to_request(triton_io.request_tensors(text="hi")).clip is None
    with pytest.raises(InvalidRequest) as err:
        to_request(triton_io.request_tensors(text="hi", prompt_speech_tokens=tokens, prompt_mel=mel))
    assert err.value.param == "prompt_embedding"
    with pytest.raises(InvalidRequest) as err:
        to_request(triton_io.request_tensors(text="hi", prompt_speech_tokens=tokens, prompt_mel=mel[:6],
                                             prompt_embedding=emb))
    assert err.value.param == "prompt_mel"


def test_no_precomputed_voices() -> None:
    from gateway.voices.precomputed import SkipVoice

    with pytest.raises(SkipVoice, match="no precomputed voice"):
        ADAPTER.precomputed_voice(Path("."), "v", {"model_type": spec.FAMILY})


def test_language_refused_so_none_listed(dep: Deployment) -> None:
    kit.assert_no_language_listed(dep, fails)
