"""The FastAPI app over a fake inference backend: wire format, errors, request ids, streaming,
disconnects, batch, listings, readiness (no Triton)."""

from __future__ import annotations

import base64
import io
import threading
import time

import httpx
import numpy as np
import pytest
import soundfile as sf
from fastapi.testclient import TestClient
from gateway_fixtures import FakeBackend, fake_audio, fake_deployment, start_gateway

from gateway import encoding, refaudio, sse
from gateway.app import create_app
from gateway.families.qwen3_tts import VOICE_ALIASES as DEFAULT_VOICE_ALIASES
from ttscore.backend.triton_server import free_port

pytestmark = pytest.mark.gateway

SPEECH = "/v1/audio/speech"
BATCH = "/v1/audio/speech/batch"


@pytest.fixture(scope="module")
def settings(tmp_path_factory):
    return fake_deployment(tmp_path_factory.mktemp("gw"))


@pytest.fixture
def fake():
    return FakeBackend()


@pytest.fixture
def client(settings, fake):
    with TestClient(create_app(settings, backend_factory=lambda s: fake), raise_server_exceptions=False) as c:
        yield c


def error_of(r: httpx.Response, status: int, param: str | None = "unset") -> dict:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["code"] == status
    if param != "unset":
        assert body["error"]["param"] == param, body
    return body["error"]


def pcm16(x: np.ndarray) -> bytes:
    return encoding.pcm_bytes(x)


# --- non-streaming ------------------------------------------------------------------------------


def test_wav_with_usage_headers_and_request_id(client, fake):
    r = client.post(SPEECH, json={"input": "Hello there", "voice": "ryan", "max_new_tokens": 5})
    assert r.status_code == 200 and r.headers["content-type"] == "audio/wav"
    rate, samples = encoding.parse_wav(r.content)
    assert rate == 24000 and np.array_equal(samples, encoding.to_int16(fake_audio(5)))
    assert r.headers["x-vllm-omni-input-tokens"] == "2" and r.headers["x-vllm-omni-output-tokens"] == "5"
    assert r.headers["x-vllm-omni-total-tokens"] == "7" and r.headers["x-vllm-omni-input-text-tokens"] == "2"
    assert r.headers["x-vllm-omni-input-audio-tokens"] == "0"
    rid = r.headers["x-request-id"]
    assert rid and fake.calls[-1].request_id == rid
    call = fake.calls[-1]
    assert call.model == "speech_generation_tiny-custom-voice"
    assert call.fields["speaker"] == "ryan" and call.fields["task_type"] == "custom_voice"


def test_client_request_id_is_echoed_and_sent_to_triton(client, fake):
    r = client.post(SPEECH, json={"input": "Hi"}, headers={"X-Request-Id": "my-req-42"})
    assert r.headers["x-request-id"] == "my-req-42" and fake.calls[-1].request_id == "my-req-42"
    r = client.post(SPEECH, json={"input": "Hi"}, headers={"X-Request-Id": "bad id with spaces"})
    assert r.headers["x-request-id"] != "bad id with spaces" and r.headers["x-request-id"].startswith("speech-")
    r = client.get("/v1/models", headers={"X-Request-Id": "list-1"})
    assert r.headers["x-request-id"] == "list-1"
    r = client.post(SPEECH, json={"input": ""}, headers={"X-Request-Id": "bad-1"})
    assert r.status_code == 400 and r.headers["x-request-id"] == "bad-1"


@pytest.mark.parametrize(("fmt", "media"), list(encoding.MEDIA_TYPES.items()))
def test_every_format_has_its_content_type(client, fmt, media):
    r = client.post(SPEECH, json={"input": "Hi", "response_format": fmt, "max_new_tokens": 13})
    assert r.status_code == 200 and r.headers["content-type"] == media
    if fmt in ("wav", "flac", "opus"):
        y, rate = sf.read(io.BytesIO(r.content))
        assert rate == 24000 and len(y) == 13 * 1920


def test_sample_rate_and_speed(client):
    r = client.post(SPEECH, json={"input": "Hi", "sample_rate": 16000, "max_new_tokens": 10})
    rate, samples = encoding.parse_wav(r.content)
    assert rate == 16000 and samples.size == 10 * 1920 * 2 // 3
    r = client.post(SPEECH, json={"input": "Hi", "speed": 2.0, "max_new_tokens": 10, "response_format": "flac"})
    y, rate = sf.read(io.BytesIO(r.content))
    assert rate == 24000 and len(y) == 10 * 1920 // 2


