"""End to end: the real tritonserver (rendered exactly as `triton-tts serve` renders it: a greedy
CustomVoice, a VoiceDesign and a Base tiny checkpoint sharing one code2wav) behind the real
gateway (uvicorn), driven by the official openai SDK, httpx and curl as users do.

- the SDK works unchanged (create, with_streaming_response for raw audio and for SSE);
- WAV, raw PCM stream and concatenated SSE deltas are the audio `triton-tts say` makes for the
  same inputs (16-bit: within 1 LSB);
- compressed formats decode to the right rate and duration; usage headers == speech.audio.done;
- a mid-stream disconnect frees the Triton slot; bad input is a 400 that starts nothing on Triton;
- batch mixes successes and per-item errors; every curl example of the spec works (voices adapted).
"""

from __future__ import annotations

import base64
import io
import json
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import av
import httpx
import numpy as np
import openai
import pytest
import soundfile as sf
import tritonclient.grpc as grpcclient
from gateway_fixtures import start_gateway

from gateway import encoding, refaudio, sse
from gateway.settings import Settings
from ttscore.backend.triton_server import free_port
from ttscore.runtime.engine import Generator
from ttscore.runtime.families.qwen3_tts.request import Qwen3TTSRequest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TEXT = "Hello from the gateway."
FRAMES = 16  # max_new_tokens for most requests: 1.28 s of audio
SEED = 7
SPEC = Path(__file__).resolve().parents[3] / "shared" / "spec" / "speech_api.md"


@pytest.fixture(scope="module")
def stack(e2e_triton, tmp_path_factory):
    """A gateway (uvicorn, in-process) over the session's e2e Triton deployment."""
    # No health monitor: its probes are Triton inferences, and test_bad_input_... counts those.
    cfg = {**e2e_triton["config"], "speaker_samples_dir": str(tmp_path_factory.mktemp("speech-speakers")),
           "health_interval_s": 0}
    settings = Settings.from_dict(cfg)
    port = free_port()
    gw, thread = start_gateway(settings, port)
    yield {"url": f"http://127.0.0.1:{port}", "port": port, "server": e2e_triton["server"],
           "names": e2e_triton["names"], "repo": e2e_triton["repo"], "triton_models": e2e_triton["triton_models"],
           "pipeline": e2e_triton["pipelines"]["custom_voice"], "artifacts": e2e_triton["artifacts"]["custom_voice"]}
    gw.should_exit = True
    thread.join(15)


@pytest.fixture(scope="module")
def client(stack):
    return openai.OpenAI(base_url=stack["url"] + "/v1", api_key="none", max_retries=0, timeout=120)


def extra(**kw):
    return {"language": "English", "seed": SEED, "max_new_tokens": FRAMES, **kw}


def offline_pcm(stack, text=TEXT, voice="vivian", frames=FRAMES, **knobs) -> np.ndarray:
    gen = Generator(stack["pipeline"], max_batch=1)
    req = Qwen3TTSRequest(text=text, speaker=voice, language="English", seed=SEED, max_new_tokens=frames, **knobs)
    return np.concatenate([ev.pcm for ev in gen.synthesize(req)])


def assert_same_audio(got: np.ndarray, want_float: np.ndarray) -> None:
    want = encoding.to_int16(want_float).astype(np.int32)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert np.max(np.abs(got.astype(np.int32) - want)) <= 1


def triton_request_count(stack) -> int:
    client = grpcclient.InferenceServerClient(stack["server"].grpc_url)
    try:
        total = 0
        for model in [*stack["triton_models"].values(), "voice_features"]:
            s = client.get_inference_statistics(model).model_stats[0].inference_stats
            total += s.success.count + s.fail.count
        return total
    finally:
        client.close()


