"""WebSocket /v1/audio/speech/stream over a fake Triton backend, driven as a client would drive it:
utterances on one connection, splitting, framing, sticky and changed config, errors, idle timeout,
disconnects (spec: "Streaming Text Input (WebSocket)")."""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np
import pytest
from gateway_fixtures import FakeBackend, fake_app_client, fake_audio, fake_deployment
from starlette.websockets import WebSocketDisconnect
from voices_audio import wav

from gateway import encoding, refaudio

pytestmark = pytest.mark.gateway

WS = "/v1/audio/speech/stream"


@pytest.fixture
def fake():
    return FakeBackend()


def make_client(tmp_path, fake, **settings):
    return fake_app_client(tmp_path, fake, **settings)


@pytest.fixture
def client(tmp_path, fake):
    with make_client(tmp_path, fake) as c:
        yield c


def config(**kw):
    return {"type": "session.config", "voice": "vivian", "max_new_tokens": 3, **kw}


def read(ws) -> dict | bytes:
    message = ws.receive()
    if message["type"] == "websocket.close":
        raise WebSocketDisconnect(message.get("code", 1000))
    if message.get("text") is not None:
        return json.loads(message["text"])
    return message["bytes"]


def until(ws, kind: str) -> list:
    """Every message up to and including the first JSON message of type `kind`."""
    out = []
    while True:
        m = read(ws)
        out.append(m)
        if isinstance(m, dict) and m["type"] == kind:
            return out


def requests_of(messages: list) -> list[dict]:
    """[{start, audio: bytes, chunks, done}] per TTS request, checking the framing."""
    out: list[dict] = []
    for m in messages:
        if isinstance(m, bytes):
            assert out and "done" not in out[-1], "audio outside audio.start/audio.done"
            out[-1]["audio"] += m
            out[-1]["chunks"] += 1
        elif m["type"] == "audio.start":
            assert not out or "done" in out[-1], "audio.start before the previous audio.done"
            out.append({"start": m, "audio": b"", "chunks": 0})
        elif m["type"] == "audio.done":
            assert out[-1]["start"]["sentence_index"] == m["sentence_index"]
            assert out[-1]["start"]["utterance_index"] == m["utterance_index"]
            assert m["total_bytes"] == len(out[-1]["audio"])
            out[-1]["done"] = m
    return out


def errors_in(messages: list) -> list[str]:
    return [m["message"] for m in messages if isinstance(m, dict) and m["type"] == "error"]


# --- the happy paths ----------------------------------------------------------------------------------


def test_two_utterances_on_one_connection_with_sticky_config(client, fake):
    with client.websocket_connect(WS) as ws:
        ws.send_json(config())
        ws.send_json({"type": "input.text", "text": "Hello there. "})
        ws.send_json({"type": "input.text", "text": "How are you?"})
        ws.send_json({"type": "input.done"})
        first = until(ws, "session.done")
        # the same connection and config serve the next flush
        ws.send_json({"type": "input.text", "text": "Second utterance."})
        ws.send_json({"type": "input.done"})
        second = until(ws, "session.done")
        ws.send_json({"type": "session.close"})
        with pytest.raises(WebSocketDisconnect):
            read(ws)
    reqs = requests_of(first)
    assert len(reqs) == 1  # split_granularity none: one request per input.done
    start = reqs[0]["start"]
    assert start == {"type": "audio.start", "utterance_index": 0, "sentence_index": 0,
                     "sentence_text": "Hello there. How are you?", "format": "wav", "sample_rate": 24000}
    rate, samples = encoding.parse_wav(reqs[0]["audio"])
    assert rate == 24000 and np.array_equal(samples, encoding.to_int16(fake_audio(3)))
    assert reqs[0]["done"] == {"type": "audio.done", "utterance_index": 0, "sentence_index": 0,
                               "total_bytes": len(reqs[0]["audio"]), "error": False, "finish_reason": "stop"}
    assert first[-1] == {"type": "session.done", "utterance_index": 0, "total_sentences": 1}
    reqs = requests_of(second)
    assert [r["start"]["utterance_index"] for r in reqs] == [1] and reqs[0]["start"]["sentence_index"] == 0
    assert second[-1] == {"type": "session.done", "utterance_index": 1, "total_sentences": 1}
    assert [c.fields["speaker"] for c in fake.calls] == ["vivian", "vivian"]
    assert [c.fields["text"] for c in fake.calls] == ["Hello there. How are you?", "Second utterance."]