def test_every_generation_field_reaches_triton(client, fake):
    r = client.post(SPEECH, json={
        "input": "Hi", "voice": "Eric", "language": "chinese", "instructions": "whisper", "max_new_tokens": 4,
        "initial_codec_chunk_frames": 2, "non_streaming_mode": False, "seed": 9,
    })
    assert r.status_code == 200
    f = fake.calls[-1].fields
    assert f == {"text": "Hi", "task_type": "custom_voice", "speaker": "eric", "language": "chinese",
                 "instructions": "whisper", "non_streaming_mode": False, "max_new_tokens": 4, "seed": 9,
                 "initial_chunk_frames": 2}


def test_voice_object_form(client, fake):
    assert client.post(SPEECH, json={"input": "Hi", "voice": {"id": "serena"}}).status_code == 200
    assert fake.calls[-1].fields["speaker"] == "serena"


def test_voice_design_and_base_route_to_their_models(client, fake):
    r = client.post(SPEECH, json={"input": "Hello world", "task_type": "VoiceDesign",
                                  "instructions": "A warm, friendly female voice with a gentle tone"})
    assert r.status_code == 200 and fake.calls[-1].model == "speech_generation_tiny-voice-design"
    assert "speaker" not in fake.calls[-1].fields
    ref = refaudio.data_url(encoding.encode(fake_audio(10), 24000, "wav"))
    r = client.post(SPEECH, json={"input": "Clone me", "ref_audio": ref, "ref_text": "the transcript",
                                  "max_new_tokens": 3})
    assert r.status_code == 200, r.text
    call = fake.calls[-1]
    assert call.model == "speech_generation_tiny-base" and call.fields["task_type"] == "base"
    assert call.fields["ref_text"] == "the transcript" and call.fields["ref_codes"].shape == (10, 16)
    assert call.fields["x_vector"].shape == (64,)
    assert fake.feature_calls[-1] == ("voice_features", 19200, 24000, r.headers["x-request-id"])
    assert r.headers["x-vllm-omni-input-audio-tokens"] == "10"
    r = client.post(SPEECH, json={"input": "Clone me", "ref_audio": ref, "x_vector_only_mode": True})
    assert r.status_code == 200 and "ref_codes" not in fake.calls[-1].fields
    assert fake.calls[-1].fields["x_vector_only"] is True and r.headers["x-vllm-omni-input-audio-tokens"] == "0"
    # the same reference clip again: its features come from the gateway's cache, not the ensemble
    assert len(fake.feature_calls) == 1
    other = refaudio.data_url(encoding.encode(fake_audio(12), 24000, "wav"))
    assert client.post(SPEECH, json={"input": "Clone me", "ref_audio": other, "ref_text": "t"}).status_code == 200
    assert len(fake.feature_calls) == 2


# --- bad input: 400 with param, never 422, never a Triton request -----------------------------------


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": ""}, "input"),
        ({"input": "   "}, "input"),
        ({"input": "x" * 100_001}, "input"),
        ({"input": "Hi", "voice": "nobody"}, "voice"),
        ({"input": "Hi", "language": "Klingon"}, "language"),
        ({"input": "Hi", "speed": 0.1}, "speed"),
        ({"input": "Hi", "speed": 5}, "speed"),
        ({"input": "Hi", "sample_rate": 4000}, "sample_rate"),
        ({"input": "Hi", "sample_rate": 22050, "response_format": "opus"}, "sample_rate"),
        ({"input": "Hi", "max_new_tokens": 0}, "max_new_tokens"),
        ({"input": "Hi", "max_new_tokens": 100000}, "max_new_tokens"),
        ({"input": "Hi", "stream": True, "response_format": "flac"}, "response_format"),
        ({"input": "Hi", "stream_format": "audio", "response_format": "aac"}, "response_format"),
        ({"input": "Hi", "stream": True, "speed": 1.5}, "speed"),
        ({"input": "Hi", "speed": "fast"}, "speed"),
        ({"input": 42}, "input"),
        ({"input": "Hi", "stream": "yes"}, "stream"),
        ({"input": "Hi", "seed": 1.5}, "seed"),
        ({"input": "Hi", "max_new_tokens": "12"}, "max_new_tokens"),
        ({"input": "Hi", "response_format": "ogg"}, "response_format"),
        ({"input": "Hi", "unknown_field": 1}, "unknown_field"),
        ({"voice": "vivian"}, "input"),
        ({"input": "Hi", "ref_audio": "data:audio/wav;base64,bm90IGF1ZGlv", "ref_text": "t"}, "ref_audio"),
        ({"input": "Hi", "ref_audio": "data:audio/wav;base64,%%%", "ref_text": "t"}, "ref_audio"),
        ({"input": "Hi", "task_type": "Base", "ref_audio": "https://example.com/reference.wav", "ref_text": "t"},
         "ref_audio"),
    ],
)
def test_bad_input_is_400_and_starts_nothing(client, fake, body, param):
    err = error_of(client.post(SPEECH, json=body), 400, param)
    assert err["type"] == "BadRequestError" and err["message"]
    assert fake.calls == [] and fake.feature_calls == []


