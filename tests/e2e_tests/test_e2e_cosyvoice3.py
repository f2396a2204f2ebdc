"""CosyVoice3 through the whole stack, served next to the other families in the session's shared deployment
(tests/e2e_fixtures.py): its audio through the whole file, the raw stream and SSE equals the offline engine
with the same seed and the same clip features (what prompt_encoder computes), streamed == whole (the hop
vocoder under the chunk mask for both); the first streamed audio is the first hop's, sent while the tokens
after it are still generated (more chunks than one, the first shorter than the whole); an uploaded voice
(its features computed once at upload, its transcript stored); the openai SDK with ref_audio/ref_text in
extra_body; a missing `ref_audio` or `ref_text` (and every other refused field) is a 400 naming it and the
next request succeeds.

A CosyVoice3 the project did not create (tests/cosyvoice3_foreign.py, in the same deployment): the
reference (tests/cosyvoice3_reference.py: vLLM-Omni 0.30.0's flow and HiFT around Qwen2ForCausalLM) fed the
clip features, RAS and flow noise our runtime admits for the request's seed makes the same speech tokens
as our runtime (exactly; the API's usage counts as many), and its audio equals /v1/audio/speech's, whole, raw stream and SSE (within the offline tolerance 1e-4 plus
one 16-bit step).
"""

from __future__ import annotations

from typing import Any

import e2e_speech as e2e
import numpy as np
import openai
import pytest
import soundfile as sf
from cosyvoice3_fixtures import reference_with_our_noise
from e2e_speech import SPEECH, data_url, same_audio, wav_at

from ttscore.contract import cosyvoice3 as spec

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# Long enough that the minimum length (2 x its tokens) spans more than two 25-token hops on tiny.
TEXT = "CosyVoice three speaks in many voices; numbers 0 1 2 3 4 5 6 7 8 9 and punctuation! How are you?"
SHORT = "Hello there."
REF_TEXT = "the quick brown fox"
TOKENS = 70
SEED = 7
RATE = spec.SAMPLE_RATE
AUDIO_ATOL = 1e-4  # the stated tolerance of our audio against the reference's (float)
FOREIGN_CASES = (("Bonjour a tous, comment allez vous", "a quiet room", 3, 60), ("good morning", "hello", 11, 30))


@pytest.fixture(scope="module")
def stack(e2e_triton, tmp_path_factory):
    ref = tmp_path_factory.mktemp("cosyvoice3-ref") / "ref.wav"
    e2e.write_tone(ref, 24000, 1.5)
    with e2e.family_stack(e2e_triton, tmp_path_factory, "cosyvoice3", "cosy", ref=ref,
                          foreign=e2e_triton["pipelines"]["cosyvoice3_foreign"],
                          foreign_checkpoint=e2e_triton["checkpoints"]["cosyvoice3_foreign"]) as stack:
        yield stack


def clip(stack) -> tuple[np.ndarray, int]:
    audio, rate = sf.read(stack["ref"], dtype="float32")
    return audio, rate


def offline_events(model, text: str = TEXT, ref_text: str = REF_TEXT, ref_audio: tuple[np.ndarray, int] | None = None,
                   seed: int = SEED, max_new_tokens: int | None = TOKENS, **knobs: Any) -> list:
    """The offline engine with the tensors the gateway sends (the clip's features as prompt_encoder makes them)."""
    assert ref_audio is not None
    feats = model.front.features(*ref_audio)
    return e2e.offline_events(model, spec.FAMILY, chunk_policy=None, text=text, ref_text=ref_text, seed=seed,
                              max_new_tokens=max_new_tokens, prompt_speech_tokens=feats.speech_tokens,
                              prompt_mel=feats.feat, prompt_embedding=feats.embedding, **knobs)


def offline(stack, **kw: Any) -> tuple[np.ndarray, int]:
    events = offline_events(stack["model"], ref_audio=clip(stack), **kw)
    return np.concatenate([e.pcm for e in events]), events[-1].usage.output_tokens


def body(stack, **kw):
    return {"input": TEXT, "model": stack["cosy"], "ref_audio": data_url(stack["ref"]), "ref_text": REF_TEXT,
            "max_new_tokens": TOKENS, "seed": SEED, **kw}


