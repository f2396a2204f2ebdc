"""Voxtral TTS through the whole stack, served next to the other families in the session's shared
deployment (tests/e2e_fixtures.py): /v1/models and /v1/audio/voices list its preset voices; for two
preset voices (one given in upper case) its audio through the raw stream, SSE and the whole file, and
through the openai SDK, equals the offline engine's with the same seed (the same number of frames, the
samples within one 16-bit step); `seed` reaches the flow-matching noise and `extra_params.cfg_alpha`
the guidance; `speed` applies to whole clips only; every refused field is a 400 naming it (cloning
fields with the no-encoder reason) and the next request succeeds.

A Voxtral TTS the project did not create (tests/voxtral_tts_foreign.py, in the same deployment): the
reference (tests/voxtral_tts_reference.py: vLLM-Omni 0.30.0's modules around MistralModel) fed the
flow-matching noise our runtime draws for the request's seed makes codes whose decode by the reference's
codec equals the audio of /v1/audio/speech with that seed, whole, raw stream and SSE (within the offline
tolerance 1e-4 plus one 16-bit step), for its two preset voices (one request ends on [END_AUDIO], the
other runs to its budget with another cfg_alpha).
"""

from __future__ import annotations

import numpy as np
import openai
import pytest
from e2e_speech import SPEECH, same_audio, three_ways, wav_at
from gateway_fixtures import start_gateway
from voxtral_tts_fixtures import reference_with_our_noise

from gateway import encoding
from gateway.settings import Settings
from ttscore.backend.triton_server import free_port
from ttscore.contract import tensors as triton_io
from ttscore.contract import voxtral_tts as spec
from ttscore.runtime.engine import Generator
from ttscore.runtime.families import FAMILIES

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TEXT = "Hello, this is Voxtral speaking."
FRAMES = 8
SEED = 7
RATE = 24000
SAMPLES_PER_FRAME = 1920
VOICES = ["casual_male", "neutral_female"]
# The foreign checkpoint's requests: (text, voice, seed, max_new_tokens, cfg_alpha); the first ends on
# [END_AUDIO] before its budget.
FOREIGN_CASES = (("Ahlan wa sahlan", "ar_male", 21, 12, spec.DEFAULT_CFG_ALPHA),
                 ("Bonjour à tous", "fr_female", 23, 10, 2.0))
AUDIO_ATOL = 1e-4  # the stated tolerance of the engine's audio against the reference's (float)


@pytest.fixture(scope="module")
def stack(e2e_triton, tmp_path_factory):
    cfg = {**e2e_triton["config"], "speaker_samples_dir": str(tmp_path_factory.mktemp("voxtral-speakers")),
           "health_interval_s": 0}
    port = free_port()
    gw, thread = start_gateway(Settings.from_dict(cfg), port)
    yield {"url": f"http://127.0.0.1:{port}", "names": e2e_triton["names"],
           "voxtral": e2e_triton["names"]["voxtral_tts"], "model": e2e_triton["pipelines"]["voxtral_tts"]}
    gw.should_exit = True
    thread.join(15)


def offline(stack, voice: str, seed: int = SEED, cfg_alpha: float | None = None) -> tuple[np.ndarray, int]:
    """The offline engine with the tensors the gateway sends: (audio, frames made)."""
    fields = {"text": TEXT, "voice": voice.lower(), "max_new_tokens": FRAMES, "seed": seed, "cfg_alpha": cfg_alpha}
    request = FAMILIES[spec.FAMILY].request_from_tensors(triton_io.request_tensors(**fields))
    events = list(Generator(stack["model"], max_batch=1, chunk_policy="fixed").synthesize(request))
    made = sum(e.frames for e in events)
    assert 1 <= made <= FRAMES
    return np.concatenate([e.pcm for e in events]), made


def body(stack, voice: str = VOICES[0], **kw):
    return {"input": TEXT, "model": stack["voxtral"], "voice": voice, "max_new_tokens": FRAMES, "seed": SEED, **kw}


def wav_of(r) -> np.ndarray:
    return wav_at(r, RATE)


def assert_same_audio(got_int16: np.ndarray, want_float: np.ndarray, frames: int) -> None:
    same_audio(got_int16, want_float, frames * SAMPLES_PER_FRAME)