def test_malformed_json_wrong_content_type_and_non_object(client, fake):
    r = client.post(SPEECH, content=b'{"input": "Hi",', headers={"content-type": "application/json"})
    assert "Malformed JSON" in error_of(r, 400, None)["message"]
    r = client.post(SPEECH, content=b"input=Hi", headers={"content-type": "application/x-www-form-urlencoded"})
    error_of(r, 400, None)
    error_of(client.post(SPEECH, json=["Hi"]), 400, None)
    error_of(client.post(SPEECH, content=b""), 400)
    assert fake.calls == []


def test_error_messages_list_the_valid_choices(client):
    msg = error_of(client.post(SPEECH, json={"input": "Hi", "voice": "bob"}), 400, "voice")["message"]
    assert msg == "Invalid voice 'bob'. Supported: aiden, dylan, eric, ono_anna, ryan, serena, sohee, uncle_fu, vivian"
    msg = error_of(client.post(SPEECH, json={"input": "Hi", "language": "xx"}), 400, "language")["message"]
    assert msg.startswith("Invalid language 'xx'. Supported: Auto, Chinese, English")


def test_unknown_model_route_and_method(client):
    err = error_of(client.post(SPEECH, json={"input": "Hi", "model": "xxx"}), 404, "model")
    assert err == {"message": "The model `xxx` does not exist.", "type": "NotFoundError", "param": "model", "code": 404}
    error_of(client.get("/v1/nothing"), 404)
    r = client.get(SPEECH)
    error_of(r, 405)
    assert "POST" in r.headers.get("allow", "")


def test_triton_side_invalid_arg_is_400_before_the_stream_starts(client):
    err = error_of(client.post(SPEECH, json={"input": "fail-invalid", "stream": True}), 400, "input")
    assert err["message"] == "text is not speakable"


# --- 503 / 500 ------------------------------------------------------------------------------------


def test_not_ready_is_503_with_retry_after(settings):
    fake = FakeBackend(ready=False)
    with TestClient(create_app(settings, backend_factory=lambda s: fake)) as c:
        r = c.post(SPEECH, json={"input": "Hi"})
        err = error_of(r, 503, None)
        assert r.headers["retry-after"] == "5" and "not ready" in err["message"]
        assert fake.calls == []
        r = c.get("/ready")
        assert r.status_code == 503 and r.json()["status"] == "not_ready" and r.headers["retry-after"] == "5"
        assert c.get("/health").json() == {"status": "ok"}
        # bad input is still a 400 while Triton is down
        error_of(c.post(SPEECH, json={"input": ""}), 400, "input")
        fake.ready = True
        assert c.post(SPEECH, json={"input": "Hi"}).status_code == 200
        assert c.get("/ready").json()["status"] == "ready"


def test_one_model_not_ready(settings):
    fake = FakeBackend(not_ready_models={"voice_features"})
    with TestClient(create_app(settings, backend_factory=lambda s: fake)) as c:
        r = c.get("/ready")
        assert r.status_code == 503 and r.json()["models"]["voice_features"] is False
        assert r.json()["models"]["speech_generation_tiny-custom-voice"] is True
        error_of(c.post(SPEECH, json={"input": "Hi"}), 503)


def test_queue_full_is_503(client):
    r = client.post(SPEECH, json={"input": "fail-unavailable"})
    error_of(r, 503, None)
    assert r.headers["retry-after"] == "5"


