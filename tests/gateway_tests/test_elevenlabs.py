"""The ElevenLabs dialect over a fake Triton backend: every endpoint, message and error, driven the way
ElevenLabs' SDK and pipecat drive it (gateway.elevenlabs)."""

from __future__ import annotations

import base64
import json
from dataclasses import replace

import pytest
from gateway_fixtures import ALIGNER_MODEL, FakeBackend, fake_app_client
from starlette.websockets import WebSocketDisconnect

from gateway.elevenlabs import session as el_session
from gateway.elevenlabs import wire

pytestmark = pytest.mark.gateway

TTS = "/v1/text-to-speech"


FRAMES = 3  # frames per request (the fake speaks max_new_tokens frames; the family's default is 2048)


@pytest.fixture(autouse=True)
def short_audio(monkeypatch):
    """The dialect's requests and the Speech API's (speech()) take FRAMES frames: small and equal."""
    original = wire.speech_fields
    monkeypatch.setattr(wire, "speech_fields", lambda *a, **k: replace(original(*a, **k), max_new_tokens=FRAMES))


@pytest.fixture
def fake():
    return FakeBackend()


@pytest.fixture
def client(tmp_path, fake):
    with fake_app_client(tmp_path, fake) as c:
        yield c


@pytest.fixture
def aligned(tmp_path, fake):
    """A deployment with a forced aligner (FakeBackend's: the words evenly over the audio)."""
    with fake_app_client(tmp_path, fake, aligner_model=ALIGNER_MODEL) as c:
        yield c


def speech(client, **body):  # the Speech API's answer for comparison
    r = client.post("/v1/audio/speech", json={"voice": "vivian", "input": "Hello there.", "max_new_tokens": FRAMES,
                                              **body})
    assert r.status_code == 200, r.text
    return r.content


# --- HTTP ------------------------------------------------------------------------------------------


def test_convert_pcm_equals_the_speech_api(client):
    r = client.post(f"{TTS}/vivian?output_format=pcm_24000", json={"text": "Hello there."})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "audio/pcm"
    assert r.content == speech(client, response_format="pcm") and len(r.content) > 0


def test_convert_default_is_mp3_and_resampled_formats(client):
    r = client.post(f"{TTS}/vivian", json={"text": "Hello there."})
    assert r.status_code == 200 and r.headers["content-type"] == "audio/mpeg"
    assert r.content == speech(client, response_format="mp3", sample_rate=44100)
    r16 = client.post(f"{TTS}/vivian?output_format=pcm_16000", json={"text": "Hello there."})
    assert r16.content == speech(client, response_format="pcm", sample_rate=16000)


def test_convert_ulaw_is_headerless(client):
    r = client.post(f"{TTS}/vivian?output_format=ulaw_8000", json={"text": "Hello there."})
    assert r.status_code == 200 and r.headers["content-type"] == "audio/basic"
    whole = speech(client, response_format="ulaw")  # the Speech API's file: a G.711 WAV
    assert whole[:4] == b"RIFF" and r.content == whole[len(whole) - len(r.content):]
    assert len(r.content) == len(speech(client, response_format="pcm", sample_rate=8000)) // 2


def test_stream_equals_the_speech_api_stream(client):
    with client.stream("POST", f"{TTS}/vivian/stream?output_format=pcm_22050", json={"text": "Hello there."}) as r:
        assert r.status_code == 200 and r.headers["content-type"] == "audio/pcm"
        got = b"".join(r.iter_bytes())
    assert got == speech(client, response_format="pcm", sample_rate=22050, stream_format="audio")


def test_speed_honoured_whole_refused_streamed_other_settings_ignored(client):
    plain = client.post(f"{TTS}/vivian?output_format=pcm_24000", json={"text": "Hello there."}).content
    ignored = client.post(f"{TTS}/vivian?output_format=pcm_24000", json={
        "text": "Hello there.", "voice_settings": {"stability": 0.1, "similarity_boost": 0.9, "style": 0.5,
                                                   "use_speaker_boost": True}}).content
    assert ignored == plain
    fast = client.post(f"{TTS}/vivian?output_format=pcm_24000",
                       json={"text": "Hello there.", "voice_settings": {"speed": 1.2}})
    assert fast.status_code == 200 and fast.content == speech(client, response_format="pcm", speed=1.2)
    assert len(fast.content) < len(plain)
    r = client.post(f"{TTS}/vivian/stream", json={"text": "Hello there.", "voice_settings": {"speed": 1.2}})
    assert r.status_code == 400 and r.json()["detail"]["status"] == "invalid_speed"