def test_sentence_splitting_emits_requests_before_the_flush(client, fake):
    with client.websocket_connect(WS) as ws:
        ws.send_json(config(split_granularity="sentence"))
        ws.send_json({"type": "input.text", "text": "Dr. Smith paid $3.14 today. Then"})
        before = until(ws, "audio.done")  # the first sentence is spoken without waiting for input.done
        ws.send_json({"type": "input.text", "text": " he left! Wait..."})
        ws.send_json({"type": "input.done"})
        rest = until(ws, "session.done")
    reqs = requests_of(before + rest)
    assert [r["start"]["sentence_text"] for r in reqs] == ["Dr. Smith paid $3.14 today.", "Then he left!", "Wait..."]
    assert [r["start"]["sentence_index"] for r in reqs] == [0, 1, 2]
    assert rest[-1] == {"type": "session.done", "utterance_index": 0, "total_sentences": 3}
    assert [c.fields["text"] for c in fake.calls] == ["Dr. Smith paid $3.14 today.", "Then he left!", "Wait..."]


def test_clause_granularity_and_cjk(client):
    with client.websocket_connect(WS) as ws:
        ws.send_json(config(split_granularity="clause"))
        ws.send_json({"type": "input.text", "text": "We paid 1,000 dollars, then left; 你好。再见"})
        ws.send_json({"type": "input.done"})
        msgs = until(ws, "session.done")
    assert [r["start"]["sentence_text"] for r in requests_of(msgs)] == [
        "We paid 1,000 dollars,", "then left;", "你好。", "再见"]


def test_stream_audio_sends_pcm_chunks_as_decoded(client, fake):
    fake.chunk_frames = 2
    with client.websocket_connect(WS) as ws:
        ws.send_json(config(stream_audio=True, max_new_tokens=7, initial_codec_chunk_frames=1))
        ws.send_json({"type": "input.text", "text": "Streamed."})
        ws.send_json({"type": "input.done"})
        msgs = until(ws, "session.done")
    (req,) = requests_of(msgs)
    assert req["start"]["format"] == "pcm" and req["start"]["sample_rate"] == 24000
    assert req["chunks"] == 4  # 1 + 2 + 2 + 2 frames, each sent as it is decoded
    assert req["audio"] == encoding.pcm_bytes(fake_audio(7))


def test_stream_audio_wav_and_resampling(client):
    with client.websocket_connect(WS) as ws:
        ws.send_json(config(stream_audio=True, response_format="wav", sample_rate=16000, max_new_tokens=6))
        ws.send_json({"type": "input.text", "text": "Streamed wav."})
        ws.send_json({"type": "input.done"})
        (req,) = requests_of(until(ws, "session.done"))
    assert req["start"]["format"] == "wav" and req["start"]["sample_rate"] == 16000
    rate, samples = encoding.parse_wav(req["audio"])
    assert rate == 16000 and samples.size == 6 * 1920 * 2 // 3


def test_empty_flush_has_no_sentences(client, fake):
    with client.websocket_connect(WS) as ws:
        ws.send_json(config())
        ws.send_json({"type": "input.done"})
        assert read(ws) == {"type": "session.done", "utterance_index": 0, "total_sentences": 0}
        ws.send_json({"type": "input.text", "text": "  ...  "})
        ws.send_json({"type": "input.done"})
        assert read(ws) == {"type": "session.done", "utterance_index": 1, "total_sentences": 0}
    assert fake.calls == []