def test_internal_errors_are_500_generic_with_request_id(client, monkeypatch):
    r = client.post(SPEECH, json={"input": "fail-internal"}, headers={"X-Request-Id": "boom-1"})
    err = error_of(r, 500, None)
    assert err["message"] == "Internal server error (request id: boom-1)" and err["type"] == "InternalServerError"
    assert r.headers["x-request-id"] == "boom-1"

    def broken(*args, **kwargs):
        raise RuntimeError("a bug with a secret")

    monkeypatch.setattr(encoding, "render", broken)
    r = client.post(SPEECH, json={"input": "Hi"}, headers={"X-Request-Id": "bug-2"})
    err = error_of(r, 500, None)
    assert "secret" not in r.text and "bug-2" in err["message"] and r.headers["x-request-id"] == "bug-2"


# --- streaming --------------------------------------------------------------------------------------


def test_raw_audio_stream(client):
    body = {"input": "Hi", "stream_format": "audio", "max_new_tokens": 9}
    r = client.post(SPEECH, json={**body, "response_format": "pcm"})
    assert r.status_code == 200 and r.headers["content-type"] == "audio/pcm"
    assert r.content == pcm16(fake_audio(9))
    r = client.post(SPEECH, json={**body, "response_format": "wav"})
    assert r.headers["content-type"] == "audio/wav" and r.content[4:8] == b"\xff\xff\xff\xff"
    assert r.content[44:] == pcm16(fake_audio(9))
    assert "x-vllm-omni-output-tokens" not in r.headers  # usage is unknown when the headers go out
    r = client.post(SPEECH, json={**body, "response_format": "pcm", "sample_rate": 8000})
    assert r.content == encoding.render(fake_audio(9), 24000, "pcm", 8000)