def test_with_timestamps_without_and_with_an_aligner(client, aligned, fake):
    plain = client.post(f"{TTS}/vivian?output_format=pcm_24000", json={"text": "Hello there."}).content
    r = client.post(f"{TTS}/vivian/with-timestamps?output_format=pcm_24000", json={"text": "Hello there."})
    assert r.status_code == 200
    body = r.json()
    assert base64.b64decode(body["audio_base64"]) == plain
    assert body["alignment"] is None and body["normalized_alignment"] is None
    body = aligned.post(f"{TTS}/vivian/with-timestamps?output_format=pcm_24000", json={"text": "Hello there."}).json()
    assert base64.b64decode(body["audio_base64"]) == plain
    assert [c[0] for c in fake.aligner_calls] == ["Hello there."]
    al = body["alignment"]
    assert al["characters"] == list("Hello there.")
    starts, ends = al["character_start_times_seconds"], al["character_end_times_seconds"]
    assert starts[0] == 0.0 and ends[-1] == pytest.approx(len(plain) / 2 / 24000, abs=1e-3)
    assert all(a <= b for a, b in zip(starts, ends, strict=True)) and starts == sorted(starts)
    half = len(plain) / 2 / 24000 / 2  # the fake aligner's two words share the clip evenly
    assert starts[6] == pytest.approx(half, abs=1e-3) and ends[4] == pytest.approx(half, abs=1e-3)
    assert body["normalized_alignment"] == al


def test_stream_with_timestamps_lines(client, aligned):
    url = f"{TTS}/vivian/stream/with-timestamps?output_format=pcm_24000"
    with client.stream("POST", url, json={"text": "Hello there."}) as r:
        assert r.status_code == 200
        lines = [json.loads(x) for x in r.iter_lines() if x]
    assert len(lines) >= 2 and all(x["alignment"] is None for x in lines)
    audio = b"".join(base64.b64decode(x["audio_base64"]) for x in lines)
    assert audio == speech(client, response_format="pcm", stream_format="audio")
    with aligned.stream("POST", url, json={"text": "Hello there."}) as r:
        lines = [json.loads(x) for x in r.iter_lines() if x]
    assert lines[-1]["audio_base64"] == "" and lines[-1]["alignment"]["characters"] == list("Hello there.")
    assert all(x["alignment"] is None for x in lines[:-1])


def test_voices_listing_and_the_speech_api_listing_unchanged(client):
    r = client.get("/v1/voices")
    assert r.status_code == 200
    voices = {v["voice_id"]: v for v in r.json()["voices"]}
    assert "vivian" in voices and voices["vivian"]["category"] == "premade" and voices["vivian"]["name"] == "vivian"
    assert "vivian" in client.get("/v1/audio/voices").json()["voices"]


def test_model_id_names_a_served_model_or_alias(client):
    for model in ("tiny-custom-voice", "tts-1"):
        r = client.post(f"{TTS}/vivian?output_format=pcm_24000", json={"text": "Hello there.", "model_id": model})
        assert r.status_code == 200 and r.content == speech(client, response_format="pcm")
    r = client.post(f"{TTS}/vivian", json={"text": "Hi.", "model_id": "eleven_flash_v2_5"})
    assert r.status_code == 404 and r.json()["detail"]["status"] == "model_not_found"


@pytest.mark.parametrize(("path", "body", "status", "check"), [
    ("/nobody", {"text": "Hi."}, 404, lambda d: d["status"] == "voice_not_found"),
    ("/vivian?output_format=wav_16000", {"text": "Hi."}, 422, lambda d: d[0]["loc"] == ["query", "output_format"]),
    ("/vivian", {"model_id": "x"}, 422, lambda d: d[0]["loc"] == ["body", "text"]),
    ("/vivian", "not json", 422, lambda d: d[0]["type"] == "json_invalid"),
    ("/vivian", {"text": ""}, 400, lambda d: d["status"] == "invalid_input"),
    ("/vivian/stream", {"text": "Hi.", "seed": "x"}, 422, lambda d: d[0]["loc"] == ["body", "seed"]),
])
def test_bad_input_gets_elevenlabs_errors_and_the_server_keeps_serving(client, path, body, status, check):
    kwargs = {"content": body} if isinstance(body, str) else {"json": body}
    r = client.post(f"{TTS}{path}", **kwargs)
    assert r.status_code == status, r.text
    assert check(r.json()["detail"])
    assert client.post(f"{TTS}/vivian", json={"text": "Hi."}).status_code == 200
    assert client.post("/v1/audio/speech", json={"input": "x", "voice": "nobody"}).json()["error"]["param"] == "voice"


