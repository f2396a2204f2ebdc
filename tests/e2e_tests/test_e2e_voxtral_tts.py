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

import e2e_speech as e2e
import numpy as np
import pytest
from e2e_speech import SPEECH, same_audio, wav_at
from voxtral_tts_fixtures import reference_with_our_noise

from gateway import encoding
from ttscore.contract import voxtral_tts as spec

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
    with e2e.family_stack(e2e_triton, tmp_path_factory, "voxtral_tts", "voxtral") as stack:
        yield stack


def offline(stack, voice: str, seed: int = SEED, cfg_alpha: float | None = None) -> tuple[np.ndarray, int]:
    """The offline engine with the tensors the gateway sends: (audio, frames made)."""
    audio, made = e2e.offline_audio(stack["model"], spec.FAMILY, text=TEXT, voice=voice.lower(),
                                    max_new_tokens=FRAMES, seed=seed, cfg_alpha=cfg_alpha)
    assert 1 <= made <= FRAMES
    return audio, made


def body(stack, voice: str = VOICES[0], **kw):
    return {"input": TEXT, "model": stack["voxtral"], "voice": voice, "max_new_tokens": FRAMES, "seed": SEED, **kw}


def wav_of(r) -> np.ndarray:
    return wav_at(r, RATE)


def assert_same_audio(got_int16: np.ndarray, want_float: np.ndarray, frames: int) -> None:
    same_audio(got_int16, want_float, frames * SAMPLES_PER_FRAME)


def test_models_and_voices_list_its_presets(http, stack):
    card = e2e.model_cards(http)[stack["voxtral"]]
    assert (card["family"], card["sample_rate"], card["voices"]) == (spec.FAMILY, RATE, VOICES)
    voices = http.get("/v1/audio/voices").json()
    assert set(VOICES) <= set(voices["voices"]) and "vivian" in voices["voices"]


@pytest.mark.parametrize("voice", [VOICES[0], VOICES[1].upper()])
def test_whole_file_raw_stream_and_sse_equal_the_offline_engine(http, stack, voice):
    want, frames = offline(stack, voice)
    e2e.assert_three_ways_equal(e2e.three_ways(http, body(stack, voice), RATE), want, frames, frames * SAMPLES_PER_FRAME)


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
    client = e2e.sdk(stack["url"])
    for voice in VOICES:
        want, frames = offline(stack, voice)
        samples = e2e.sdk_wav(client, RATE, model=stack["voxtral"], voice=voice, input=TEXT,
                              extra_body={"max_new_tokens": FRAMES, "seed": SEED})
        assert_same_audio(samples, want, frames)
    want, frames = offline(stack, VOICES[1])
    pcm = e2e.sdk_pcm(client, {"max_new_tokens": FRAMES, "seed": SEED}, model=stack["voxtral"], voice=VOICES[1],
                      input=TEXT)
    assert_same_audio(pcm, want, frames)


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"input": "   "}, "input"),
        ({"voice": None}, "voice"),  # required
        ({"voice": "vivian"}, "voice"),  # another family's preset
        ({"voice": "alloy"}, "voice"),
        ({"voice": "default"}, "voice"),
        ({"response_format": "flac", "stream_format": "audio"}, "response_format"),  # flac does not stream
        ({"speed": 1.5, "stream": True, "response_format": "pcm"}, "speed"),  # speed: whole clips only
        ({"sample_rate": 44100, "response_format": "opus"}, "sample_rate"),
        ({"max_new_tokens": 0}, "max_new_tokens"),  # 1..4096
        ({"max_new_tokens": 4097}, "max_new_tokens"),
        ({"seed": -1}, "seed"),
        ({"extra_params": {"cfg_alpha": 11.0}}, "extra_params"),  # 0..10
        ({"extra_params": {"temperature": 0.7}}, "extra_params"),  # cfg_alpha only
        ({"ref_audio": "data:audio/wav;base64,AAAA"}, "ref_audio"),  # no codec encoder
        ({"ref_text": "A transcript."}, "ref_text"),
        *e2e.OTHER_FAMILIES_FIELDS,
    ],
)
def test_refused_field_is_a_400_naming_it(http, stack, extra, param):
    payload = {k: v for k, v in body(stack, **extra).items() if v is not None}
    r = http.post(SPEECH, json=payload)
    e2e.assert_refused(r, param)
    if param in ("ref_audio", "ref_text"):
        assert "no codec encoder" in r.json()["error"]["message"]


def test_the_next_request_after_a_refusal_is_served(http, stack):
    e2e.assert_served_after_a_refusal(http, body(stack, max_new_tokens=0), body(stack), RATE)


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
    card = e2e.model_cards(http)[name]
    assert (card["family"], card["sample_rate"], card["voices"]) == (spec.FAMILY, RATE, ["ar_male", "fr_female"])
    text, voice, seed, frames, alpha = FOREIGN_CASES[case]
    codes, want = foreign_reference[f"codes_{case}"], foreign_reference[f"audio_{case}"]
    assert bool(foreign_reference[f"stopped_{case}"]) == (case == 0) and 1 < len(codes) <= frames
    assert want.size == len(codes) * SAMPLES_PER_FRAME and np.abs(encoding.to_int16(want)).max() > 10  # not silence
    payload = {"input": text, "model": name, "voice": voice, "max_new_tokens": frames, "seed": seed}
    if alpha != spec.DEFAULT_CFG_ALPHA:
        payload["extra_params"] = {"cfg_alpha": alpha}
    e2e.assert_three_ways_within(e2e.three_ways(http, payload, RATE), want, len(codes), AUDIO_ATOL)
