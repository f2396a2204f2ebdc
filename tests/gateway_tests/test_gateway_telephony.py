"""Telephony formats: response_format ulaw / alaw (G.711 at 8 kHz, one byte a sample) as a whole file
(WAV with the G.711 format tag), a raw stream, SSE and the WebSocket, decoded with standard decoders
(libsndfile for the WAV, Python's audioop for the headerless bytes) and compared with the 8 kHz pcm
output of the same request: equal to its G.711 round trip, so within G.711's error of it."""

from __future__ import annotations

import base64
import io
import json
import warnings

import numpy as np
import openai
import pytest
import soundfile as sf
from fastapi.testclient import TestClient
from gateway_fixtures import FakeBackend, fake_deployment

from gateway import encoding, sse
from gateway.app import create_app

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # audioop: deprecated, still the stdlib's G.711
    import audioop

pytestmark = pytest.mark.gateway

SPEECH = "/v1/audio/speech"
WS = "/v1/audio/speech/stream"
FRAMES = 13
SAMPLES_8K = FRAMES * 1920 // 3  # 13 frames of 1920 samples at 24 kHz, at 8 kHz
G711 = ("ulaw", "alaw")
_DECODE = {"ulaw": audioop.ulaw2lin, "alaw": audioop.alaw2lin}
_ENCODE = {"ulaw": audioop.lin2ulaw, "alaw": audioop.lin2alaw}


@pytest.fixture(scope="module")
def settings(tmp_path_factory):
    return fake_deployment(tmp_path_factory.mktemp("gw"))


@pytest.fixture
def client(settings):
    fake = FakeBackend()
    with TestClient(create_app(settings, backend_factory=lambda s: fake), raise_server_exceptions=False) as c:
        yield c


def decode(data: bytes, fmt: str) -> np.ndarray:
    return np.frombuffer(_DECODE[fmt](data, 2), dtype="<i2")


def reference_8k(client: TestClient) -> np.ndarray:
    """The request's audio as 16-bit pcm at 8 kHz (the same resampling)."""
    r = client.post(SPEECH, json={"input": "Hi", "max_new_tokens": FRAMES, "response_format": "pcm", "sample_rate": 8000})
    assert r.status_code == 200
    return np.frombuffer(r.content, dtype="<i2")


def assert_g711_of(decoded: np.ndarray, reference: np.ndarray, fmt: str) -> None:
    assert decoded.size == reference.size == SAMPLES_8K
    # exactly G.711's quantisation of the 8 kHz audio ...
    assert np.array_equal(decoded, decode(_ENCODE[fmt](reference.tobytes(), 2), fmt))
    # ... so within its error: 1/32 of the magnitude plus 8 (the worst case over every int16).
    x = reference.astype(np.int64)
    assert np.all(np.abs(decoded.astype(np.int64) - x) <= np.abs(x) / 32 + 8)
    assert np.abs(x).max() > 4000  # the tone is there, not silence


def test_g711_bound_holds_for_every_sample():
    x = np.arange(-32768, 32768, dtype=np.int16)
    for fmt in G711:
        y = decode(encoding.g711_bytes(x.astype(np.float32) / 32768.0, fmt), fmt).astype(np.int64)
        assert np.all(np.abs(y - x) <= np.abs(x.astype(np.int64)) / 32 + 8)


@pytest.mark.parametrize("fmt", G711)
def test_whole_file_is_a_g711_wav_at_8k(client, fmt):
    r = client.post(SPEECH, json={"input": "Hi", "max_new_tokens": FRAMES, "response_format": fmt})
    assert r.status_code == 200 and r.headers["content-type"] == "audio/wav"
    info = sf.info(io.BytesIO(r.content))
    assert (info.format, info.subtype, info.samplerate, info.channels) == ("WAV", fmt.upper(), 8000, 1)
    y, rate = sf.read(io.BytesIO(r.content), dtype="int16")
    assert rate == 8000
    # one byte a sample after the 58-byte header (RIFF, 18-byte fmt with the G.711 tag, fact, data)
    assert len(r.content) == 58 + SAMPLES_8K and r.content[20:22] == {"ulaw": b"\x07\x00", "alaw": b"\x06\x00"}[fmt]
    assert np.array_equal(y, decode(r.content[58:], fmt))
    assert_g711_of(y, reference_8k(client), fmt)