def decode(data: bytes) -> tuple[int, int]:
    try:
        y, rate = sf.read(io.BytesIO(data))
        return len(y), int(rate)
    except Exception:  # ADTS AAC: PyAV
        with av.open(io.BytesIO(data)) as c:
            s = c.streams.audio[0]
            return sum(f.samples for f in c.decode(s)), int(s.sample_rate)


# --- the SDK and "same audio as triton-tts say" ------------------------------------------------------


def test_sdk_wav_is_the_offline_audio(stack, client):
    r = client.audio.speech.create(model=stack["names"]["custom_voice"], voice="vivian", input=TEXT,
                                   response_format="wav", extra_body=extra())
    rate, samples = encoding.parse_wav(r.content)
    assert rate == 24000
    assert_same_audio(samples, offline_pcm(stack))
    headers = r.response.headers
    assert int(headers["x-vllm-omni-output-tokens"]) == FRAMES and headers["x-request-id"]


def test_openai_names_work_unchanged(stack, client):
    """An app written for OpenAI: model="tts-1", voice="alloy" (alloy -> vivian, the default mapping)."""
    r = client.audio.speech.create(model="tts-1", voice="alloy", input=TEXT, extra_body=extra())
    rate, samples = encoding.parse_wav(r.content)
    assert rate == 24000
    assert_same_audio(samples, offline_pcm(stack, voice="vivian"))
    with client.audio.speech.with_streaming_response.create(
        model="gpt-4o-mini-tts", voice="nova", input=TEXT, response_format="pcm", extra_body=extra(stream_format="audio"),
    ) as resp:
        pcm = np.frombuffer(resp.read(), np.int16)
    assert_same_audio(pcm, offline_pcm(stack, voice="ono_anna"))
    with pytest.raises(openai.NotFoundError):
        client.audio.speech.create(model="tts-2", voice="alloy", input=TEXT)


LONG_TEXT = "\n\n".join(
    " ".join(f"Paragraph {p}, sentence {s}: the river ran past the old mill, and the wheel kept turning." for s in range(7))
    for p in range(3)
)


def test_long_input_streams_its_segments_in_order(stack, client):
    """One raw PCM stream of a multi-paragraph input equals its segments requested one by one (segment
    i with seed SEED + i), and its usage is their sum."""
    from gateway.longtext import split_segments
    from gateway.settings import DEFAULT_SEGMENT_CHARS

    segments = split_segments(LONG_TEXT, DEFAULT_SEGMENT_CHARS)
    assert len(LONG_TEXT) > 2 * DEFAULT_SEGMENT_CHARS and len(segments) >= 3
    frames = 6
    model = stack["names"]["custom_voice"]
    with client.audio.speech.with_streaming_response.create(
        model=model, voice="ryan", input=LONG_TEXT, response_format="pcm",
        extra_body=extra(stream_format="audio", max_new_tokens=frames),
    ) as resp:
        long_pcm = np.frombuffer(resp.read(), np.int16)
        request_id = resp.headers["x-request-id"]
    parts, usage = [], {"text_tokens": 0, "output_tokens": 0}
    for i, segment in enumerate(segments):
        r = client.audio.speech.create(model=model, voice="ryan", input=segment, response_format="pcm",
                                       extra_body=extra(seed=SEED + i, max_new_tokens=frames))
        parts.append(np.frombuffer(r.content, np.int16))
        usage["text_tokens"] += int(r.response.headers["x-vllm-omni-input-text-tokens"])
        usage["output_tokens"] += int(r.response.headers["x-vllm-omni-output-tokens"])
    assert request_id and long_pcm.size == sum(p.size for p in parts) == len(segments) * frames * 1920
    # Chunk boundaries follow the adaptive schedule's timing: equal up to float rounding (one 16-bit step).
    assert np.abs(long_pcm.astype(np.int32) - np.concatenate(parts)).max() <= 1
    with httpx.stream("POST", stack["url"] + "/v1/audio/speech", timeout=120, json={
            "model": model, "voice": "ryan", "input": LONG_TEXT, "stream": True, "response_format": "pcm",
            **extra(max_new_tokens=frames)}) as r:
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    (done,) = [e for e in events if e["type"] == "speech.audio.done"]
    assert done["usage"]["output_tokens"] == usage["output_tokens"]
    assert done["usage"]["input_token_details"]["text_tokens"] == usage["text_tokens"]


