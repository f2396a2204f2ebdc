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

import base64
import json
from typing import Any

import numpy as np
import openai
import pytest
import soundfile as sf
from cosyvoice3_fixtures import reference_with_our_noise
from e2e_speech import SPEECH, data_url, same_audio, wav_at
from gateway_fixtures import start_gateway

from gateway import encoding
from gateway.settings import Settings
from ttscore.backend.triton_server import free_port
from ttscore.contract import cosyvoice3 as spec
from ttscore.contract import tensors as triton_io
from ttscore.runtime.engine import Generator
from ttscore.runtime.families import FAMILIES

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
    cfg = {**e2e_triton["config"], "health_interval_s": 0,
           "speaker_samples_dir": str(tmp_path_factory.mktemp("cosyvoice3-speakers"))}
    port = free_port()
    gw, thread = start_gateway(Settings.from_dict(cfg), port)
    ref = tmp_path_factory.mktemp("cosyvoice3-ref") / "ref.wav"
    t = np.arange(int(24000 * 1.5)) / 24000  # uploads need at least 1 s
    sf.write(ref, (0.3 * np.sin(2 * np.pi * 220 * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))).astype(np.float32),
             24000, subtype="FLOAT")
    yield {"url": f"http://127.0.0.1:{port}", "names": e2e_triton["names"], "cosy": e2e_triton["names"]["cosyvoice3"],
           "model": e2e_triton["pipelines"]["cosyvoice3"], "ref": ref,
           "foreign": e2e_triton["pipelines"]["cosyvoice3_foreign"],
           "foreign_checkpoint": e2e_triton["checkpoints"]["cosyvoice3_foreign"]}
    gw.should_exit = True
    thread.join(15)


def clip(stack) -> tuple[np.ndarray, int]:
    audio, rate = sf.read(stack["ref"], dtype="float32")
    return audio, rate


def offline_events(model, text: str = TEXT, ref_text: str = REF_TEXT, ref_audio: tuple[np.ndarray, int] | None = None,
                   seed: int = SEED, max_new_tokens: int | None = TOKENS, **knobs: Any) -> list:
    """The offline engine with the tensors the gateway sends (the clip's features as prompt_encoder makes them)."""
    assert ref_audio is not None
    feats = model.front.features(*ref_audio)
    fields = {"text": text, "ref_text": ref_text, "seed": seed, "max_new_tokens": max_new_tokens,
              "prompt_speech_tokens": feats.speech_tokens, "prompt_mel": feats.feat,
              "prompt_embedding": feats.embedding, **knobs}
    request = FAMILIES[spec.FAMILY].request_from_tensors(triton_io.request_tensors(**fields))
    return list(Generator(model, max_batch=1).synthesize(request))


def offline(stack, **kw: Any) -> tuple[np.ndarray, int]:
    events = offline_events(stack["model"], ref_audio=clip(stack), **kw)
    return np.concatenate([e.pcm for e in events]), events[-1].usage.output_tokens


def body(stack, **kw):
    return {"input": TEXT, "model": stack["cosy"], "ref_audio": data_url(stack["ref"]), "ref_text": REF_TEXT,
            "max_new_tokens": TOKENS, "seed": SEED, **kw}


def wav_of(r) -> np.ndarray:
    return wav_at(r, RATE)




