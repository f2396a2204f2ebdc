"""Breeze-TTS-2 through the whole stack, served next to Qwen3-TTS and VoxCPM2: its own deployment of
four tiny checkpoints (a greedy Qwen3-TTS CustomVoice, VoxCPM2, the project's Breeze-TTS-2 and one
Breeze-TTS-2 checkpoint the project did not make, tests/breeze_tts_2_foreign.py) rendered as
`triton-tts serve` renders it, so the session's shared mixed deployment keeps its start-up time.
/v1/models lists them; plain (`voice` S0..S9), design (`instructions`), clone (`ref_audio` +
`ref_text`) and direction (reference + `instructions`) audio through the raw stream, SSE, the whole
file, the openai SDK and the WebSocket equals the offline engine's within one 16-bit step, and for
the foreign checkpoint the engine's codes equal the reference composition's (ref5) in the four
modes; an uploaded voice and a precomputed voice file equal the same request with `ref_audio` +
`ref_text`; every refused field is a 400 naming it and the next request succeeds; one request of
each family in flight together.
"""

from __future__ import annotations

import base64
import json
import threading

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf
from breeze_tts_2_fixtures import reference, run_codes
from e2e_speech import SPEECH, data_url, same_audio, wav_at
from gateway_fixtures import render_stack_repository, start_gateway

from gateway import encoding
from gateway.settings import Settings
from ttscore.backend.triton_server import free_port
from ttscore.contract import tensors as triton_io
from ttscore.runtime.engine import Generator
from ttscore.runtime.families import FAMILIES, load_model

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TEXT = "Hello from Breeze."
FRAMES = 6
DESIGN = "A calm, low voice."
REF_TEXT = "A reference clip."
PRECOMPUTED = "breeze_pre"
# The four modes as request fields (`ref`: the reference clip with REF_TEXT, as ref_audio).
MODES = {
    "plain": {"voice": "S3"},
    "design": {"instructions": DESIGN},
    "clone": {"ref": True},
    "direction": {"ref": True, "instructions": DESIGN},
}


@pytest.fixture(scope="module")
def stack(triton_server, tmp_path_factory, tiny_custom_voice_greedy, voxcpm2_tiny, voxcpm2_artifacts,
          breeze_tiny, breeze_export, breeze_foreign, breeze_foreign_export):
    from ttscore.runtime.families.breeze_tts_2.offline import precompute_voice

    work = tmp_path_factory.mktemp("e2e-breeze")
    ref = work / "ref.wav"
    t = np.arange(int(16000 * 1.2)) / 16000  # uploads need at least 1 s; 16 kHz: the encoder resamples
    sf.write(ref, (0.3 * np.sin(2 * np.pi * 180 * t) * np.sin(2 * np.pi * 2 * t)).astype(np.float32), 16000,
             subtype="FLOAT")
    voices = work / "voices"
    precompute_voice(breeze_export, PRECOMPUTED, ref, REF_TEXT, voices)
    pairs = [tiny_custom_voice_greedy[:2], (voxcpm2_tiny, voxcpm2_artifacts), (breeze_tiny, breeze_export),
             (breeze_foreign, breeze_foreign_export)]
    repo, cfg = render_stack_repository(work, pairs, max_active=2)
    server = triton_server(repo, ready_timeout_s=180)
    cfg = {**cfg, "triton_url": server.grpc_url, "health_interval_s": 0, "custom_voice_dir": str(voices),
           "speaker_samples_dir": str(tmp_path_factory.mktemp("breeze-speakers"))}
    names = dict(zip(("qwen", "vox", "breeze", "foreign"), (m["name"] for m in cfg["models"]), strict=True))
    port = free_port()
    gw, thread = start_gateway(Settings.from_dict(cfg), port)
    yield {"url": f"http://127.0.0.1:{port}", "names": names, "breeze": names["breeze"], "ref": ref,
           "foreign_checkpoint": breeze_foreign,
           "models": {"breeze": load_model(breeze_export), "foreign": load_model(breeze_foreign_export)}}
    gw.should_exit = True
    thread.join(15)


def ref_codes(stack, key: str = "breeze") -> np.ndarray:
    """The reference clip's codes as the offline engine makes them (say --ref-audio)."""
    wav, sr = sf.read(stack["ref"], dtype="float32")
    return stack["models"][key].encode_reference(wav, sr)