def test_cli_say_writes_the_same_audio(stack, client, tmp_path):
    out = tmp_path / "say.wav"
    cmd = [sys.executable, "-m", "triton_tts.cli", "say", "--artifacts", str(stack["artifacts"]), "--voice", "vivian",
           "--language", "English", "--seed", str(SEED), "--greedy", "--max-new-tokens", str(FRAMES), "-o", str(out),
           TEXT]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    said, rate = sf.read(out, dtype="int16")
    r = client.audio.speech.create(model=stack["names"]["custom_voice"], voice="vivian", input=TEXT,
                                   extra_body=extra())
    gw_rate, samples = encoding.parse_wav(r.content)
    assert rate == gw_rate == 24000
    assert said.shape == samples.shape
    assert np.max(np.abs(said.astype(np.int32) - samples.astype(np.int32))) <= 1


def test_cli_say_ends_a_generation_at_the_runaway_guard(stack, tmp_path):
    """`say` runs under the runaway guard as served: past its budget a generation ends with "length"."""
    out = tmp_path / "guarded.wav"
    cmd = [sys.executable, "-m", "triton_tts.cli", "say", "--artifacts", str(stack["artifacts"]), "--voice", "vivian",
           "--language", "English", "--seed", str(SEED), "--max-new-tokens", "1000", "--runaway-factor", "1",
           "--runaway-min-s", "0.5", "-o", str(out), TEXT]
    run = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300)
    said, rate = sf.read(out, dtype="int16")
    frames = int(run.stdout.split(".wav: ")[1].split(" frames")[0])
    assert "(finish: length;" in run.stdout, run.stdout
    assert round(0.5 / 0.08) <= frames < 1000 and said.shape[0] == frames * rate * 2 // 25  # 12.5 frames/s


def test_sdk_raw_pcm_stream_and_sse_are_the_same_audio(stack, client):
    want = offline_pcm(stack)
    model = stack["names"]["custom_voice"]
    with client.audio.speech.with_streaming_response.create(
        model=model, voice="vivian", input=TEXT, response_format="pcm", stream_format="audio",
        extra_body=extra(initial_codec_chunk_frames=2),
    ) as resp:
        assert resp.headers["content-type"] == "audio/pcm"
        chunks = list(resp.iter_bytes())
    raw = b"".join(chunks)
    assert_same_audio(np.frombuffer(raw, "<i2"), want)

    with client.audio.speech.with_streaming_response.create(
        model=model, voice="vivian", input=TEXT, response_format="wav", stream_format="audio", extra_body=extra(),
    ) as resp:
        wav = resp.read()
    assert wav[4:8] == b"\xff\xff\xff\xff"
    assert_same_audio(encoding.parse_wav(wav)[1], want)

    with client.audio.speech.with_streaming_response.create(
        model=model, voice="vivian", input=TEXT, response_format="pcm", stream_format="sse", extra_body=extra(),
    ) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = sse.parse("\n".join(resp.iter_lines()) + "\n\n")
    deltas = [d for n, d in events if n == "speech.audio.delta"]
    assert len(deltas) >= 2 and events[-1][0] == "speech.audio.done"
    assert_same_audio(np.frombuffer(b"".join(base64.b64decode(d["audio"]) for d in deltas), "<i2"), want)

    # the usage of the stream's done event equals the headers of the same request made whole
    whole = client.audio.speech.create(model=model, voice="vivian", input=TEXT, extra_body=extra())
    usage = events[-1][1]["usage"]
    h = whole.response.headers
    assert usage == {
        "input_tokens": int(h["x-vllm-omni-input-tokens"]), "output_tokens": int(h["x-vllm-omni-output-tokens"]),
        "total_tokens": int(h["x-vllm-omni-total-tokens"]),
        "input_token_details": {"text_tokens": int(h["x-vllm-omni-input-text-tokens"]),
                                "audio_tokens": int(h["x-vllm-omni-input-audio-tokens"])},
    }
    assert usage["output_tokens"] == FRAMES and usage["input_tokens"] > 0