def test_xi_api_key_uses_the_same_key_store(tmp_path, fake):
    with fake_app_client(tmp_path, fake, api_keys=["sekret"]) as c:
        r = c.post(f"{TTS}/vivian", json={"text": "Hi."})
        assert r.status_code == 401 and r.json()["detail"]["status"] == "invalid_api_key"
        r = c.post(f"{TTS}/vivian", json={"text": "Hi."}, headers={"xi-api-key": "wrong"})
        assert r.status_code == 401 and r.json()["detail"]["status"] == "invalid_api_key"
        assert c.post(f"{TTS}/vivian", json={"text": "Hi."}, headers={"xi-api-key": "sekret"}).status_code == 200
        assert c.get("/v1/voices", headers={"Authorization": "Bearer sekret"}).status_code == 200
        # the Speech API keeps its own error shape
        assert c.post("/v1/audio/speech", json={"input": "x"}).json()["error"]["code"] == "invalid_api_key"


# --- WebSocket -------------------------------------------------------------------------------------


def messages(ws) -> tuple[list[dict], int | None]:
    """Every message until the server closes (and the close code)."""
    out = []
    while True:
        m = ws.receive()
        if m["type"] == "websocket.close":
            return out, m.get("code")
        out.append(json.loads(m["text"]))


def audio_of(msgs, context=None) -> bytes:
    return b"".join(base64.b64decode(m["audio"]) for m in msgs
                    if m.get("audio") and (context is None or m.get("contextId") == context))


def test_stream_input_incremental(client, fake):
    url = f"{TTS}/vivian/stream-input?output_format=pcm_24000&model_id=tiny-custom-voice"
    with client.websocket_connect(url) as ws:
        ws.send_json({"text": " ", "voice_settings": {"stability": 0.5}, "generation_config": {
            "chunk_length_schedule": [50, 90]}})
        ws.send_json({"text": "Hello there "})
        ws.send_json({"text": "my friend. ", "try_trigger_generation": True})
        ws.send_json({"text": ""})
        msgs, code = messages(ws)
    assert code == 1000 and msgs[-1] == {"isFinal": True}
    assert all(m["alignment"] is None and m["isFinal"] is None for m in msgs[:-1])
    open_calls = [c for c in fake.calls if c.text_key]
    assert len(open_calls) == 1 and open_calls[0].fields["text"] == "Hello there my friend. "
    assert len(audio_of(msgs)) == 2 * 4 * 1920  # the fake speaks a frame per word


def sentence_mode(monkeypatch):
    monkeypatch.setattr(el_session, "takes_open_text", lambda plan: False)


def test_stream_input_sentences_schedule_and_trigger(client, fake, monkeypatch):
    sentence_mode(monkeypatch)
    url = f"{TTS}/vivian/stream-input?output_format=pcm_24000&auto_mode=false"
    with client.websocket_connect(url) as ws:
        ws.send_json({"text": " ", "generation_config": {"chunk_length_schedule": [50]}})
        ws.send_json({"text": "One sentence here. And then a much longer text that has no end for a while "})
        ws.send_json({"text": "more words ", "try_trigger_generation": True})
        ws.send_json({"text": "the rest", "flush": True})
        ws.send_json({"text": ""})
        msgs, code = messages(ws)
    assert code == 1000 and msgs[-1] == {"isFinal": True}
    texts = [c.fields["text"] for c in fake.calls]
    assert texts == ["One sentence here.", "And then a much longer text that has no end for a",
                     "while more", "words the rest"]
    assert len(audio_of(msgs)) == 4 * FRAMES * 1920 * 2  # 16-bit samples of FRAMES frames each