def wav_of(r) -> np.ndarray:
    return wav_at(r, RATE)




def test_models_lists_it(http, stack):
    card = e2e.model_cards(http)[stack["cosy"]]
    assert (card["family"], card["sample_rate"]) == (spec.FAMILY, RATE)


def test_whole_raw_stream_and_sse_equal_the_offline_engine_and_stream_per_hop(http, stack):
    events = offline_events(stack["model"], ref_audio=clip(stack))
    want = np.concatenate([e.pcm for e in events])
    pieces = [e.pcm for e in events if len(e.pcm)]
    tokens = events[-1].usage.output_tokens
    assert tokens > 2 * 25, "long enough for more than two hops"
    got = e2e.three_ways(http, body(stack), RATE)
    e2e.assert_three_ways_equal(got, want, tokens)  # streamed == whole (one mask for both)
    # The first audio is the first hop's (sent while the later tokens are generated), not the utterance.
    assert len(pieces) >= 3 and len(got.deltas) >= len(pieces)
    assert 0 < len(got.deltas[0]) // 2 <= len(pieces[0]) < len(want)


def test_seed_reaches_the_sampling_and_none_is_a_drawn_one(http, stack):
    short = {"input": SHORT, "max_new_tokens": 30}
    first = wav_of(http.post(SPEECH, json=body(stack, **short)))
    assert np.array_equal(first, wav_of(http.post(SPEECH, json=body(stack, **short))))
    other = wav_of(http.post(SPEECH, json=body(stack, **short, seed=SEED + 1)))
    assert other.shape != first.shape or not np.array_equal(first, other)
    same_audio(other, offline(stack, text=SHORT, max_new_tokens=30, seed=SEED + 1)[0])
    unseeded = {k: v for k, v in body(stack, **short).items() if k != "seed"}
    # No seed: random, as vLLM-Omni 0.30.0 (its deploy pins none); the gateway draws one, says which (X-Seed)
    # and that one gives the same audio again.
    drawn = http.post(SPEECH, json=unseeded)
    again = http.post(SPEECH, json=unseeded)
    seeds = int(drawn.headers["x-seed"]), int(again.headers["x-seed"])
    assert seeds[0] != seeds[1]
    same_audio(wav_of(drawn), offline(stack, text=SHORT, max_new_tokens=30, seed=seeds[0])[0])
    fast = wav_of(http.post(SPEECH, json=body(stack, **short, speed=2.0)))  # whole clips: time-stretched
    assert 0 < fast.size < first.size


def test_extra_params_reach_the_ras_sampling(http, stack):
    """temperature / top_k / top_p of this request in RAS, as vLLM-Omni 0.30.0 applies them (0: greedy)."""
    short = {"input": SHORT, "max_new_tokens": 30}
    default = wav_of(http.post(SPEECH, json=body(stack, **short)))
    for knobs in ({"temperature": 0}, {"temperature": 0.5, "top_k": 3, "top_p": 0.6}):
        got = wav_of(http.post(SPEECH, json=body(stack, **short, extra_params=knobs)))
        same_audio(got, offline(stack, text=SHORT, max_new_tokens=30, **knobs)[0])
        assert got.shape != default.shape or not np.array_equal(got, default)


def test_uploaded_voice_speaks_with_its_features_and_transcript(http, stack):
    e2e.upload_voice(http, stack["ref"], "cosy_told", REF_TEXT)
    want, _ = offline(stack, text=SHORT, max_new_tokens=30)
    payload = {"input": SHORT, "model": stack["cosy"], "voice": "cosy_told", "max_new_tokens": 30, "seed": SEED}
    same_audio(wav_of(http.post(SPEECH, json=payload)), want)
    e2e.upload_voice(http, stack["ref"], "cosy_plain")  # without a transcript: the request gives one
    e2e.assert_refused(http.post(SPEECH, json={**payload, "voice": "cosy_plain"}), "ref_text")
    same_audio(wav_of(http.post(SPEECH, json={**payload, "voice": "cosy_plain", "ref_text": REF_TEXT})), want)