def test_stream_true_over_http_with_sample_rate(stack):
    r = httpx.post(stack["url"] + "/v1/audio/speech", timeout=120, json={
        "input": TEXT, "voice": "vivian", "stream": True, "response_format": "pcm", "sample_rate": 16000, **extra()})
    events = sse.parse(r.content)
    audio = b"".join(base64.b64decode(d["audio"]) for n, d in events if n == "speech.audio.delta")
    assert len(audio) // 2 == FRAMES * 1920 * 2 // 3


@pytest.mark.parametrize(("fmt", "rate"), [("mp3", 24000), ("mp3", 44100), ("flac", 16000), ("opus", 48000),
                                           ("opus", 16000), ("aac", 24000), ("aac", 22050), ("wav", 8000)])
def test_compressed_formats_decode_to_rate_and_duration(stack, client, fmt, rate):
    r = client.audio.speech.create(model=stack["names"]["custom_voice"], voice="vivian", input=TEXT,
                                   response_format=fmt, extra_body=extra(sample_rate=rate))
    assert r.response.headers["content-type"] == encoding.MEDIA_TYPES[fmt]
    n, got_rate = decode(r.content)
    expected = FRAMES * 1920 * rate // 24000
    assert got_rate == rate
    if fmt in ("flac", "opus", "wav"):
        assert n == expected
    else:  # encoder delay and padding of MP3 / ADTS AAC
        assert expected <= n <= expected + 3 * 1152


@pytest.mark.parametrize("fmt", ["opus", "mp3"])
def test_sdk_streams_compressed_audio_that_decodes_as_it_arrives(stack, client, fmt):
    """Streamed Ogg Opus / mp3 through the real stack: every prefix the SDK hands over decodes, and the whole
    stream decodes to the whole file's length within one codec frame."""
    model = stack["names"]["custom_voice"]
    whole = client.audio.speech.create(model=model, voice="vivian", input=TEXT, response_format=fmt,
                                       extra_body=extra()).content
    with client.audio.speech.with_streaming_response.create(
            model=model, voice="vivian", input=TEXT, response_format=fmt,
            extra_body=extra(stream_format="audio")) as streamed:
        assert streamed.headers["content-type"] == encoding.MEDIA_TYPES[fmt]
        parts = list(streamed.iter_bytes(1024))
    fmt_name = {"opus": "ogg", "mp3": "mp3"}[fmt]

    def samples(data: bytes) -> int:
        with av.open(io.BytesIO(data), format=fmt_name) as c:
            return sum(f.samples for f in c.decode(audio=0))
    sent = b""
    for p in parts:
        sent += p
        samples(sent)  # decodes, however it ends
    assert abs(samples(sent) - samples(whole)) <= {"opus": 960, "mp3": 1152}[fmt]


def test_speed_keeps_sample_rate_and_scales_duration(stack, client):
    r = client.audio.speech.create(model=stack["names"]["custom_voice"], voice="vivian", input=TEXT, speed=2.0,
                                   response_format="flac", extra_body=extra())
    n, rate = decode(r.content)
    assert rate == 24000 and n == FRAMES * 1920 // 2


# --- the other tasks ------------------------------------------------------------------------------