def test_config_changes_between_utterances_only(client, fake):
    with client.websocket_connect(WS) as ws:
        ws.send_json(config(voice="ryan"))
        ws.send_json({"type": "input.text", "text": "First part"})
        ws.send_json(config(voice="serena"))  # mid-utterance: rejected, ryan stays
        rejected = read(ws)
        ws.send_json({"type": "input.text", "text": " and the rest."})
        ws.send_json({"type": "input.done"})
        first = until(ws, "session.done")
        ws.send_json(config(voice="serena", response_format="mp3"))  # between utterances: applied
        ws.send_json({"type": "input.text", "text": "Now as Serena."})
        ws.send_json({"type": "input.done"})
        second = until(ws, "session.done")
    assert rejected["type"] == "error" and "middle of an utterance" in rejected["message"]
    assert requests_of(first)[0]["start"]["sentence_text"] == "First part and the rest."
    (req,) = requests_of(second)
    assert req["start"]["format"] == "mp3" and req["audio"][:2] == b"\xff\xf3"  # one MPEG frame header
    assert [c.fields["speaker"] for c in fake.calls] == ["ryan", "serena"]


def test_invalid_config_is_an_error_and_keeps_the_previous_one(client, fake):
    with client.websocket_connect(WS) as ws:
        ws.send_json(config(voice="nobody"))
        assert "Invalid session.config: Invalid voice 'nobody'" in read(ws)["message"]
        ws.send_json({"type": "input.text", "text": "Too early"})
        assert read(ws)["message"] == "Send session.config before input.text"
        ws.send_json(config(split_granularity="paragraph"))
        assert "split_granularity" in read(ws)["message"]
        ws.send_json(config(stream_audio=True, response_format="aac"))
        assert "response_format" in read(ws)["message"]
        ws.send_json(config(voice="aiden"))
        ws.send_json(config(speed=9))
        assert "speed" in read(ws)["message"]
        ws.send_json({"type": "input.text", "text": "Aiden speaks."})
        ws.send_json({"type": "input.done"})
        until(ws, "session.done")
    assert [c.fields["speaker"] for c in fake.calls] == ["aiden"]


@pytest.mark.parametrize(
    ("message", "fragment"),
    [
        ("not json", "Invalid JSON message"),
        ("[1, 2]", "JSON objects"),
        ('{"text": "no type"}', "Unknown message type None"),
        ('{"type": "input.flush"}', "Unknown message type 'input.flush'"),
        ('{"type": "input.text", "text": 5}', "Invalid input.text"),
        ('{"type": "input.text", "text": "x", "extra": 1}', "extra"),
        ('{"type": "input.done", "now": true}', "Invalid input.done"),
    ],
)
def test_bad_messages_are_non_fatal_errors(client, fake, message, fragment):
    with client.websocket_connect(WS) as ws:
        ws.send_json(config())
        ws.send_text(message)
        err = read(ws)
        assert err["type"] == "error" and fragment in err["message"], err
        ws.send_json({"type": "input.text", "text": "Still here."})
        ws.send_json({"type": "input.done"})
        assert until(ws, "session.done")[-1]["total_sentences"] == 1


def test_binary_and_oversized_messages(tmp_path, fake):
    with make_client(tmp_path, fake, ws_max_text_bytes=1000, ws_max_config_bytes=5000) as c:
        with c.websocket_connect(WS) as ws:
            ws.send_bytes(b"\x00\x01")
            assert "Binary messages" in read(ws)["message"]
            ws.send_json(config())
            ws.send_json({"type": "input.text", "text": "x" * 2000})
            assert "input.text message too large" in read(ws)["message"]
            ws.send_json(config(instructions="y" * 6000))
            assert "Message too large" in read(ws)["message"]
            ws.send_json({"type": "input.text", "text": "Fine."})
            ws.send_json({"type": "input.done"})
            assert until(ws, "session.done")[-1]["total_sentences"] == 1


def test_unsent_text_is_bounded_by_the_request_limit(tmp_path, fake):
    with make_client(tmp_path, fake, max_input_chars=4096) as c, c.websocket_connect(WS) as ws:
        ws.send_json(config())
        ws.send_json({"type": "input.text", "text": "a" * 4000})
        ws.send_json({"type": "input.text", "text": "b" * 200})
        assert "more than one request takes (4096)" in read(ws)["message"]
        ws.send_json({"type": "input.done"})
        (req,) = requests_of(until(ws, "session.done"))
        assert req["start"]["sentence_text"] == "a" * 4000