def test_models_and_voices_list_its_presets(http, stack):
    cards = {m["id"]: m for m in http.get("/v1/models").json()["data"]}
    card = cards[stack["voxtral"]]
    assert (card["family"], card["sample_rate"], card["voices"]) == (spec.FAMILY, RATE, VOICES)
    voices = http.get("/v1/audio/voices").json()
    assert set(VOICES) <= set(voices["voices"]) and "vivian" in voices["voices"]


@pytest.mark.parametrize("voice", [VOICES[0], VOICES[1].upper()])
def test_whole_file_raw_stream_and_sse_equal_the_offline_engine(http, stack, voice):
    want, frames = offline(stack, voice)
    got, counted = three_ways(http, body(stack, voice))
    assert counted == frames
    for samples in got:
        assert_same_audio(samples, want, frames)
    assert all(np.array_equal(got[0], g) for g in got[1:])  # streamed == whole (exact streaming vocoder)


def test_the_voices_differ(http, stack):
    a, b = (wav_of(http.post(SPEECH, json=body(stack, v))) for v in VOICES)
    assert a.shape != b.shape or not np.array_equal(a, b)


def test_seed_reaches_the_noise_and_cfg_alpha_the_guidance(http, stack):
    first = wav_of(http.post(SPEECH, json=body(stack)))
    assert np.array_equal(first, wav_of(http.post(SPEECH, json=body(stack))))  # same request and seed twice
    other = wav_of(http.post(SPEECH, json=body(stack, seed=SEED + 1)))
    assert other.shape != first.shape or not np.array_equal(first, other)
    want, frames = offline(stack, VOICES[0], seed=SEED + 1)
    assert_same_audio(other, want, frames)
    unseeded = {k: v for k, v in body(stack).items() if k != "seed"}
    # No seed: random, as vLLM-Omni 0.30.0 (x0 from torch's global RNG); the gateway draws one, says which
    # (X-Seed) and that one gives the same audio again.
    drawn, again = http.post(SPEECH, json=unseeded), http.post(SPEECH, json=unseeded)
    seeds = int(drawn.headers["x-seed"]), int(again.headers["x-seed"])
    assert seeds[0] != seeds[1]
    want, frames = offline(stack, VOICES[0], seed=seeds[0])
    assert_same_audio(wav_of(drawn), want, frames)
    want, frames = offline(stack, VOICES[0], cfg_alpha=2.5)
    assert_same_audio(wav_of(http.post(SPEECH, json=body(stack, extra_params={"cfg_alpha": 2.5}))), want, frames)


def test_whole_file_formats_rate_and_speed(http, stack):
    for fmt in ("flac", "mp3", "pcm", "opus"):
        r = http.post(SPEECH, json=body(stack, response_format=fmt))
        assert r.status_code == 200 and r.headers["content-type"] == encoding.MEDIA_TYPES[fmt], r.text
        assert r.content
    rate, _ = encoding.parse_wav(http.post(SPEECH, json=body(stack, sample_rate=16000)).content)
    assert rate == 16000
    normal = wav_of(http.post(SPEECH, json=body(stack)))
    fast = wav_of(http.post(SPEECH, json=body(stack, speed=2.0)))  # whole clips: time-stretched
    assert 0 < fast.size < normal.size