def test_openai_sdk_with_ref_audio_and_ref_text_in_extra_body(stack):
    client = e2e.sdk(stack["url"], timeout=600)
    want, _ = offline(stack, text=SHORT, max_new_tokens=30)
    extra = {"ref_audio": data_url(stack["ref"]), "ref_text": REF_TEXT, "max_new_tokens": 30, "seed": SEED}
    same_audio(e2e.sdk_wav(client, RATE, model=stack["cosy"], voice="default", input=SHORT, extra_body=extra), want)
    same_audio(e2e.sdk_pcm(client, extra, model=stack["cosy"], voice="default", input=SHORT), want)
    with pytest.raises(openai.BadRequestError) as err:
        client.audio.speech.create(model=stack["cosy"], voice="default", input=SHORT,
                                   extra_body={"ref_audio": data_url(stack["ref"])})
    assert err.value.status_code == 400 and err.value.body["param"] == "ref_text"


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"ref_audio": None}, "ref_audio"),  # required
        ({"ref_text": None}, "ref_text"),  # required
        ({"ref_text": "   "}, "ref_text"),
        ({"ref_audio": None, "ref_text": None}, "ref_audio"),
        ({"voice": "vivian"}, "voice"),  # another family's preset
        ({"voice": "nobody"}, "voice"),
        ({"input": "   "}, "input"),
        ({"max_new_tokens": 0}, "max_new_tokens"),  # 1..4096
        ({"max_new_tokens": 4097}, "max_new_tokens"),
        ({"seed": -1}, "seed"),
        ({"speed": 1.5, "stream": True, "response_format": "pcm"}, "speed"),  # speed: whole clips only
        ({"extra_params": {"temperature": -0.7}}, "extra_params"),
        ({"extra_params": {"min_p": 0.1}}, "extra_params"),
        ({"ref_audio": "data:audio/wav;base64,AAAA"}, "ref_audio"),
        *e2e.OTHER_FAMILIES_FIELDS,
    ],
)
def test_refused_field_is_a_400_naming_it(http, stack, extra, param):
    payload = {k: v for k, v in {**body(stack, input=SHORT, max_new_tokens=10), **extra}.items() if v is not None}
    e2e.assert_refused(http.post(SPEECH, json=payload), param)


def test_the_next_request_after_a_refusal_is_served(http, stack):
    e2e.assert_served_after_a_refusal(http, body(stack, input=SHORT, max_new_tokens=0),
                                      body(stack, input=SHORT, max_new_tokens=10), RATE)


@pytest.fixture(scope="module")
def foreign_reference(stack) -> dict:
    cases = [{"text": t, "ref_text": rt, "ref_audio": clip(stack), "seed": s, "max_new_tokens": n}
             for t, rt, s, n in FOREIGN_CASES]
    return reference_with_our_noise(stack["foreign_checkpoint"], stack["foreign"], cases)


@pytest.mark.parametrize("case", range(len(FOREIGN_CASES)))
def test_foreign_checkpoint_through_the_api_equals_the_reference(http, stack, foreign_reference, case):
    name = stack["names"]["cosyvoice3_foreign"]
    text, ref_text, seed, tokens = FOREIGN_CASES[case]
    want_tokens, want = foreign_reference[f"tokens_{case}"], foreign_reference[f"audio_{case}"]
    assert len(want_tokens) > 1 and np.abs(want).max() > 0
    # Our runtime's tokens for this request (what the served engine samples) equal the reference's exactly.
    from ttscore.runtime.families.cosyvoice3.request import CosyVoice3Request

    ours = stack["foreign"]
    seq = ours.admit(CosyVoice3Request(text=text, ref_text=ref_text, ref_audio=clip(stack), seed=seed,
                                       max_new_tokens=tokens))
    cond = seq.vocoder_prefix[0, 0]
    np.testing.assert_array_equal(np.array(ours.g.tokens(cond.prompt, seq.ras, seq.min_len, seq.max_len), np.int64),
                                  want_tokens)
    payload = {"input": text, "model": name, "ref_audio": data_url(stack["ref"]), "ref_text": ref_text,
               "max_new_tokens": tokens, "seed": seed}
    e2e.assert_three_ways_within(e2e.three_ways(http, payload, RATE), want, len(want_tokens), AUDIO_ATOL)