def test_a_failed_request_is_reported_and_the_session_goes_on(client, fake):
    with client.websocket_connect(WS) as ws:
        ws.send_json(config())
        ws.send_json({"type": "input.text", "text": "fail-invalid"})  # the fake refuses this text
        ws.send_json({"type": "input.done"})
        failed = until(ws, "session.done")
        ws.send_json({"type": "input.text", "text": "Next one works."})
        ws.send_json({"type": "input.done"})
        ok = until(ws, "session.done")
    (req,) = requests_of(failed)
    assert req["done"]["error"] is True and req["done"]["total_bytes"] == 0
    (err,) = errors_in(failed)
    assert err == "Generation failed for utterance 0, sentence 0: text is not speakable"
    assert failed[-1]["total_sentences"] == 1
    (req,) = requests_of(ok)
    assert req["done"]["error"] is False and req["audio"][:4] == b"RIFF"


def test_a_stream_failing_midway_flags_its_request(client, fake):
    with client.websocket_connect(WS) as ws:
        ws.send_json(config(stream_audio=True, max_new_tokens=9))
        ws.send_json({"type": "input.text", "text": "fail-midstream"})
        ws.send_json({"type": "input.done"})
        msgs = until(ws, "session.done")
    (req,) = requests_of(msgs)
    assert req["done"]["error"] is True and req["done"]["total_bytes"] > 0 and len(errors_in(msgs)) == 1


# --- idle timeout -------------------------------------------------------------------------------------


def test_idle_timeout_before_config_and_between_utterances(tmp_path, fake):
    with make_client(tmp_path, fake, ws_idle_timeout_s=0.3) as c:
        with c.websocket_connect(WS) as ws:
            t0 = time.monotonic()
            assert "Idle timeout" in read(ws)["message"]
            with pytest.raises(WebSocketDisconnect):
                read(ws)
            assert time.monotonic() - t0 < 5
        with c.websocket_connect(WS) as ws:
            ws.send_json(config())
            ws.send_json({"type": "input.text", "text": "One."})
            ws.send_json({"type": "input.done"})
            until(ws, "session.done")
            time.sleep(0.15)
            ws.send_json({"type": "input.text", "text": "Two."})  # within the timeout: still open
            ws.send_json({"type": "input.done"})
            until(ws, "session.done")
            assert "Idle timeout" in read(ws)["message"]  # between utterances, the timeout applies too
            with pytest.raises(WebSocketDisconnect):
                read(ws)


# --- voices over the WebSocket ----------------------------------------------------------------------


def test_inline_ref_audio_is_processed_once_per_config(client, fake):
    ref = refaudio.data_url(wav(1.0))
    with client.websocket_connect(WS) as ws:
        ws.send_json({"type": "session.config", "ref_audio": ref, "ref_text": "Transcript", "max_new_tokens": 2,
                      "split_granularity": "sentence", "seed": 5})
        ws.send_json({"type": "input.text", "text": "One. Two. Three."})
        ws.send_json({"type": "input.done"})
        msgs = until(ws, "session.done")
    assert msgs[-1]["total_sentences"] == 3 and not errors_in(msgs)
    assert len(fake.feature_calls) == 1  # at session.config, not per sentence
    assert all(c.model == "speech_generation_tiny-base" and c.fields["seed"] == 5 for c in fake.calls)
    assert all(c.fields["ref_codes"].shape == (13, 16) for c in fake.calls)


def test_bad_ref_audio_rejects_the_config(client, fake):
    with client.websocket_connect(WS) as ws:
        ws.send_json({"type": "session.config", "ref_audio": "http://127.0.0.1:9/x.wav", "ref_text": "t"})
        assert "non-public address" in read(ws)["message"]
        ws.send_json({"type": "input.text", "text": "x"})
        assert "Send session.config" in read(ws)["message"]


