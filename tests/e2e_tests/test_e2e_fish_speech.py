"""Fish Speech S2 Pro through the whole stack, served next to the other families in the session's shared
deployment (tests/e2e_fixtures.py): /v1/models lists it at 44.1 kHz; its audio through the raw stream, SSE and
the whole file, through the openai SDK and the WebSocket, equals the offline engine's with the same seed (the same frames, the
samples within one 16-bit step), text-only, cloned from `ref_audio` + `ref_text` (the codes of the
checkpoint's dac_encoder, equal to the offline encoder's) and from an uploaded voice (its codes computed at
upload, its stored transcript); `seed` and `extra_params` reach the samplers; every refused field is a 400
naming it and the next request succeeds.

A Fish Speech the project did not create (tests/fish_speech_foreign.py, in the same deployment): the reference
(tests/fish_speech_reference.py: vLLM-Omni 0.30.0's fish_speech modules) fed the sampling noise our runtime
draws for the request's seed makes codes whose decode by the reference's DAC equals the audio of
/v1/audio/speech with that seed, whole, raw stream and SSE (within the offline tolerance 1e-4 plus one 16-bit
step), text-only and cloned (the reference encodes the clip itself; the API's codes come from dac_encoder).
"""

from __future__ import annotations

import base64
import json

import numpy as np
import openai
import pytest
import soundfile as sf
from e2e_speech import SPEECH, data_url, same_audio, wav_at
from fish_speech_fixtures import reference
from gateway_fixtures import start_gateway

from gateway import encoding
from gateway.settings import Settings
from ttscore.backend.triton_server import free_port
from ttscore.contract import fish_speech as spec
from ttscore.contract import tensors as triton_io
from ttscore.runtime.engine import Generator
from ttscore.runtime.families import FAMILIES

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TEXT = "Hello, this is Fish Speech."
REF_TEXT = "A reference clip."
FRAMES = 8
SEED = 7
RATE = 44100
SAMPLES_PER_FRAME = 2048
AUDIO_ATOL = 1e-4  # the stated tolerance of the engine's audio against the reference's (float)
# The foreign checkpoint's requests: text-only and cloned (the stack's reference clip).
FOREIGN_CASES = ({"text": "A foreign checkpoint speaks.", "max_new_tokens": 9, "seed": 21},
                 {"text": "Cloned, through the API.", "max_new_tokens": 7, "seed": 22, "ref_text": REF_TEXT})


@pytest.fixture(scope="module")
def stack(e2e_triton, tmp_path_factory):
    cfg = {**e2e_triton["config"], "health_interval_s": 0,
           "speaker_samples_dir": str(tmp_path_factory.mktemp("fish-speakers"))}
    port = free_port()
    gw, thread = start_gateway(Settings.from_dict(cfg), port)
    ref = tmp_path_factory.mktemp("fish-ref") / "ref.wav"
    t = np.arange(int(RATE * 1.2)) / RATE  # uploads need at least 1 s
    clip = (0.3 * np.sin(2 * np.pi * 220 * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))).astype(np.float32)
    sf.write(ref, clip, RATE, subtype="FLOAT")  # float samples: the decoded clip is this one exactly
    yield {"url": f"http://127.0.0.1:{port}", "names": e2e_triton["names"], "fish": e2e_triton["names"]["fish_speech"],
           "model": e2e_triton["pipelines"]["fish_speech"], "ref": ref, "clip": clip,
           "foreign_model": e2e_triton["pipelines"]["fish_speech_foreign"],
           "foreign_checkpoint": e2e_triton["checkpoints"]["fish_speech_foreign"]}
    gw.should_exit = True
    thread.join(15)


def clone_codes(model, clip: np.ndarray) -> np.ndarray:
    return model.a.encode(clip)


def offline(stack, text: str = TEXT, seed: int = SEED, model=None, **fields) -> tuple[np.ndarray, int]:
    """The offline engine with the tensors the gateway sends: (audio, frames made)."""
    model = model or stack["model"]
    tensors = triton_io.request_tensors(text=text, max_new_tokens=fields.pop("max_new_tokens", FRAMES), seed=seed,
                                        **fields)
    request = FAMILIES[spec.FAMILY].request_from_tensors(tensors)
    events = list(Generator(model, max_batch=1, chunk_policy="fixed").synthesize(request))
    made = sum(e.frames for e in events)
    assert made >= 1
    return np.concatenate([e.pcm for e in events]), made