def test_sse_stream_deltas_concatenate_to_the_raw_stream(client):
    body = {"input": "Hello world", "max_new_tokens": 9, "response_format": "pcm"}
    raw = client.post(SPEECH, json={**body, "stream_format": "audio"}).content
    r = client.post(SPEECH, json={**body, "stream": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = sse.parse(r.content)
    names = [n for n, _ in events]
    assert names[-1] == "speech.audio.done" and set(names[:-1]) == {"speech.audio.delta"} and len(names) >= 3
    audio = b"".join(base64.b64decode(d["audio"]) for n, d in events if n == "speech.audio.delta")
    assert audio == raw
    assert all(d["response_format"] == "pcm" for n, d in events[:-1])
    whole = client.post(SPEECH, json=body)
    usage = events[-1][1]["usage"]
    assert usage == {"input_tokens": 2, "output_tokens": 9, "total_tokens": 11,
                     "input_token_details": {"text_tokens": 2, "audio_tokens": 0}}
    assert whole.headers["x-vllm-omni-total-tokens"] == str(usage["total_tokens"])
    r = client.post(SPEECH, json={**body, "response_format": "wav", "stream_format": "sse"})
    first = base64.b64decode(sse.parse(r.content)[0][1]["audio"])
    assert first[:4] == b"RIFF"


def test_sse_failure_after_start_is_an_error_event(client, fake):
    r = client.post(SPEECH, json={"input": "fail-midstream", "stream": True, "response_format": "pcm",
                                  "max_new_tokens": 9}, headers={"X-Request-Id": "mid-1"})
    assert r.status_code == 200
    events = sse.parse(r.content)
    assert events[0][0] == "speech.audio.delta"
    assert events[-1] == ("speech.audio.error", {"type": "speech.audio.error", "error": {
        "message": "Internal server error (request id: mid-1)", "type": "server_error", "param": None, "code": 500}})
    assert "speech.audio.done" not in [n for n, _ in events]


# --- batch -------------------------------------------------------------------------------------------


def test_batch_mix_of_success_and_errors(client, fake):
    r = client.post(BATCH, json={
        "items": [
            {"input": "Hello!", "voice": "vivian", "response_format": "mp3"},
            {"input": "", "voice": "ryan"},
            {"input": "你好！", "voice": "ryan", "language": "Chinese"},
            {"input": "Hi", "voice": "nobody"},
            {"input": "fail-internal"},
        ],
        "response_format": "wav", "max_new_tokens": 3,
    }, headers={"X-Request-Id": "b1"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["id"].startswith("speech-batch-") and (body["total"], body["succeeded"], body["failed"]) == (5, 2, 3)
    res = body["results"]
    assert [x["index"] for x in res] == [0, 1, 2, 3, 4]
    assert res[0]["status"] == "success" and res[0]["media_type"] == "audio/mpeg"
    assert res[0]["usage"]["output_tokens"] == 3 and "error" not in res[0]
    assert res[0]["finish_reason"] == "stop"
    assert res[1] == {"index": 1, "status": "error", "error": "Input text cannot be empty", "finish_reason": "error"}
    assert res[2]["media_type"] == "audio/wav" and encoding.parse_wav(base64.b64decode(res[2]["audio_data"]))[0] == 24000
    assert res[3]["status"] == "error" and "Invalid voice 'nobody'" in res[3]["error"]
    assert res[4] == {"index": 4, "status": "error", "error": "Internal server error (request id: b1-4)",
                      "finish_reason": "error"}
    ids = sorted(c.request_id for c in fake.calls)
    assert ids == ["b1-0", "b1-2", "b1-4"]
    by_id = {c.request_id: c.fields for c in fake.calls}
    assert by_id["b1-2"]["language"] == "chinese" and by_id["b1-0"]["speaker"] == "vivian"


def test_batch_items_run_concurrently(client, fake):
    r = client.post(BATCH, json={"items": [{"input": "slow"}] * 4, "max_new_tokens": 8})
    assert r.json()["succeeded"] == 4
    assert fake.max_concurrent == 4


def test_batch_limits_and_model(client, fake):
    error_of(client.post(BATCH, json={"items": []}), 400, "items")
    error_of(client.post(BATCH, json={"items": [{"input": "a"}] * 33}), 400, "items")
    error_of(client.post(BATCH, json={"items": [{"input": "a"}], "model": "nope"}), 404, "model")
    error_of(client.post(BATCH, json={"items": [{"voice": "a"}]}), 400, "items[0].input")
    error_of(client.post(BATCH, json={"items": [{"input": "a", "speed": 9}]}), 400, "items[0].speed")
    r = client.post(BATCH, json={"items": [{"input": "a"}] * 32, "max_new_tokens": 1})
    assert r.json()["succeeded"] == 32


def test_batch_shared_reference_audio(client, fake):
    ref = refaudio.data_url(encoding.encode(fake_audio(5), 24000, "wav"))
    r = client.post(BATCH, json={"items": [{"input": "First."}, {"input": "Second."}], "task_type": "Base",
                                 "ref_audio": ref, "ref_text": "Transcript", "max_new_tokens": 2})
    assert r.json()["succeeded"] == 2
    # one shared clip: the voice_features ensemble runs once for the whole batch
    assert all(c.model == "speech_generation_tiny-base" for c in fake.calls) and len(fake.feature_calls) == 1


# --- listings, health, schema -------------------------------------------------------------------------


def test_voices_models_health(client):
    voices = client.get("/v1/audio/voices").json()
    assert voices["voices"] == ["aiden", "dylan", "eric", "ono_anna", "ryan", "serena", "sohee", "uncle_fu", "vivian"]
    assert voices["uploaded_voices"] == [] and voices["voice_aliases"] == DEFAULT_VOICE_ALIASES
    models = client.get("/v1/models").json()
    assert models["object"] == "list"
    assert [(m["id"], m["task_type"], m.get("alias_of")) for m in models["data"]] == [
        ("tiny-custom-voice", "CustomVoice", None), ("tiny-voice-design", "VoiceDesign", None),
        ("tiny-base", "Base", None), ("tts-1", "CustomVoice", "tiny-custom-voice"),
        ("tts-1-hd", "CustomVoice", "tiny-custom-voice"), ("gpt-4o-mini-tts", "CustomVoice", "tiny-custom-voice")]
    assert client.get("/health").json() == {"status": "ok"}
    r = client.get("/ready")
    assert r.status_code == 200 and r.json()["status"] == "ready" and r.json()["triton"] is True


def test_openapi_has_no_422_and_documents_errors(client):
    spec = client.get("/openapi.json").json()
    assert "422" not in str(spec["paths"]) and "HTTPValidationError" not in spec["components"]["schemas"]
    speech = spec["paths"][SPEECH]["post"]["responses"]
    assert {"200", "400", "404", "500", "503"} <= set(speech)
    assert {"audio/wav", "audio/mpeg", "audio/pcm", "text/event-stream"} <= set(speech["200"]["content"])


def test_lifespan_closes_the_backend(settings):
    fake = FakeBackend()
    with TestClient(create_app(settings, backend_factory=lambda s: fake)):
        assert not fake.closed
    assert fake.closed


# --- over a real HTTP server: disconnects and cut streams ------------------------------------------


@pytest.fixture(scope="module")
def served(settings):
    fake = FakeBackend()
    port = free_port()
    server, thread = start_gateway_with(settings, fake, port)
    yield f"http://127.0.0.1:{port}", fake
    server.should_exit = True
    thread.join(10)


def start_gateway_with(settings, fake, port):
    import gateway.app as app_module

    original = app_module._triton_backend
    app_module._triton_backend = lambda s: (lambda url: fake)  # every endpoint's client
    try:
        return start_gateway(settings, port)
    finally:
        app_module._triton_backend = original


def wait_for(predicate, timeout=5.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_disconnect_mid_stream_cancels_the_backend_stream(served):
    url, fake = served
    body = {"input": "slow", "stream_format": "audio", "response_format": "pcm", "max_new_tokens": 2000}
    with httpx.stream("POST", url + SPEECH, json=body, headers={"X-Request-Id": "gone-1"}, timeout=10) as r:
        assert r.status_code == 200
        next(r.iter_raw())
    assert wait_for(lambda: any(c.request_id == "gone-1" and c.cancelled for c in fake.calls))
    call = next(c for c in fake.calls if c.request_id == "gone-1")
    assert not call.finished and call.chunks_sent < 100


def test_disconnect_during_sse_cancels(served):
    url, fake = served
    body = {"input": "slow", "stream": True, "response_format": "pcm", "max_new_tokens": 2000}
    with httpx.stream("POST", url + SPEECH, json=body, headers={"X-Request-Id": "gone-2"}, timeout=10) as r:
        next(r.iter_lines())
    assert wait_for(lambda: any(c.request_id == "gone-2" and c.cancelled for c in fake.calls))


def test_disconnect_during_a_non_streaming_request_cancels(served):
    url, fake = served
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(url + SPEECH, json={"input": "slow", "max_new_tokens": 2000},
                   headers={"X-Request-Id": "gone-3"}, timeout=0.5)
    assert wait_for(lambda: any(c.request_id == "gone-3" and c.cancelled for c in fake.calls))


def test_raw_stream_failure_after_start_cuts_the_body(served):
    url, _ = served
    body = {"input": "fail-midstream", "stream_format": "audio", "response_format": "pcm", "max_new_tokens": 9}
    with pytest.raises(httpx.RemoteProtocolError):
        with httpx.stream("POST", url + SPEECH, json=body, timeout=10) as r:
            assert r.status_code == 200
            for _ in r.iter_raw():
                pass


def test_concurrent_streams_over_http(served):
    url, _ = served
    results = []

    def one(i):
        r = httpx.post(url + SPEECH, json={"input": f"hi {i}", "stream_format": "audio", "response_format": "pcm",
                                           "max_new_tokens": 7}, timeout=10)
        results.append(r.content == pcm16(fake_audio(7)))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 6


def test_stored_voice_hook_routes_to_base_with_its_features(settings):
    from gateway.planning import StoredVoice

    asked = []

    async def features(x_vector_only):
        asked.append(x_vector_only)
        return np.ones(64, np.float32), None if x_vector_only else np.zeros((7, 16), np.int64)

    class Store:
        def resolve_voice(self, name):
            return StoredVoice(name, ref_text="hi there", features=features) if name == "custom_voice_1" else None

        def uploaded_voices(self):
            return [{"name": "custom_voice_1", "consent": "c", "created_at": 1, "file_size": 10,
                     "mime_type": "audio/wav"}]

    fake = FakeBackend()
    with TestClient(create_app(settings, backend_factory=lambda s: fake, voices=Store())) as c:
        r = c.post(SPEECH, json={"input": "Hello, this is a cloned voice", "voice": "custom_voice_1"})
        assert r.status_code == 200, r.text
        call = fake.calls[-1]
        assert call.model == "speech_generation_tiny-base" and call.fields["ref_text"] == "hi there"
        assert call.fields["ref_codes"].shape == (7, 16) and asked == [False]
        assert r.headers["x-vllm-omni-input-audio-tokens"] == "7"
        voices = c.get("/v1/audio/voices").json()
        assert voices["voices"][-1] == "custom_voice_1" and voices["uploaded_voices"][0]["name"] == "custom_voice_1"
        assert "ref_text" not in voices["uploaded_voices"][0]