def test_uploaded_voice_over_the_websocket(client, fake):
    r = client.post("/v1/audio/voices", data={"name": "narrator", "consent": "c", "ref_text": "Ref"},
                    files={"audio_sample": ("n.wav", wav(1.5), "audio/wav")})
    assert r.status_code == 200
    with client.websocket_connect(WS) as ws:
        ws.send_json({"type": "session.config", "voice": "narrator", "max_new_tokens": 2})
        ws.send_json({"type": "input.text", "text": "Cloned."})
        ws.send_json({"type": "input.done"})
        until(ws, "session.done")
    assert fake.calls[-1].fields["ref_text"] == "Ref" and len(fake.feature_calls) == 1


def test_request_id_is_echoed_in_the_handshake_and_used_for_triton(client, fake):
    with client.websocket_connect(WS, headers={"X-Request-Id": "ws-test-1"}) as ws:
        ws.send_json(config(split_granularity="sentence"))
        ws.send_json({"type": "input.text", "text": "One. Two."})
        ws.send_json({"type": "input.done"})
        until(ws, "session.done")
    assert [c.request_id for c in fake.calls] == ["ws-test-1-u0-s0", "ws-test-1-u0-s1"]


# --- a real client over a real server: disconnects --------------------------------------------------


def test_disconnect_mid_request_cancels_the_backend_stream(tmp_path):
    import websockets
    from test_gateway_app import start_gateway_with

    from ttscore.backend.triton_server import free_port

    fake = FakeBackend()
    port = free_port()
    server, thread = start_gateway_with(fake_deployment(tmp_path), fake, port)

    async def drive():
        async with websockets.connect(f"ws://127.0.0.1:{port}{WS}") as ws:
            await ws.send(json.dumps(config(stream_audio=True, max_new_tokens=2000)))
            await ws.send(json.dumps({"type": "input.text", "text": "slow"}))
            await ws.send(json.dumps({"type": "input.done"}))
            assert json.loads(await ws.recv())["type"] == "audio.start"
            assert isinstance(await ws.recv(), bytes)
        # closed by the client while audio is still coming

    try:
        asyncio.run(drive())
        deadline = time.time() + 5
        while not (fake.calls and fake.calls[0].cancelled) and time.time() < deadline:
            time.sleep(0.02)
        assert fake.calls[0].cancelled and not fake.calls[0].finished and fake.calls[0].chunks_sent < 100
    finally:
        server.should_exit = True
        thread.join(10)


# --- barge-in: input.cancel -------------------------------------------------------------------------


def test_input_cancel_stops_the_utterance_and_the_session_goes_on(client, fake):
    with client.websocket_connect(WS) as ws:
        ws.send_json(config(stream_audio=True, max_new_tokens=2000, voice="ryan"))
        ws.send_json({"type": "input.text", "text": "slow"})
        ws.send_json({"type": "input.done"})
        head = [read(ws), read(ws)]
        assert head[0]["type"] == "audio.start" and isinstance(head[1], bytes)  # audio is flowing
        ws.send_json({"type": "input.cancel"})
        cancelled = head + until(ws, "session.done")
        # the next utterance on the same session, with the same config
        ws.send_json({"type": "input.text", "text": "After the barge-in."})
        ws.send_json({"type": "input.done"})
        after = until(ws, "session.done")
        metrics = client.get("/metrics").text
    done_at = next(i for i, m in enumerate(cancelled) if isinstance(m, dict) and m["type"] == "audio.done")
    assert not any(isinstance(m, bytes) for m in cancelled[done_at:]), "audio after the cancelled audio.done"
    (req,) = requests_of(cancelled)
    assert req["done"]["cancelled"] is True and req["done"]["error"] is False
    assert req["done"]["finish_reason"] == "cancelled"
    assert cancelled[-1] == {"type": "session.done", "utterance_index": 0, "total_sentences": 1, "cancelled": True}
    assert fake.calls[0].cancelled and not fake.calls[0].finished and fake.calls[0].chunks_sent < 2000
    (req,) = requests_of(after)
    assert "cancelled" not in req["done"] and req["start"]["utterance_index"] == 1
    assert req["done"]["finish_reason"] == "stop"
    assert after[-1] == {"type": "session.done", "utterance_index": 1, "total_sentences": 1}
    assert [c.fields["speaker"] for c in fake.calls] == ["ryan", "ryan"]
    assert [c.fields["text"] for c in fake.calls] == ["slow", "After the barge-in."]
    assert 'tts_cancelled_requests_total{route="/v1/audio/speech/stream"} 1.0' in metrics
    (line,) = [m for m in metrics.splitlines() if m.startswith("tts_requests_total{") and 'status="499"' in m]
    assert 'route="/v1/audio/speech/stream"' in line and line.endswith(" 1.0")