def offline(stack, voice: str = "S0", instructions: str | None = None, ref: bool = False,
            key: str = "breeze") -> np.ndarray:
    """The offline engine with the tensors the gateway sends (the family's request_from_tensors)."""
    fields = {"text": TEXT, "speaker": voice, "instructions": instructions, "max_new_tokens": FRAMES}
    if ref:
        fields.update(ref_codes=ref_codes(stack, key), ref_text=REF_TEXT)
    request = FAMILIES["breeze_tts_2"].request_from_tensors(triton_io.request_tensors(**fields))
    gen = Generator(stack["models"][key], max_batch=1, chunk_policy="fixed")
    return np.concatenate([e.pcm for e in gen.synthesize(request)])




def body(stack, **kw):
    return {"input": TEXT, "model": stack["breeze"], "max_new_tokens": FRAMES, **kw}


def wav_of(r) -> np.ndarray:
    return wav_at(r, 24000)


def mode_fields(stack, mode: str) -> dict:
    """A mode's request fields (the reference as a ref_audio data URL with its transcript)."""
    fields = {k: v for k, v in MODES[mode].items() if k != "ref"}
    if MODES[mode].get("ref"):
        fields.update(ref_audio=data_url(stack["ref"]), ref_text=REF_TEXT)
    return fields


def three_ways(http, payload: dict) -> list[np.ndarray]:
    """The same request as the whole file, the raw PCM stream and SSE events: int16 samples of each."""
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
    return out


def test_models_lists_it_with_family_and_rate(http, stack):
    cards = {m["id"]: m for m in http.get("/v1/models").json()["data"]}
    card = cards[stack["breeze"]]
    assert (card["family"], card["sample_rate"]) == ("breeze_tts_2", 24000)
    assert {cards[stack["names"]["qwen"]]["family"], cards[stack["names"]["vox"]]["family"]} == {"qwen3_tts", "voxcpm2"}


@pytest.mark.parametrize(("voice", "instructions"), [(None, None), ("S3", None), ("S0", DESIGN)])
def test_whole_file_raw_stream_and_sse_equal_the_offline_engine(http, stack, voice, instructions):
    want = offline(stack, voice or "S0", instructions)
    extra = {k: v for k, v in (("voice", voice), ("instructions", instructions)) if v is not None}
    for got in three_ways(http, body(stack, **extra)):
        same_audio(got, want)


@pytest.mark.parametrize("mode", ["clone", "direction"])
def test_clone_and_direction_from_ref_audio_equal_the_offline_engine(http, stack, mode):
    """The gateway's breeze_speech_encoder (16 kHz clip resampled to 24 kHz) makes the offline codes."""
    want = offline(stack, instructions=MODES[mode].get("instructions"), ref=True)
    for got in three_ways(http, body(stack, **mode_fields(stack, mode))):
        same_audio(got, want)
    assert not np.array_equal(want, offline(stack, instructions=MODES[mode].get("instructions")))


@pytest.fixture(scope="module")
def foreign_reference(stack) -> dict[str, np.ndarray]:
    """The reference composition's codes (transformers 5.14.1, ref5) of the four modes on the foreign checkpoint."""
    cases = [{"text": TEXT, "max_new_tokens": FRAMES, **({"ref_text": REF_TEXT} if m.get("ref") else {}),
              **{k: v for k, v in m.items() if k in ("voice", "instructions")}} for m in MODES.values()]
    got = reference(stack["foreign_checkpoint"], "generate", {"ref_codes": ref_codes(stack, "foreign")},
                    json.dumps(cases))
    return {mode: got[f"codes_{i}"] for i, mode in enumerate(MODES)}


@pytest.mark.parametrize("mode", list(MODES))
def test_foreign_checkpoint_through_the_api_matches_the_reference(http, stack, foreign_reference, mode):
    from ttscore.runtime.families.breeze_tts_2.request import BreezeRequest

    m = MODES[mode]
    model = stack["models"]["foreign"]
    (codes,) = run_codes(model, [BreezeRequest(
        text=TEXT, voice=m.get("voice"), instructions=m.get("instructions"), max_new_tokens=FRAMES,
        ref_codes=ref_codes(stack, "foreign") if m.get("ref") else None, ref_text=REF_TEXT if m.get("ref") else None)])
    assert codes.shape[0] > 0
    np.testing.assert_array_equal(codes, foreign_reference[mode])
    want = offline(stack, m.get("voice", "S0"), m.get("instructions"), bool(m.get("ref")), key="foreign")
    for got in three_ways(http, body(stack, model=stack["names"]["foreign"], **mode_fields(stack, mode))):
        same_audio(got, want)