def body(stack, **kw):
    return {"input": TEXT, "model": stack["fish"], "max_new_tokens": FRAMES, "seed": SEED, **kw}


def wav_of(r) -> np.ndarray:
    return wav_at(r, RATE)


def assert_same_audio(got_int16: np.ndarray, want_float: np.ndarray, frames: int) -> None:
    same_audio(got_int16, want_float, frames * SAMPLES_PER_FRAME)


def three_ways(http, payload: dict) -> tuple[list[np.ndarray], int]:
    """The whole file, the raw PCM stream and SSE events (int16 samples of each), and the frames the SSE's final
    usage counts."""
    out = [wav_of(http.post(SPEECH, json=payload))]
    with http.stream("POST", SPEECH, json={**payload, "response_format": "pcm", "stream_format": "audio"}) as r:
        assert r.status_code == 200, r.read()
        out.append(np.frombuffer(b"".join(r.iter_bytes()), "<i2"))
    with http.stream("POST", SPEECH, json={**payload, "response_format": "pcm", "stream": True}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        text = "".join(r.iter_text())
    events = [json.loads(line[len("data: "):]) for line in text.splitlines() if line.startswith("data: ")]
    assert events[-1]["type"] == "speech.audio.done", events[-1]
    out.append(np.frombuffer(b"".join(base64.b64decode(e["audio"]) for e in events
                                      if e["type"] == "speech.audio.delta"), "<i2"))
    return out, int(events[-1]["usage"]["output_tokens"])


def test_models_lists_it_at_44k(http, stack):
    cards = {m["id"]: m for m in http.get("/v1/models").json()["data"]}
    for key in ("fish_speech", "fish_speech_foreign"):
        card = cards[stack["names"][key]]
        assert (card["family"], card["sample_rate"]) == (spec.FAMILY, RATE)


@pytest.mark.parametrize("voice", [None, "default"])
def test_text_only_whole_raw_and_sse_equal_the_offline_engine(http, stack, voice):
    want, frames = offline(stack)
    got, counted = three_ways(http, body(stack, **({"voice": voice} if voice else {})))
    assert counted == frames
    for samples in got:
        assert_same_audio(samples, want, frames)
    assert all(np.array_equal(got[0], g) for g in got[1:])  # streamed == whole (exact streaming vocoder)


def test_cloned_whole_raw_and_sse_equal_the_offline_engine(http, stack):
    codes = clone_codes(stack["model"], stack["clip"])
    want, frames = offline(stack, ref_text=REF_TEXT, ref_dac_codes=codes)
    assert not np.array_equal(want, offline(stack)[0])  # the reference changes the audio
    got, counted = three_ways(http, body(stack, ref_audio=data_url(stack["ref"]), ref_text=REF_TEXT))
    assert counted == frames
    for samples in got:
        assert_same_audio(samples, want, frames)
    assert all(np.array_equal(got[0], g) for g in got[1:])


def test_uploaded_voice_clones_with_its_codes_and_transcript(http, stack):
    with stack["ref"].open("rb") as f:
        r = http.post("/v1/audio/voices", files={"audio_sample": ("ref.wav", f, "audio/wav")},
                      data={"name": "fish_told", "consent": "ok", "ref_text": REF_TEXT})
    assert r.status_code == 200, r.text
    assert "fish_told" in http.get("/v1/audio/voices").json()["voices"]
    want, frames = offline(stack, ref_text=REF_TEXT, ref_dac_codes=clone_codes(stack["model"], stack["clip"]))
    got, counted = three_ways(http, body(stack, voice="fish_told"))
    assert counted == frames
    for samples in got:
        assert_same_audio(samples, want, frames)


def test_seed_and_sampling_knobs_reach_the_samplers(http, stack):
    first = wav_of(http.post(SPEECH, json=body(stack)))
    other = wav_of(http.post(SPEECH, json=body(stack, seed=SEED + 1)))
    assert other.shape != first.shape or not np.array_equal(first, other)
    assert_same_audio(other, *offline(stack, seed=SEED + 1))
    unseeded = {k: v for k, v in body(stack).items() if k != "seed"}
    assert_same_audio(wav_of(http.post(SPEECH, json=unseeded)), *offline(stack, seed=spec.DEFAULT_SEED))
    knobs = {"temperature": 0.5, "top_k": 5, "top_p": 0.7}
    cooler = wav_of(http.post(SPEECH, json=body(stack, extra_params=knobs)))
    assert_same_audio(cooler, *offline(stack, **knobs))
    # extra_params reach the Slow AR only, as in vLLM-Omni 0.30.0: at temperature 0 the semantic codes are
    # greedy and the Fast AR still samples the residual codes at 0.8/30/0.9 from the seed's noise.
    greedy = wav_of(http.post(SPEECH, json=body(stack, seed=1, extra_params={"temperature": 0})))
    assert_same_audio(greedy, *offline(stack, seed=1, temperature=0))
    other = wav_of(http.post(SPEECH, json=body(stack, seed=2, extra_params={"temperature": 0})))
    assert greedy.shape != other.shape or not np.array_equal(greedy, other)


def test_whole_file_formats_and_rates(http, stack):
    for fmt in ("flac", "mp3", "pcm"):
        r = http.post(SPEECH, json=body(stack, response_format=fmt))
        assert r.status_code == 200 and r.headers["content-type"] == encoding.MEDIA_TYPES[fmt], r.text
    r = http.post(SPEECH, json=body(stack, response_format="opus", sample_rate=48000))  # an Opus rate: resampled
    assert r.status_code == 200 and r.content
    rate, _ = encoding.parse_wav(http.post(SPEECH, json=body(stack, sample_rate=16000)).content)
    assert rate == 16000


def test_openai_sdk(stack):
    client = openai.OpenAI(base_url=stack["url"] + "/v1", api_key="none", max_retries=0, timeout=300)
    want, frames = offline(stack)
    r = client.audio.speech.create(model=stack["fish"], voice="default", input=TEXT, response_format="wav",
                                   extra_body={"max_new_tokens": FRAMES, "seed": SEED})
    rate, samples = encoding.parse_wav(r.content)
    assert rate == RATE
    assert_same_audio(samples, want, frames)
    want, frames = offline(stack, ref_text=REF_TEXT, ref_dac_codes=clone_codes(stack["model"], stack["clip"]))
    with client.audio.speech.with_streaming_response.create(
            model=stack["fish"], voice="default", input=TEXT, response_format="pcm",
            extra_body={"stream_format": "audio", "max_new_tokens": FRAMES, "seed": SEED,
                        "ref_audio": data_url(stack["ref"]), "ref_text": REF_TEXT}) as r:
        pcm = b"".join(r.iter_bytes())
    assert_same_audio(np.frombuffer(pcm, "<i2"), want, frames)


@pytest.mark.parametrize("cloned", [False, True])
def test_websocket(stack, cloned):
    from websockets.sync.client import connect

    clone = {"ref_audio": data_url(stack["ref"]), "ref_text": REF_TEXT} if cloned else {}
    codes = {"ref_text": REF_TEXT, "ref_dac_codes": clone_codes(stack["model"], stack["clip"])} if cloned else {}
    want, frames = offline(stack, **codes)
    ws_url = stack["url"].replace("http://", "ws://") + "/v1/audio/speech/stream"
    with connect(ws_url, open_timeout=30, max_size=None) as ws:
        ws.send(json.dumps({"type": "session.config", "model": stack["fish"], "voice": "default",
                            "max_new_tokens": FRAMES, "seed": SEED, "response_format": "pcm", **clone}))
        ws.send(json.dumps({"type": "input.text", "text": TEXT}))
        ws.send(json.dumps({"type": "input.done"}))
        audio, done = b"", None
        while done is None:
            m = ws.recv(timeout=300)
            if isinstance(m, bytes):
                audio += m
            elif json.loads(m)["type"] == "session.done":
                done = json.loads(m)
            else:
                assert json.loads(m)["type"] != "error", m
    assert_same_audio(np.frombuffer(audio, "<i2"), want, frames)


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"input": "   "}, "input"),
        ({"voice": "vivian"}, "voice"),  # another family's preset: no built-in speakers
        ({"voice": "alloy"}, "voice"),
        ({"ref_audio": "REF"}, "ref_text"),  # cloning needs the transcript
        ({"ref_text": "A transcript."}, "ref_text"),  # a transcript without a clip
        ({"ref_audio": "data:audio/wav;base64,AAAA", "ref_text": "T."}, "ref_audio"),  # not audio
        ({"response_format": "opus"}, "sample_rate"),  # 44.1 kHz is not an Opus rate
        ({"sample_rate": 44100, "response_format": "opus"}, "sample_rate"),
        ({"response_format": "mp3", "stream_format": "audio"}, "response_format"),  # streams: pcm/wav only
        ({"speed": 1.5, "stream": True, "response_format": "pcm"}, "speed"),  # speed: whole clips only
        ({"max_new_tokens": 0}, "max_new_tokens"),  # 1..4096
        ({"max_new_tokens": 4097}, "max_new_tokens"),
        ({"seed": -1}, "seed"),
        ({"extra_params": {"temperature": 11}}, "extra_params"),
        ({"extra_params": {"top_p": 0}}, "extra_params"),
        ({"extra_params": {"top_k": 2.5}}, "extra_params"),
        ({"extra_params": {"cfg_alpha": 1.0}}, "extra_params"),  # temperature/top_k/top_p only
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
    if extra.get("ref_audio") == "REF":
        extra = {**extra, "ref_audio": data_url(stack["ref"])}
    r = http.post(SPEECH, json=body(stack, **extra))
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.json()