def test_input_cancel_drops_the_unspoken_text(client, fake):
    with client.websocket_connect(WS) as ws:
        ws.send_json(config(split_granularity="sentence", stream_audio=True, max_new_tokens=2000))
        # "slow." is spoken at once; "Second one." and the unfinished "Third" wait behind it
        ws.send_json({"type": "input.text", "text": "slow. Second one. Third"})
        head = [read(ws), read(ws)]
        assert head[0]["type"] == "audio.start" and isinstance(head[1], bytes)
        ws.send_json({"type": "input.text", "text": " more text"})  # queued behind the request: dropped
        ws.send_json({"type": "input.cancel"})
        cancelled = head + until(ws, "session.done")
        ws.send_json({"type": "input.text", "text": "Fresh start."})
        ws.send_json({"type": "input.done"})
        after = until(ws, "session.done")
    assert [r["done"].get("cancelled") for r in requests_of(cancelled)] == [True]
    assert cancelled[-1]["cancelled"] is True and cancelled[-1]["total_sentences"] == 1
    assert [r["start"]["sentence_text"] for r in requests_of(after)] == ["Fresh start."]
    assert [c.fields["text"] for c in fake.calls] == ["slow.", "Fresh start."]


def test_input_cancel_with_nothing_in_flight_clears_the_buffer(client, fake):
    with client.websocket_connect(WS) as ws:
        ws.send_json({"type": "input.cancel"})  # before any config: a non-fatal error
        assert "Send session.config before input.cancel" in read(ws)["message"]
        ws.send_json(config())
        ws.send_json({"type": "input.text", "text": "never spoken"})
        ws.send_json({"type": "input.cancel"})
        assert read(ws) == {"type": "session.done", "utterance_index": 0, "total_sentences": 0, "cancelled": True}
        ws.send_json({"type": "input.text", "text": "Spoken."})
        ws.send_json({"type": "input.done"})
        after = until(ws, "session.done")
    assert [r["start"]["utterance_index"] for r in requests_of(after)] == [1]
    assert [c.fields["text"] for c in fake.calls] == ["Spoken."]


# --- incremental text ------------------------------------------------------------------------------


def test_incremental_text_extends_one_running_generation(client, fake):
    words = ["Hello", " there", " my", " friend."]
    with client.websocket_connect(WS) as ws:
        ws.send_json(config(split_granularity="incremental", max_new_tokens=2000))
        assert read(ws) == {"type": "session.configured", "split_granularity": "incremental"}
        ws.send_json({"type": "input.text", "text": words[0]})
        start = read(ws)
        assert start == {"type": "audio.start", "utterance_index": 0, "sentence_index": 0, "sentence_text": "Hello",
                         "format": "pcm", "sample_rate": 24000}
        messages: list = [start, read(ws)]
        assert isinstance(messages[-1], bytes)  # audio of the first word before the others are sent
        for word in words[1:]:
            ws.send_json({"type": "input.text", "text": word})
            messages.append(read(ws))
            assert isinstance(messages[-1], bytes)
        ws.send_json({"type": "input.done"})
        messages += until(ws, "session.done")
        # the next utterance starts a new generation with the same config
        ws.send_json({"type": "input.text", "text": "Again"})
        ws.send_json({"type": "input.done"})
        second = until(ws, "session.done")
        metrics = client.get("/metrics").text
    (req,) = requests_of(messages)
    assert req["done"]["error"] is False and "cancelled" not in req["done"]
    assert np.array_equal(np.frombuffer(req["audio"], "<i2"), encoding.to_int16(fake_audio(4)))
    assert messages[-1] == {"type": "session.done", "utterance_index": 0, "total_sentences": 1}
    first = fake.calls[0]
    assert first.fields["text"] == "Hello there my friend." and first.fields["non_streaming_mode"] is False
    assert first.text_key and first.finished and len(fake.calls) == 2
    assert [e for e in fake.extensions if e[0] == first.text_key] == \
        [(first.text_key, w, False) for w in words[1:]] + [(first.text_key, "", True)]
    assert fake.calls[1].fields["text"] == "Again" and fake.calls[1].text_key not in (None, first.text_key)
    assert [r["start"]["utterance_index"] for r in requests_of(second)] == [1]
    assert 'tts_ws_first_text_to_audio_seconds_count{split_granularity="incremental"} 2.0' in metrics