def test_voice_design_and_base_cloning(stack, client):
    r = client.audio.speech.create(model=stack["names"]["voice_design"], voice="ignored", input=TEXT,
                                   instructions="A warm, friendly female voice", extra_body={"max_new_tokens": 8,
                                                                                              "task_type": "VoiceDesign"})
    assert decode(r.content) == (8 * 1920, 24000)

    ref_wav = encoding.encode(offline_pcm(stack, frames=20), 24000, "wav")
    ref = refaudio.data_url(ref_wav)
    r = httpx.post(stack["url"] + "/v1/audio/speech", timeout=120, json={
        "input": "Hello, this is a cloned voice", "ref_audio": ref, "ref_text": "Hello from the gateway.",
        "max_new_tokens": 8, "seed": 1})
    assert r.status_code == 200, r.text
    assert int(r.headers["x-vllm-omni-input-audio-tokens"]) == 20  # the reference's codec frames (ICL)
    assert decode(r.content) == (8 * 1920, 24000)
    r = httpx.post(stack["url"] + "/v1/audio/speech", timeout=120, json={
        "input": "x-vector only", "ref_audio": ref, "x_vector_only_mode": True, "max_new_tokens": 4, "seed": 1,
        "task_type": "Base", "model": stack["names"]["base"]})
    assert r.status_code == 200, r.text
    assert r.headers["x-vllm-omni-input-audio-tokens"] == "0"


def test_task_routing_errors(stack):
    r = httpx.post(stack["url"] + "/v1/audio/speech", json={
        "input": "Hi", "model": stack["names"]["custom_voice"], "task_type": "VoiceDesign", "instructions": "x"})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == (
        "Qwen3-TTS CustomVoice checkpoint does not support task_type='VoiceDesign'. "
        "Use task_type='CustomVoice' or load the matching VoiceDesign checkpoint.")


# --- disconnect, bad input, errors --------------------------------------------------------------------


def test_mid_stream_disconnect_frees_the_triton_slot(stack):
    log = Path(stack["server"].log_file)
    body = {"input": TEXT, "voice": "vivian", "stream_format": "audio", "response_format": "pcm",
            "max_new_tokens": 4000, "language": "English"}
    with httpx.stream("POST", stack["url"] + "/v1/audio/speech", json=body, timeout=60,
                      headers={"X-Request-Id": "e2e-disconnect-1"}) as r:
        assert r.status_code == 200 and r.headers["x-request-id"] == "e2e-disconnect-1"
        next(r.iter_raw())
    deadline = time.time() + 20
    while "request e2e-disconnect-1 cancelled by the client; released" not in log.read_text(errors="replace"):
        assert time.time() < deadline, "Triton never saw the cancellation"
        time.sleep(0.1)
    # max_active_requests is 1: this only finishes quickly because the slot was released
    # (the abandoned request had ~4000 frames, minutes of work, left).
    t0 = time.time()
    r = httpx.post(stack["url"] + "/v1/audio/speech", json={**body, "stream_format": None, "max_new_tokens": 4},
                   timeout=60)
    assert r.status_code == 200 and time.time() - t0 < 30


BAD_INPUTS = [
    ({"input": ""}, "input"),
    ({"input": "  \n "}, "input"),
    ({"input": "a" * 100_001}, "input"),
    ({"input": "Hi", "voice": "nobody"}, "voice"),
    ({"input": "Hi", "language": "Klingon"}, "language"),
    ({"input": "Hi", "speed": 0.2}, "speed"),
    ({"input": "Hi", "speed": 4.01}, "speed"),
    ({"input": "Hi", "sample_rate": 7999}, "sample_rate"),
    ({"input": "Hi", "sample_rate": 96000}, "sample_rate"),
    ({"input": "Hi", "sample_rate": 44100, "response_format": "opus"}, "sample_rate"),
    ({"input": "Hi", "max_new_tokens": 0}, "max_new_tokens"),
    ({"input": "Hi", "max_new_tokens": 4097}, "max_new_tokens"),
    ({"input": "Hi", "stream": True, "response_format": "flac"}, "response_format"),
    ({"input": "Hi", "stream_format": "audio", "response_format": "aac"}, "response_format"),
    ({"input": "Hi", "stream": True, "response_format": "pcm", "speed": 2.0}, "speed"),
    ({"input": "Hi", "speed": "fast"}, "speed"),
    ({"input": ["Hi"]}, "input"),
    ({"input": "Hi", "seed": "7"}, "seed"),
    ({"input": "Hi", "ref_audio": "data:audio/wav;base64,aGVsbG8gd29ybGQ=", "ref_text": "t"}, "ref_audio"),
    ({"input": "Hi", "ref_audio": "data:audio/wav;base64,!!!!", "ref_text": "t"}, "ref_audio"),
]


