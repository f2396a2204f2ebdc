"""Streamed compressed audio (issue 42): response_format mp3 and opus (Ogg Opus) on raw streams, SSE deltas and the
WebSocket's stream_audio, through the gateway (fake backend) and the openai SDK: what a client has received after
any chunk decodes (ffmpeg, through PyAV), and the whole stream decodes to the whole file's length within one codec
frame (mp3: the same bytes)."""

from __future__ import annotations

import base64
import io
import json

import av
import openai
import pytest
from fastapi.testclient import TestClient
from gateway_fixtures import FakeBackend, fake_deployment

from gateway import sse
from gateway.app import create_app

pytestmark = pytest.mark.gateway

SPEECH = "/v1/audio/speech"
WS = "/v1/audio/speech/stream"
FRAMES = 13
FORMATS = ("mp3", "opus")
CODEC_FRAME = {"mp3": 1152, "opus": 960}  # samples at the decoder's rate (ffmpeg decodes Opus at 48 kHz)
MEDIA = {"mp3": "audio/mpeg", "opus": "audio/ogg"}


@pytest.fixture(scope="module")
def settings(tmp_path_factory):
    return fake_deployment(tmp_path_factory.mktemp("gw"))


@pytest.fixture
def client(settings):
    fake = FakeBackend()
    with TestClient(create_app(settings, backend_factory=lambda s: fake), raise_server_exceptions=False) as c:
        yield c


def decoded(data: bytes, fmt: str) -> int:
    """Samples ffmpeg decodes from these bytes, however they end."""
    with av.open(io.BytesIO(data), format={"opus": "ogg", "mp3": "mp3"}[fmt]) as c:
        return sum(f.samples for f in c.decode(audio=0))


def whole_file(client: TestClient, fmt: str) -> bytes:
    r = client.post(SPEECH, json={"input": "Hi", "max_new_tokens": FRAMES, "response_format": fmt})
    assert r.status_code == 200 and r.headers["content-type"] == MEDIA[fmt]
    return r.content


def assert_stream_of(parts: list[bytes], fmt: str, whole: bytes) -> None:
    parts = [p for p in parts if p]
    assert len(parts) > 1
    sent, heard = b"", 0
    for p in parts:  # a client that stops after any chunk holds a decodable prefix, growing chunk by chunk
        sent += p
        now = decoded(sent, fmt)
        assert now >= heard
        heard = now
    assert heard > 0
    assert abs(heard - decoded(whole, fmt)) <= CODEC_FRAME[fmt]
    if fmt == "mp3":
        assert sent == whole


@pytest.mark.parametrize("fmt", FORMATS)
def test_raw_stream(client, fmt):
    with client.stream("POST", SPEECH, json={"input": "Hi", "max_new_tokens": FRAMES, "response_format": fmt,
                                             "stream_format": "audio"}) as r:
        assert r.status_code == 200 and r.headers["content-type"] == MEDIA[fmt]
        parts = list(r.iter_raw())
    assert_stream_of(parts, fmt, whole_file(client, fmt))


@pytest.mark.parametrize("fmt", FORMATS)
def test_sse_deltas(client, fmt):
    r = client.post(SPEECH, json={"input": "Hi", "max_new_tokens": FRAMES, "response_format": fmt, "stream": True})
    assert r.status_code == 200
    events = sse.parse(r.content)
    deltas = [d for name, d in events if name == sse.DELTA]
    assert all(d["response_format"] == fmt for d in deltas) and events[-1][0] == sse.DONE
    assert_stream_of([base64.b64decode(d["audio"]) for d in deltas], fmt, whole_file(client, fmt))


@pytest.mark.parametrize("fmt", FORMATS)
def test_websocket_stream_audio(client, fmt):
    with client.websocket_connect(WS) as ws:
        ws.send_json({"type": "session.config", "voice": "vivian", "max_new_tokens": FRAMES, "response_format": fmt,
                      "stream_audio": True})
        ws.send_json({"type": "input.text", "text": "Hi"})
        ws.send_json({"type": "input.done"})
        parts: list[bytes] = []
        while True:
            m = ws.receive()
            if m.get("bytes") is not None:
                parts.append(m["bytes"])
                continue
            msg = json.loads(m["text"])
            assert msg["type"] != "error", msg
            if msg["type"] == "audio.start":
                assert msg["format"] == fmt
            if msg["type"] == "session.done":
                break
    assert_stream_of(parts, fmt, whole_file(client, fmt))


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_openai_sdk_streams_them(client, fmt):
    sdk = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=client, max_retries=0)
    with sdk.audio.speech.with_streaming_response.create(
            model="tts-1", voice="alloy", input="Hi", response_format=fmt,
            extra_body={"stream_format": "audio", "max_new_tokens": FRAMES}) as streamed:
        parts = list(streamed.iter_bytes(512))
    assert_stream_of(parts, fmt, whole_file(client, fmt))


def test_other_compressed_formats_still_refuse_to_stream(client):
    for fmt in ("flac", "aac"):
        r = client.post(SPEECH, json={"input": "Hi", "response_format": fmt, "stream": True})
        assert r.status_code == 400 and r.json()["error"]["param"] == "response_format"