def test_incremental_falls_back_to_sentences_where_the_model_cannot_take_text(client, fake):
    with client.websocket_connect(WS) as ws:
        ws.send_json(config(split_granularity="incremental", non_streaming_mode=True))
        configured = read(ws)
        assert configured["type"] == "session.configured" and configured["split_granularity"] == "sentence"
        assert "cannot take text while it generates" in configured["reason"]
        ws.send_json({"type": "input.text", "text": "One. Two."})
        ws.send_json({"type": "input.done"})
        reqs = requests_of(until(ws, "session.done"))
    assert [r["start"]["sentence_text"] for r in reqs] == ["One.", "Two."]
    assert all(c.text_key is None for c in fake.calls)


def test_incremental_config_with_a_format_that_cannot_stream_is_rejected(client, fake):
    with client.websocket_connect(WS) as ws:
        ws.send_json(config(split_granularity="incremental", response_format="flac"))
        message = read(ws)
        assert message["type"] == "error" and "Invalid session.config" in message["message"]
        assert "response_format" in message["message"]


def test_input_cancel_stops_an_incremental_generation(client, fake):
    with client.websocket_connect(WS) as ws:
        ws.send_json(config(split_granularity="incremental"))
        assert read(ws)["split_granularity"] == "incremental"
        ws.send_json({"type": "input.text", "text": "Interrupt"})
        head = [read(ws), read(ws)]
        assert isinstance(head[1], bytes)
        ws.send_json({"type": "input.text", "text": " me"})  # before the cancel: dropped or spoken
        ws.send_json({"type": "input.cancel"})
        cancelled = head + until(ws, "session.done")
        ws.send_json({"type": "input.text", "text": "Next"})
        ws.send_json({"type": "input.done"})
        after = until(ws, "session.done")
    done_at = next(i for i, m in enumerate(cancelled) if isinstance(m, dict) and m["type"] == "audio.done")
    assert cancelled[done_at]["cancelled"] is True
    assert not any(isinstance(m, bytes) for m in cancelled[done_at:])
    assert cancelled[-1] == {"type": "session.done", "utterance_index": 0, "total_sentences": 1, "cancelled": True}
    assert fake.calls[0].cancelled and not fake.calls[0].finished
    (req,) = requests_of(after)
    assert req["done"]["error"] is False and fake.calls[1].fields["text"] == "Next" and fake.calls[1].finished


def test_incremental_long_first_text_is_one_generation(tmp_path, fake):
    long_text = "First sentence here. " * 6 + "And the end"
    with make_client(tmp_path, fake, segment_chars=50) as c, c.websocket_connect(WS) as ws:
        ws.send_json(config(split_granularity="incremental"))
        assert read(ws)["split_granularity"] == "incremental"
        ws.send_json({"type": "input.text", "text": long_text})
        ws.send_json({"type": "input.text", "text": " of it."})
        ws.send_json({"type": "input.done"})
        messages = until(ws, "session.done")
        (req,) = requests_of(messages)
    assert errors_in(messages) == []
    assert len(fake.calls) == 1 and fake.calls[0].fields["text"] == long_text + " of it."
    assert req["done"]["error"] is False and len(req["audio"]) == len(encoding.to_int16(fake_audio(
        len((long_text + " of it.").split()))).tobytes())