def test_extra_params_sample_the_talker(stack, client):
    """`extra_params` temperature/top_k/top_p reach the talker (code 0) as vLLM-Omni applies them: this greedy
    checkpoint samples when given a temperature; the code predictor keeps its own settings."""
    knobs = {"temperature": 0.9, "top_k": 5, "top_p": 0.9}
    r = client.audio.speech.create(model=stack["names"]["custom_voice"], voice="vivian", input=TEXT,
                                   response_format="pcm", extra_body=extra(extra_params=knobs))
    got = np.frombuffer(r.content, np.int16)
    assert_same_audio(got, offline_pcm(stack, do_sample=True, **knobs))
    greedy = encoding.to_int16(offline_pcm(stack))
    assert got.shape != greedy.shape or not np.array_equal(got, greedy)


def test_bad_input_is_400_and_starts_nothing_on_triton(stack):
    before = triton_request_count(stack)
    with httpx.Client(base_url=stack["url"], timeout=30) as c:
        for body, param in BAD_INPUTS:
            r = c.post("/v1/audio/speech", json=body)
            assert r.status_code == 400, (body, r.text)
            err = r.json()["error"]
            assert err["type"] == "BadRequestError" and err["code"] == 400 and err["param"] == param, (body, err)
        r = c.post("/v1/audio/speech", content=b'{"input": ', headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and r.json()["error"]["message"].startswith("Malformed JSON")
    assert triton_request_count(stack) == before


def test_sdk_sees_openai_shaped_errors(stack, client):
    with pytest.raises(openai.BadRequestError) as info:
        client.audio.speech.create(model=stack["names"]["custom_voice"], voice="nobody", input="Hi")
    assert info.value.status_code == 400 and info.value.body["param"] == "voice"
    assert "aiden, dylan" in info.value.body["message"]
    # (tts-1 is an OpenAI alias of the default model now; a name nothing answers to is still a 404)
    with pytest.raises(openai.NotFoundError) as info:
        client.audio.speech.create(model="tts-2-unknown", voice="vivian", input="Hi")
    assert info.value.body == {"message": "The model `tts-2-unknown` does not exist.", "type": "NotFoundError",
                               "param": "model", "code": 404}


def test_unreachable_triton_is_503_with_retry_after(stack):
    cfg = json.loads(json.dumps({"triton_url": f"127.0.0.1:{free_port()}", "models": [
        {"name": "cv", "variant": "custom_voice", "triton_model": "speech_generation",
         "voice_features_model": None, "artifacts_dir": str(stack["artifacts"])}]}))
    port = free_port()
    gw, thread = start_gateway(Settings.from_dict(cfg), port)
    try:
        r = httpx.post(f"http://127.0.0.1:{port}/v1/audio/speech", json={"input": "Hi"}, timeout=30)
        assert r.status_code == 503 and r.headers["retry-after"] == "5"
        assert r.json()["error"]["type"] == "ServiceUnavailableError"
        r = httpx.get(f"http://127.0.0.1:{port}/ready", timeout=30)
        assert r.status_code == 503 and r.json()["triton"] is False
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=30).status_code == 200
    finally:
        gw.should_exit = True
        thread.join(15)


# --- batch, listings -----------------------------------------------------------------------------------