def test_stream_input_alignment_with_an_aligner(aligned, fake):
    """With an aligner the sentences are generated one a request (words are timed a sentence at a time), each
    followed by its alignment."""
    with aligned.websocket_connect(f"{TTS}/vivian/stream-input?output_format=pcm_24000&auto_mode=true") as ws:
        ws.send_json({"text": " "})
        ws.send_json({"text": "Hi there. Bye now. "})
        ws.send_json({"text": ""})
        msgs, _ = messages(ws)
    aligned = [m for m in msgs if m.get("alignment")]
    assert [m["alignment"]["chars"] for m in aligned] == [list("Hi there."), list("Bye now.")]
    one = aligned[0]["alignment"]
    assert one == aligned[0]["normalizedAlignment"] and one["charStartTimesMs"][0] == 0
    assert one["charStartTimesMs"][-1] + one["charDurationsMs"][-1] == round(FRAMES * 1920 / 24000 * 1000)
    assert not [c for c in fake.calls if c.text_key]  # no incremental generation
    assert [c[0] for c in fake.aligner_calls] == ["Hi there.", "Bye now."]


@pytest.mark.parametrize(("url", "code"), [
    (f"{TTS}/nobody/stream-input", "voice_not_found"),
    (f"{TTS}/vivian/stream-input?output_format=flac", "invalid_request"),
    (f"{TTS}/vivian/stream-input?model_id=nope", "model_not_found"),
    (f"{TTS}/vivian/stream-input?inactivity_timeout=999", "invalid_request"),
])
def test_stream_input_refused_at_connect(client, url, code):
    with client.websocket_connect(url) as ws:
        msgs, close = messages(ws)
    assert close == 1008 and msgs[0]["error"] == code and msgs[0]["code"] == 1008


@pytest.mark.parametrize("bad", ["not json", "[1]", json.dumps({"text": 5}), json.dumps({"text": "x", "flush": {"a": 1}})])
def test_malformed_messages_close_with_1008_and_the_server_keeps_serving(client, bad):
    with client.websocket_connect(f"{TTS}/vivian/stream-input?output_format=pcm_16000") as ws:
        ws.send_text(bad)
        msgs, close = messages(ws)
    assert close == 1008 and msgs[-1]["error"] == "invalid_message"
    assert client.post(f"{TTS}/vivian", json={"text": "Hi."}).status_code == 200


def test_text_after_the_end_is_an_error(client, monkeypatch):
    sentence_mode(monkeypatch)
    with client.websocket_connect(f"{TTS}/vivian/stream-input?output_format=pcm_16000") as ws:
        ws.send_json({"text": " "})
        ws.send_json({"text": "slow."})
        ws.send_json({"text": ""})
        ws.send_json({"text": "more text "})
        msgs, close = messages(ws)
    assert close == 1008 and msgs[-1]["error"] == "invalid_message" and "after the end" in msgs[-1]["message"]


def test_inactivity_timeout(client):
    with client.websocket_connect(f"{TTS}/vivian/stream-input?inactivity_timeout=1") as ws:
        ws.send_json({"text": " "})
        msgs, close = messages(ws)
    assert close == 1008 and msgs[-1]["error"] == "input_timeout_exceeded"


def test_key_in_the_first_message(tmp_path, fake):
    with fake_app_client(tmp_path, fake, api_keys=["sekret"]) as c:
        url = f"{TTS}/vivian/stream-input?output_format=pcm_16000"
        with c.websocket_connect(url) as ws:
            ws.send_json({"text": " ", "xi-api-key": "sekret"})
            ws.send_json({"text": "Hello. "})
            ws.send_json({"text": ""})
            msgs, close = messages(ws)
        assert close == 1000 and audio_of(msgs)
        with c.websocket_connect(url) as ws:
            ws.send_json({"text": " ", "xi_api_key": "wrong"})
            msgs, close = messages(ws)
        assert close == 1008 and msgs[-1]["error"] == "invalid_api_key"
        with pytest.raises(WebSocketDisconnect), c.websocket_connect(url, headers={"xi-api-key": "wrong"}) as ws:
            msg = ws.receive_json()
            assert msg["error"] == "invalid_api_key"
            ws.receive_json()
        with pytest.raises(WebSocketDisconnect), c.websocket_connect("/v1/audio/speech/stream") as ws:
            assert ws.receive_json()["type"] == "error"  # the Speech API's socket: no key in a message
            ws.receive_json()