def test_uploaded_and_precomputed_voices_equal_ref_audio_with_ref_text(http, stack):
    """A stored voice is the reference codes + transcript: the same audio as ref_audio + ref_text."""
    want = offline(stack, ref=True)
    inline = wav_of(http.post(SPEECH, json=body(stack, **mode_fields(stack, "clone"))))
    same_audio(inline, want)
    with stack["ref"].open("rb") as f:
        r = http.post("/v1/audio/voices", files={"audio_sample": ("ref.wav", f, "audio/wav")},
                      data={"name": "breeze_told", "consent": "ok", "ref_text": REF_TEXT})
    assert r.status_code == 200, r.text
    with stack["ref"].open("rb") as f:
        r = http.post("/v1/audio/voices", files={"audio_sample": ("ref.wav", f, "audio/wav")},
                      data={"name": "breeze_untold", "consent": "ok"})
    assert r.status_code == 200, r.text
    assert {"breeze_told", "breeze_untold", PRECOMPUTED} <= set(http.get("/v1/audio/voices").json()["voices"])
    for voice, extra in (("breeze_told", {}), ("breeze_untold", {"ref_text": REF_TEXT}), (PRECOMPUTED, {})):
        # the same codes; the streamed vocoder's float sums may differ by one 16-bit step between runs
        # (its chunk boundaries follow the engine's timing; streamed == whole within float error)
        got = wav_of(http.post(SPEECH, json=body(stack, voice=voice, **extra))).astype(np.int32)
        assert got.shape == inline.shape and np.max(np.abs(got - inline)) <= 1
        with http.stream("POST", SPEECH, json=body(stack, voice=voice, response_format="pcm", stream_format="audio",
                                                   **extra)) as r:
            assert r.status_code == 200
            same_audio(np.frombuffer(b"".join(r.iter_bytes()), "<i2"), want)
    directed = wav_of(http.post(SPEECH, json=body(stack, voice="breeze_told", instructions=DESIGN)))
    same_audio(directed, offline(stack, instructions=DESIGN, ref=True))
    # The foreign checkpoint has the same codec: the voices fit it too (its codes are its encoder's).
    got = wav_of(http.post(SPEECH, json=body(stack, model=stack["names"]["foreign"], voice="breeze_told")))
    same_audio(got, offline(stack, ref=True, key="foreign"))
    # Without a transcript (uploaded without one, none in the request) the voice cannot clone.
    r = http.post(SPEECH, json=body(stack, voice="breeze_untold"))
    assert r.status_code == 400 and r.json()["error"]["param"] == "ref_text", r.text
    assert http.delete("/v1/audio/voices/breeze_untold").status_code == 200


def test_voices_differ(stack):
    assert not np.array_equal(offline(stack, "S0"), offline(stack, "S3"))


def test_openai_sdk_against_its_id(stack):
    client = openai.OpenAI(base_url=stack["url"] + "/v1", api_key="none", max_retries=0, timeout=300)
    for model in (stack["breeze"], f"BreezeBlue/{stack['breeze']}"):
        r = client.audio.speech.create(model=model, voice="S3", input=TEXT, response_format="wav",
                                       extra_body={"max_new_tokens": FRAMES})
        rate, samples = encoding.parse_wav(r.content)
        assert rate == 24000
        same_audio(samples, offline(stack, "S3"))
    with client.audio.speech.with_streaming_response.create(
            model=stack["breeze"], voice="S0", input=TEXT, response_format="pcm", instructions=DESIGN,
            extra_body={"stream_format": "audio", "max_new_tokens": FRAMES}) as r:
        pcm = b"".join(r.iter_bytes())
    same_audio(np.frombuffer(pcm, "<i2"), offline(stack, "S0", DESIGN))
    foreign = stack["names"]["foreign"]
    for model in (foreign, f"BreezeBlue/{foreign}"):  # clone through the SDK's extra_body
        r = client.audio.speech.create(model=model, voice="S0", input=TEXT, response_format="wav",
                                       extra_body={"max_new_tokens": FRAMES, **mode_fields(stack, "clone")})
        rate, samples = encoding.parse_wav(r.content)
        assert rate == 24000
        same_audio(samples, offline(stack, ref=True, key="foreign"))