def test_batch_mixes_successes_and_errors(stack):
    r = httpx.post(stack["url"] + "/v1/audio/speech/batch", timeout=300, json={
        "items": [
            {"input": TEXT, "voice": "vivian", "response_format": "mp3"},
            {"input": ""},
            {"input": TEXT},
            {"input": "Hi", "voice": "nobody"},
            {"input": "Designed", "task_type": "VoiceDesign", "instructions": "calm", "max_new_tokens": 4},
        ],
        "voice": "vivian", "language": "English", "seed": SEED, "max_new_tokens": FRAMES,
    })
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["total"], body["succeeded"], body["failed"]) == (5, 3, 2)
    res = body["results"]
    assert res[0]["media_type"] == "audio/mpeg" and res[0]["usage"]["output_tokens"] == FRAMES
    assert res[0]["finish_reason"] == "length"  # the greedy tiny checkpoint runs to max_new_tokens
    assert res[1] == {"index": 1, "status": "error", "error": "Input text cannot be empty", "finish_reason": "error"}
    assert_same_audio(encoding.parse_wav(base64.b64decode(res[2]["audio_data"]))[1], offline_pcm(stack))
    assert res[3]["status"] == "error" and res[3]["error"].startswith("Invalid voice 'nobody'")
    assert res[4]["status"] == "success" and res[4]["usage"]["output_tokens"] == 4


def test_listings_and_readiness(stack):
    with httpx.Client(base_url=stack["url"], timeout=30) as c:
        voices = c.get("/v1/audio/voices").json()
        assert "vivian" in voices["voices"] and voices["uploaded_voices"] == []
        cards = c.get("/v1/models").json()["data"]
        assert [m["id"] for m in cards if "alias_of" not in m] == [
            stack["names"][v] for v in ("custom_voice", "voice_design", "base", "voxcpm2", "omnivoice",
                                        "omnivoice_foreign", "gepard", "gepard_foreign", "voxtral_tts",
                                        "voxtral_tts_foreign", "fish_speech", "fish_speech_foreign",
                                        "cosyvoice3", "cosyvoice3_foreign", "moss_tts_nano",
                                        "moss_tts_nano_foreign")]
        assert {m["id"]: m["alias_of"] for m in cards if "alias_of" in m} == dict.fromkeys(
            ("tts-1", "tts-1-hd", "gpt-4o-mini-tts"), stack["names"]["custom_voice"])
        ready = c.get("/ready")
        assert ready.status_code == 200 and ready.json()["status"] == "ready" and all(ready.json()["models"].values())
    # the three Qwen3-TTS checkpoints' speech tokenizers are identical: one code2wav serves them all
    assert (stack["repo"] / "code2wav").is_dir()
    assert sorted(p.name for p in stack["repo"].iterdir() if p.name.startswith("speech_generation")) == sorted(
        stack["triton_models"].values())


# --- the spec's curl examples, verbatim (port and voice names adapted) -----------------------------------


def spec_curl_examples() -> list[str]:
    text = SPEC.read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", text, re.DOTALL)
    out = []
    for block in blocks:
        for cmd in re.split(r"\n(?=curl )", block.strip()):
            cmd = "\n".join(line for line in cmd.splitlines() if not line.lstrip().startswith("#")).strip()
            if not cmd.startswith("curl") or "8091" not in cmd:
                continue
            path = re.search(r"http://localhost:8091(\S*)", cmd).group(1)
            if (path.startswith("/v1/audio/voices") and "-F" in cmd) or "DELETE" in cmd or "custom_voice_1" in cmd:
                continue  # voice upload / delete / use: test_e2e_voices runs them in document order
            if path.startswith(("/v1/audio/speech", "/v1/audio/voices")):
                out.append(cmd)
    return out