# --- multi-stream-input ----------------------------------------------------------------------------


def test_multi_stream_contexts_flush_close_and_barge_in(client, fake):
    url = f"{TTS}/vivian/multi-stream-input?output_format=pcm_24000"
    with client.websocket_connect(url) as ws:
        ws.send_json({"text": " ", "context_id": "a", "voice_settings": {"speed": 1.0}})
        ws.send_json({"text": "Hello world ", "context_id": "a"})
        ws.send_json({"text": "", "context_id": "a"})  # keepalive
        ws.send_json({"context_id": "a", "flush": True})
        ws.send_json({"context_id": "a", "close_context": True})
        got = []
        while not got or got[-1] != {"isFinal": True, "contextId": "a"}:
            got.append(ws.receive_json())
        assert audio_of(got, "a") and all(m.get("contextId") == "a" for m in got)
        # barge-in: an unflushed context is cancelled at once, the next one is served
        ws.send_json({"text": " ", "context_id": "b"})
        ws.send_json({"text": "An answer that is interrupted ", "context_id": "b"})
        first = ws.receive_json()
        assert first["contextId"] == "b" and first["audio"]
        ws.send_json({"context_id": "b", "close_context": True})
        rest = []
        while not rest or rest[-1] != {"isFinal": True, "contextId": "b"}:
            rest.append(ws.receive_json())
        ws.send_json({"text": "Next turn ", "context_id": "c", "flush": True})
        ws.send_json({"context_id": "c", "close_context": True})
        after = []
        while not after or after[-1] != {"isFinal": True, "contextId": "c"}:
            after.append(ws.receive_json())
        assert audio_of(after, "c") and not audio_of(after, "b")
        ws.send_json({"close_socket": True})
        msgs, close = messages(ws)
    assert close == 1000
    b = next(c for c in fake.calls if c.fields["text"].startswith("An answer"))
    assert b.cancelled and not b.finished


def test_a_second_close_context_cancels_flushed_audio_still_coming(client, fake, monkeypatch):
    """pipecat closes a context at the end of its turn (flushed) and again when the user interrupts it."""
    sentence_mode(monkeypatch)
    with client.websocket_connect(f"{TTS}/vivian/multi-stream-input?output_format=pcm_24000") as ws:
        ws.send_json({"text": "hang-midstream", "context_id": "t", "flush": True})
        ws.send_json({"context_id": "t", "close_context": True})
        first = ws.receive_json()
        assert first["contextId"] == "t" and first["audio"]  # the first chunk; the rest never comes
        ws.send_json({"context_id": "t", "close_context": True})
        assert ws.receive_json() == {"isFinal": True, "contextId": "t"}
        ws.send_json({"text": "Next turn.", "context_id": "u", "flush": True})
        ws.send_json({"context_id": "u", "close_context": True})
        after = []
        while not after or after[-1] != {"isFinal": True, "contextId": "u"}:
            after.append(ws.receive_json())
        assert audio_of(after, "u")
    hung = next(c for c in fake.calls if c.fields["text"] == "hang-midstream")
    assert hung.cancelled


def test_multi_stream_needs_context_ids(client):
    with client.websocket_connect(f"{TTS}/vivian/multi-stream-input") as ws:
        ws.send_json({"text": "Hello "})
        msgs, close = messages(ws)
    assert close == 1008 and msgs[-1]["error"] == "invalid_message"


def test_multi_stream_refuses_a_streamed_speed(client):
    with client.websocket_connect(f"{TTS}/vivian/multi-stream-input") as ws:
        ws.send_json({"text": " ", "context_id": "x", "voice_settings": {"speed": 1.2}})
        msgs, close = messages(ws)
    assert close == 1008 and msgs[-1]["error"] == "invalid_speed" and msgs[-1]["contextId"] == "x"


def test_encoded_g711_stream(client, monkeypatch):
    sentence_mode(monkeypatch)
    with client.websocket_connect(f"{TTS}/vivian/stream-input?output_format=ulaw_8000") as ws:
        ws.send_json({"text": " "})
        ws.send_json({"text": "Hello there."})
        ws.send_json({"text": ""})
        msgs, _ = messages(ws)
    assert audio_of(msgs) == speech(client, input="Hello there.", response_format="ulaw", stream_format="audio")