def test_the_next_request_after_a_refusal_is_served(http, stack):
    """The matrix above runs on this server without a generation after each 400; this is its
    end-to-end half: a refusal, then a request served."""
    r = http.post(SPEECH, json=body(stack, max_new_tokens=0))
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "max_new_tokens", r.json()
    assert wav_of(http.post(SPEECH, json=body(stack))).size


@pytest.fixture(scope="module")
def foreign_reference(stack) -> dict:
    """The reference's codes, stop flags and audio per FOREIGN_CASES, each made with the noise our runtime draws
    for its seed (the cloned case encodes the stack's clip with the reference's own DAC encoder)."""
    from ttscore.runtime.families.fish_speech.artifacts import request_noise

    t = stack["foreign_model"].a.tables
    inputs: dict[str, np.ndarray] = {}
    for i, case in enumerate(FOREIGN_CASES):
        inputs[f"q_slow_{i}"], inputs[f"q_fast_{i}"] = request_noise(
            case["seed"], case["max_new_tokens"], t.codebook_size + 1, t.num_codebooks)
        if "ref_text" in case:
            inputs[f"ref_audio_{i}"] = stack["clip"]
    return reference(stack["foreign_checkpoint"], list(FOREIGN_CASES), inputs)


@pytest.mark.parametrize("case", range(len(FOREIGN_CASES)))
def test_foreign_checkpoint_through_the_api_equals_the_reference(http, stack, foreign_reference, case):
    c = FOREIGN_CASES[case]
    codes, want = foreign_reference[f"codes_{case}"], foreign_reference[f"audio_{case}"]
    assert 1 < len(codes) <= c["max_new_tokens"]
    assert want.size == len(codes) * SAMPLES_PER_FRAME and np.abs(encoding.to_int16(want)).max() > 10  # not silence
    payload = {"input": c["text"], "model": stack["names"]["fish_speech_foreign"],
               "max_new_tokens": c["max_new_tokens"], "seed": c["seed"]}
    if "ref_text" in c:
        payload |= {"ref_audio": data_url(stack["ref"]), "ref_text": c["ref_text"]}
        np.testing.assert_array_equal(clone_codes(stack["foreign_model"], stack["clip"]),
                                      foreign_reference[f"ref_codes_{case}"])
    got, counted = three_ways(http, payload)
    assert counted == len(codes)
    for samples in got:
        assert samples.shape == want.shape
        # int16 floors the served float: within one 16-bit step of it, which is within AUDIO_ATOL of want
        assert np.max(np.abs(samples / 32768.0 - want)) <= AUDIO_ATOL + 1 / 32768
    assert all(np.array_equal(got[0], g) for g in got[1:])