@pytest.mark.skipif(not SPEC.is_file(), reason=f"no spec at {SPEC}")
def test_spec_has_the_curl_examples_we_run():
    cmds = spec_curl_examples()
    assert len(cmds) >= 7
    assert any('"task_type": "VoiceDesign"' in c for c in cmds) and any("/batch" in c for c in cmds)


CURL_EXAMPLES = spec_curl_examples() if SPEC.is_file() else []


def _example_id(cmd: str) -> str:
    path = re.search(r"localhost:8091(\S*)", cmd).group(1)
    out = re.search(r"--output (\S+)", cmd)
    data = re.search(r'"(?:input|task_type|voice)": "([^"]+)"', cmd)
    return "-".join(x for x in (path, out.group(1) if out else "", data.group(1) if data else "") if x)


@pytest.mark.skipif(not SPEC.is_file(), reason=f"no spec at {SPEC}")
@pytest.mark.parametrize("cmd", CURL_EXAMPLES, ids=[_example_id(c) for c in CURL_EXAMPLES])
def test_spec_curl_example_works(stack, tmp_path, cmd):
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    cmd = cmd.replace("localhost:8091", f"127.0.0.1:{stack['port']}")
    cmd = cmd.replace('"voice": "default"', '"voice": "vivian"')  # Gepard's voice -> a served one
    cloning = "https://example.com/reference.wav" in cmd
    uploaded = '"voice": "custom_voice_1"' in cmd
    # Run by bash as a user pastes it; only options to capture the status and body are appended.
    out_name = shlex.split(cmd.replace("\\\n", " "))[-1] if "--output" in cmd else "body"
    script = cmd + " -sS -D headers --max-time 300" + ("" if "--output" in cmd else " --output body")
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, timeout=320)
    assert done.returncode == 0, done.stderr
    status = int((tmp_path / "headers").read_text().split()[1])
    body = (tmp_path / out_name).read_bytes()
    if cloning:
        # example.com is unreachable here (and has no reference.wav anyway): the fetch fails cleanly
        result = json.loads(body)
        if "/batch" in cmd:
            assert status == 200 and result["failed"] == len(result["results"]) == 2
            assert all("ref_audio URL" in x["error"] for x in result["results"]), result
        else:
            assert status == 400 and result["error"]["param"] == "ref_audio"
            assert "ref_audio URL" in result["error"]["message"]
        return
    assert not uploaded
    assert status == 200, body[:500]
    if "/batch" in cmd:
        result = json.loads(body)
        assert result["failed"] == 0 and result["succeeded"] == len(result["results"]) > 0
    elif "/v1/audio/voices" in cmd:
        assert "vivian" in json.loads(body)["voices"]
    else:
        assert body[:4] == b"RIFF" and decode(body)[1] == 24000


# --- schemathesis against the real stack ------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/audio/speech", "/v1/audio/speech/batch"])
@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_schemathesis_against_the_real_stack(stack, path, mode):
    """The same checks as test_gateway_schemathesis, with real Triton answers (a few examples;
    generated frame budgets are capped so that each valid request stays short)."""
    schemathesis = pytest.importorskip("schemathesis", reason="schemathesis==4.32.5 is a test requirement")
    from hypothesis import HealthCheck, Phase, given, settings
    from schema_checks import CHECKS
    from schemathesis import GenerationMode

    schema = schemathesis.openapi.from_url(stack["url"] + "/openapi.json")
    operation = schema[path]["POST"]

    def cap(body):
        if isinstance(body, dict):
            if mode == "positive":
                body["max_new_tokens"] = min(body.get("max_new_tokens") or 4, 4)
            for item in body.get("items") or []:
                if isinstance(item, dict) and mode == "positive":
                    item["max_new_tokens"] = min(item.get("max_new_tokens") or 4, 4)

    @given(case=operation.as_strategy(generation_mode=GenerationMode(mode)))
    @settings(max_examples=12, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
    def run(case):
        cap(case.body)
        case.call_and_validate(base_url=stack["url"], checks=CHECKS)

    run()