def test_openai_sdk_with_a_preset_voice(stack):
    client = openai.OpenAI(base_url=stack["url"] + "/v1", api_key="none", max_retries=0, timeout=300)
    for voice in VOICES:
        want, frames = offline(stack, voice)
        r = client.audio.speech.create(model=stack["voxtral"], voice=voice, input=TEXT, response_format="wav",
                                       extra_body={"max_new_tokens": FRAMES, "seed": SEED})
        rate, samples = encoding.parse_wav(r.content)
        assert rate == RATE
        assert_same_audio(samples, want, frames)
    want, frames = offline(stack, VOICES[1])
    with client.audio.speech.with_streaming_response.create(
            model=stack["voxtral"], voice=VOICES[1], input=TEXT, response_format="pcm",
            extra_body={"stream_format": "audio", "max_new_tokens": FRAMES, "seed": SEED}) as r:
        pcm = b"".join(r.iter_bytes())
    assert_same_audio(np.frombuffer(pcm, "<i2"), want, frames)


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"input": "   "}, "input"),
        ({"voice": None}, "voice"),  # required
        ({"voice": "vivian"}, "voice"),  # another family's preset
        ({"voice": "alloy"}, "voice"),
        ({"voice": "default"}, "voice"),
        ({"response_format": "mp3", "stream_format": "audio"}, "response_format"),  # streams: pcm/wav only
        ({"speed": 1.5, "stream": True, "response_format": "pcm"}, "speed"),  # speed: whole clips only
        ({"sample_rate": 44100, "response_format": "opus"}, "sample_rate"),
        ({"max_new_tokens": 0}, "max_new_tokens"),  # 1..4096
        ({"max_new_tokens": 4097}, "max_new_tokens"),
        ({"seed": -1}, "seed"),
        ({"extra_params": {"cfg_alpha": 11.0}}, "extra_params"),  # 0..10
        ({"extra_params": {"temperature": 0.7}}, "extra_params"),  # cfg_alpha only
        ({"ref_audio": "data:audio/wav;base64,AAAA"}, "ref_audio"),  # no codec encoder
        ({"ref_text": "A transcript."}, "ref_text"),
        ({"speaker_embedding": [0.0, 1.0]}, "speaker_embedding"),
        ({"instructions": "A calm voice."}, "instructions"),
        ({"language": "English"}, "language"),
        ({"task_type": "Base"}, "task_type"),
        ({"x_vector_only_mode": True}, "x_vector_only_mode"),
        ({"non_streaming_mode": False}, "non_streaming_mode"),
        ({"initial_codec_chunk_frames": 4}, "initial_codec_chunk_frames"),
        ({"word_timestamps": True}, "word_timestamps"),
    ],
)
def test_refused_field_is_a_400_naming_it(http, stack, extra, param):
    payload = {k: v for k, v in body(stack, **extra).items() if v is not None}
    r = http.post(SPEECH, json=payload)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.json()
    if param in ("ref_audio", "ref_text"):
        assert "no codec encoder" in r.json()["error"]["message"]


def test_the_next_request_after_a_refusal_is_served(http, stack):
    """The matrix above runs on this server without a generation after each 400; this is its
    end-to-end half: a refusal, then a request served."""
    r = http.post(SPEECH, json=body(stack, max_new_tokens=0))
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "max_new_tokens", r.json()
    assert wav_of(http.post(SPEECH, json=body(stack))).size


@pytest.fixture(scope="module")
def foreign_reference(e2e_triton) -> dict:
    """The reference's codes, [END_AUDIO] flags and audio per FOREIGN_CASES, each made with the noise our
    runtime draws for its seed."""
    cases = [{"text": t, "voice": v, "seed": s, "max_new_tokens": n, "cfg_alpha": a}
             for t, v, s, n, a in FOREIGN_CASES]
    return reference_with_our_noise(e2e_triton["checkpoints"]["voxtral_tts_foreign"],
                                    e2e_triton["pipelines"]["voxtral_tts_foreign"], cases)


@pytest.mark.parametrize("case", range(len(FOREIGN_CASES)))
def test_foreign_checkpoint_through_the_api_equals_the_reference(http, stack, foreign_reference, case):
    name = stack["names"]["voxtral_tts_foreign"]
    card = {m["id"]: m for m in http.get("/v1/models").json()["data"]}[name]
    assert (card["family"], card["sample_rate"], card["voices"]) == (spec.FAMILY, RATE, ["ar_male", "fr_female"])
    text, voice, seed, frames, alpha = FOREIGN_CASES[case]
    codes, want = foreign_reference[f"codes_{case}"], foreign_reference[f"audio_{case}"]
    assert bool(foreign_reference[f"stopped_{case}"]) == (case == 0) and 1 < len(codes) <= frames
    assert want.size == len(codes) * SAMPLES_PER_FRAME and np.abs(encoding.to_int16(want)).max() > 10  # not silence
    payload = {"input": text, "model": name, "voice": voice, "max_new_tokens": frames, "seed": seed}
    if alpha != spec.DEFAULT_CFG_ALPHA:
        payload["extra_params"] = {"cfg_alpha": alpha}
    got, counted = three_ways(http, payload)
    assert counted == len(codes)
    for samples in got:
        assert samples.shape == want.shape
        # int16 floors the served float: within one 16-bit step of it, which is within AUDIO_ATOL of want
        assert np.max(np.abs(samples / 32768.0 - want)) <= AUDIO_ATOL + 1 / 32768
    assert all(np.array_equal(got[0], g) for g in got[1:])