def three_ways(http, payload: dict) -> tuple[list[np.ndarray], list[bytes], int]:
    """The whole file, the raw PCM stream and SSE (int16 samples of each), the SSE deltas, and the speech
    tokens the SSE's final usage counts."""
    out = [wav_of(http.post(SPEECH, json=payload))]
    with http.stream("POST", SPEECH, json={**payload, "response_format": "pcm", "stream_format": "audio"}) as r:
        assert r.status_code == 200, r.read()
        out.append(np.frombuffer(b"".join(r.iter_bytes()), "<i2"))
    with http.stream("POST", SPEECH, json={**payload, "response_format": "pcm", "stream": True}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        text = "".join(r.iter_text())
    events = [json.loads(line[len("data: "):]) for line in text.splitlines() if line.startswith("data: ")]
    assert events[-1]["type"] == "speech.audio.done", events[-1]
    deltas = [base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta"]
    out.append(np.frombuffer(b"".join(deltas), "<i2"))
    return out, deltas, int(events[-1]["usage"]["output_tokens"])


def test_models_lists_it(http, stack):
    cards = {m["id"]: m for m in http.get("/v1/models").json()["data"]}
    card = cards[stack["cosy"]]
    assert (card["family"], card["sample_rate"]) == (spec.FAMILY, RATE)


def test_whole_raw_stream_and_sse_equal_the_offline_engine_and_stream_per_hop(http, stack):
    events = offline_events(stack["model"], ref_audio=clip(stack))
    want = np.concatenate([e.pcm for e in events])
    pieces = [e.pcm for e in events if len(e.pcm)]
    tokens = events[-1].usage.output_tokens
    assert tokens > 2 * 25, "long enough for more than two hops"
    got, deltas, counted = three_ways(http, body(stack))
    assert counted == tokens
    for samples in got:
        same_audio(samples, want)
    assert all(np.array_equal(got[0], g) for g in got[1:])  # streamed == whole (one mask for both)
    # The first audio is the first hop's (sent while the later tokens are generated), not the utterance.
    assert len(pieces) >= 3 and len(deltas) >= len(pieces)
    assert 0 < len(deltas[0]) // 2 <= len(pieces[0]) < len(want)


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
    with stack["ref"].open("rb") as f:
        r = http.post("/v1/audio/voices", files={"audio_sample": ("ref.wav", f, "audio/wav")},
                      data={"name": "cosy_told", "consent": "ok", "ref_text": REF_TEXT})
    assert r.status_code == 200, r.text
    want, _ = offline(stack, text=SHORT, max_new_tokens=30)
    payload = {"input": SHORT, "model": stack["cosy"], "voice": "cosy_told", "max_new_tokens": 30, "seed": SEED}
    same_audio(wav_of(http.post(SPEECH, json=payload)), want)
    with stack["ref"].open("rb") as f:  # without a transcript: the request gives one
        r = http.post("/v1/audio/voices", files={"audio_sample": ("ref.wav", f, "audio/wav")},
                      data={"name": "cosy_plain", "consent": "ok"})
    assert r.status_code == 200, r.text
    r = http.post(SPEECH, json={**payload, "voice": "cosy_plain"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "ref_text", r.text
    same_audio(wav_of(http.post(SPEECH, json={**payload, "voice": "cosy_plain", "ref_text": REF_TEXT})), want)


def test_openai_sdk_with_ref_audio_and_ref_text_in_extra_body(stack):
    client = openai.OpenAI(base_url=stack["url"] + "/v1", api_key="none", max_retries=0, timeout=600)
    want, _ = offline(stack, text=SHORT, max_new_tokens=30)
    extra = {"ref_audio": data_url(stack["ref"]), "ref_text": REF_TEXT, "max_new_tokens": 30, "seed": SEED}
    r = client.audio.speech.create(model=stack["cosy"], voice="default", input=SHORT, response_format="wav",
                                   extra_body=extra)
    rate, samples = encoding.parse_wav(r.content)
    assert rate == RATE
    same_audio(samples, want)
    with client.audio.speech.with_streaming_response.create(
            model=stack["cosy"], voice="default", input=SHORT, response_format="pcm",
            extra_body={**extra, "stream_format": "audio"}) as r:
        pcm = b"".join(r.iter_bytes())
    same_audio(np.frombuffer(pcm, "<i2"), want)
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
    payload = {k: v for k, v in {**body(stack, input=SHORT, max_new_tokens=10), **extra}.items() if v is not None}
    r = http.post(SPEECH, json=payload)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.json()


def test_the_next_request_after_a_refusal_is_served(http, stack):
    """The matrix above runs on this server without a generation after each 400; this is its
    end-to-end half: a refusal, then a request served."""
    r = http.post(SPEECH, json=body(stack, input=SHORT, max_new_tokens=0))
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "max_new_tokens", r.json()
    assert wav_of(http.post(SPEECH, json=body(stack, input=SHORT, max_new_tokens=10))).size


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
    got, _, counted = three_ways(http, payload)
    assert counted == len(want_tokens)
    for samples in got:
        assert samples.shape == want.shape
        # int16 floors the served float: within one 16-bit step of it, which is within AUDIO_ATOL of want
        assert np.max(np.abs(samples / 32768.0 - want)) <= AUDIO_ATOL + 1 / 32768
    assert all(np.array_equal(got[0], g) for g in got[1:])