@pytest.mark.parametrize("fmt", G711)
def test_raw_stream_is_headerless_g711(client, fmt):
    r = client.post(SPEECH, json={"input": "Hi", "max_new_tokens": FRAMES, "response_format": fmt,
                                  "stream_format": "audio"})
    assert r.status_code == 200
    assert r.headers["content-type"] == {"ulaw": "audio/basic", "alaw": "audio/x-alaw-basic"}[fmt]
    assert_g711_of(decode(r.content, fmt), reference_8k(client), fmt)


@pytest.mark.parametrize("fmt", G711)
def test_sse_deltas_are_g711(client, fmt):
    r = client.post(SPEECH, json={"input": "Hi", "max_new_tokens": FRAMES, "response_format": fmt, "stream": True})
    assert r.status_code == 200
    events = sse.parse(r.content)
    deltas = [d for name, d in events if name == sse.DELTA]
    assert len(deltas) > 1 and all(d["response_format"] == fmt for d in deltas)
    assert events[-1][0] == sse.DONE
    audio = b"".join(base64.b64decode(d["audio"]) for d in deltas)
    assert_g711_of(decode(audio, fmt), reference_8k(client), fmt)


def _ws_audio(client: TestClient, **config) -> tuple[dict, bytes]:
    with client.websocket_connect(WS) as ws:
        ws.send_json({"type": "session.config", "voice": "vivian", "max_new_tokens": FRAMES, **config})
        ws.send_json({"type": "input.text", "text": "Hi"})
        ws.send_json({"type": "input.done"})
        start, audio = None, b""
        while True:
            m = ws.receive()
            if m.get("bytes") is not None:
                audio += m["bytes"]
                continue
            msg = json.loads(m["text"])
            assert msg["type"] != "error", msg
            if msg["type"] == "audio.start":
                start = msg
            if msg["type"] == "session.done":
                assert start is not None
                return start, audio


@pytest.mark.parametrize("fmt", G711)
def test_websocket_streams_g711(client, fmt):
    start, audio = _ws_audio(client, response_format=fmt, stream_audio=True)
    assert start["format"] == fmt and start["sample_rate"] == 8000
    assert_g711_of(decode(audio, fmt), reference_8k(client), fmt)
    # without stream_audio: one whole file per request, the G.711 WAV
    start, audio = _ws_audio(client, response_format=fmt)
    y, rate = sf.read(io.BytesIO(audio), dtype="int16")
    assert start["sample_rate"] == rate == 8000
    assert_g711_of(y, reference_8k(client), fmt)


@pytest.mark.parametrize("fmt", G711)
def test_a_conflicting_sample_rate_is_a_400_naming_it(client, fmt):
    r = client.post(SPEECH, json={"input": "Hi", "response_format": fmt, "sample_rate": 24000})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "sample_rate"
    assert err["message"] == f"sample_rate 24000 is not supported for response_format='{fmt}'. Supported: 8000"
    r = client.post(SPEECH, json={"input": "Hi", "response_format": fmt, "sample_rate": 8000, "max_new_tokens": 2})
    assert r.status_code == 200  # 8000 named explicitly is what the format is
    with client.websocket_connect(WS) as ws:  # the session config is checked the same way
        ws.send_json({"type": "session.config", "response_format": fmt, "sample_rate": 16000})
        ws.send_json({"type": "input.text", "text": "Hi"})
        msg = ws.receive_json()
        assert msg["type"] == "error" and "sample_rate 16000 is not supported" in msg["message"]


def test_streaming_other_formats_is_still_refused(client):
    r = client.post(SPEECH, json={"input": "Hi", "response_format": "flac", "stream": True})
    assert r.status_code == 400 and r.json()["error"]["param"] == "response_format"
    assert "requires response_format 'pcm', 'wav', 'mp3' or 'opus'" in r.json()["error"]["message"]


@pytest.mark.parametrize("fmt", G711)
def test_the_openai_sdk_passes_them_through_extra_body(client, fmt):
    sdk = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=client, max_retries=0)
    whole = sdk.audio.speech.create(model="tts-1", voice="alloy", input="Hi",
                                    extra_body={"response_format": fmt, "max_new_tokens": FRAMES})
    y, rate = sf.read(io.BytesIO(whole.content), dtype="int16")
    assert rate == 8000 and sf.info(io.BytesIO(whole.content)).subtype == fmt.upper()
    with sdk.audio.speech.with_streaming_response.create(
            model="tts-1", voice="alloy", input="Hi",
            extra_body={"response_format": fmt, "stream_format": "audio", "max_new_tokens": FRAMES}) as streamed:
        raw = b"".join(streamed.iter_bytes())
    assert np.array_equal(decode(raw, fmt), y)