def websocket_audio(stack, config: dict) -> np.ndarray:
    from websockets.sync.client import connect

    ws_url = stack["url"].replace("http://", "ws://") + "/v1/audio/speech/stream"
    with connect(ws_url, open_timeout=30, max_size=None) as ws:
        ws.send(json.dumps({"type": "session.config", "max_new_tokens": FRAMES, "response_format": "pcm", **config}))
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
    return np.frombuffer(audio, "<i2")


def test_websocket_with_its_id(stack):
    got = websocket_audio(stack, {"model": stack["breeze"], "voice": "S2", "instructions": DESIGN})
    same_audio(got, offline(stack, "S2", DESIGN))
    got = websocket_audio(stack, {"model": stack["names"]["foreign"], **mode_fields(stack, "direction")})
    same_audio(got, offline(stack, instructions=DESIGN, ref=True, key="foreign"))


def test_one_request_of_each_family_in_flight_together(stack):
    results: dict[str, int] = {}

    def post(key, payload):
        with httpx.Client(base_url=stack["url"], timeout=300) as c:
            with c.stream("POST", SPEECH, json=payload) as r:
                results[key] = r.status_code
                b"".join(r.iter_bytes())

    stream = {"response_format": "pcm", "stream_format": "audio"}
    payloads = {
        "breeze": body(stack, **stream),
        "qwen": {"input": TEXT, "model": stack["names"]["qwen"], "voice": "vivian", "max_new_tokens": 12, **stream},
        "vox": {"input": TEXT, "model": stack["names"]["vox"], "max_new_tokens": 6, **stream},
    }
    threads = [threading.Thread(target=post, args=item) for item in payloads.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert results == {"breeze": 200, "qwen": 200, "vox": 200}


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"guidance_scale": 2.0}, "guidance_scale"),
        ({"cfg_scale": 2.0}, "cfg_scale"),
        ({"extra_params": {"guidance_scale": 2.0}}, "extra_params"),  # where vLLM-Omni reads it
        ({"extra_params": {"temperature": 0.7}}, "extra_params"),
        ({"negative_prompt": "noisy"}, "negative_prompt"),
        ({"temperature": 0.7}, "temperature"),
        ({"top_p": 0.9}, "top_p"),
        ({"top_k": 10}, "top_k"),
        ({"speaker_embedding": [0.1, 0.2]}, "speaker_embedding"),
        ({"language": "English"}, "language"),
        ({"x_vector_only_mode": True}, "x_vector_only_mode"),
        ({"non_streaming_mode": True}, "non_streaming_mode"),
        ({"ref_text": "A transcript without audio."}, "ref_text"),
        ({"voice": "S1", "ref_text": "A transcript without audio."}, "ref_text"),
        ({"ref_audio": "REF"}, "ref_text"),  # a reference without its transcript
        ({"ref_audio": "REF", "ref_text": "  "}, "ref_text"),
        ({"ref_audio": ["REF", "REF"], "ref_text": REF_TEXT}, "ref_audio"),  # more than one reference clip
        ({"ref_audio": "data:audio/wav;base64,AAAA", "ref_text": REF_TEXT}, "ref_audio"),
        ({"ref_audio": "REF", "ref_text": REF_TEXT, "language": "Chinese"}, "language"),
        ({"ref_audio": "REF", "ref_text": REF_TEXT, "sample_rate": 48000}, "sample_rate"),
        ({"sample_rate": 16000}, "sample_rate"),
        ({"speed": 1.5}, "speed"),
        ({"voice": "S10"}, "voice"),
        ({"voice": "alloy"}, "voice"),
        ({"task_type": "Clone"}, "task_type"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"input": "   "}, "input"),
    ],
)
def test_refused_field_is_a_400_naming_it(http, stack, extra, param):
    ref = data_url(stack["ref"])
    clip = extra.get("ref_audio")
    if clip is not None:  # "REF": the test's reference clip
        extra = {**extra, "ref_audio": [ref if c == "REF" else c for c in clip] if isinstance(clip, list)
                 else ref if clip == "REF" else clip}
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


def test_guidance_at_one_is_accepted_and_changes_nothing(http, stack):
    plain = wav_of(http.post(SPEECH, json=body(stack)))
    given = http.post(SPEECH, json=body(stack, extra_params={"guidance_scale": 1.0, "cfg_scale": 1.0}))
    assert given.status_code == 200, given.text
    got = wav_of(given).astype(np.int32)
    assert got.shape == plain.shape and np.max(np.abs(got - plain)) <= 1  # one 16-bit step, as above
