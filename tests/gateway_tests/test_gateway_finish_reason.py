"""finish_reason through the gateway over a fake Triton (its model stops by itself at the request's budget: "stop";
a text that asks for a runaway is cut there: "length"): SSE speech.audio.done, the X-Finish-Reason header of whole files (and
of raw streams whose first chunk is the last), batch items, failed and cut SSE streams, and the metric that counts
every generation's reason (a raw stream's included). The WebSocket's audio.done: test_websocket.py."""

from __future__ import annotations

import pytest
from gateway_fixtures import FakeBackend, fake_app_client
from prometheus_text import parse, sample

from gateway import sse

pytestmark = pytest.mark.gateway

SPEECH = "/v1/audio/speech"
MODEL = "tiny-custom-voice"


@pytest.fixture
def fake():
    return FakeBackend()


@pytest.fixture
def client(tmp_path, fake):
    with fake_app_client(tmp_path, fake) as c:
        yield c


@pytest.mark.parametrize(("text", "reason"), [("Hi", "stop"), ("runaway", "length")])
def test_sse_done_and_the_whole_file_header_say_why_it_ended(client, text, reason):
    body = {"input": text, "model": MODEL, "max_new_tokens": 5}
    events = sse.parse(client.post(SPEECH, json={**body, "stream": True, "response_format": "pcm"}).content)
    assert events[-1][0] == sse.DONE and events[-1][1]["finish_reason"] == reason
    r = client.post(SPEECH, json=body)
    assert r.status_code == 200 and r.headers["x-finish-reason"] == reason


def test_a_raw_stream_says_it_in_a_header_only_when_known_before_the_body(client, fake):
    many = client.post(SPEECH, json={"input": "runaway", "model": MODEL, "stream_format": "audio", "max_new_tokens": 9})
    assert many.status_code == 200 and "x-finish-reason" not in many.headers  # its first chunk was not the last
    fake.chunk_frames = 64
    one = client.post(SPEECH, json={"input": "runaway", "model": MODEL, "stream_format": "audio", "max_new_tokens": 2,
                                    "initial_codec_chunk_frames": 4})
    assert one.status_code == 200 and one.headers["x-finish-reason"] == "length"
    metrics = parse(client.get("/metrics").text)
    assert sample(metrics, "tts_generation_finish_reasons_total", model=MODEL, reason="length") == 2


def test_batch_items_and_a_failed_stream(client):
    r = client.post("/v1/audio/speech/batch", json={"items": [{"input": "Hi"}, {"input": "runaway"}, {"input": "fail-internal"}],
                                                    "model": MODEL, "max_new_tokens": 4})
    assert [x["finish_reason"] for x in r.json()["results"]] == ["stop", "length", "error"]
    events = sse.parse(client.post(SPEECH, json={"input": "fail-midstream", "model": MODEL, "stream": True,
                                                 "response_format": "pcm", "max_new_tokens": 9}).content)
    assert events[-1][0] == sse.ERROR  # the error event replaces speech.audio.done
    metrics = parse(client.get("/metrics").text)
    assert sample(metrics, "tts_generation_finish_reasons_total", model=MODEL, reason="error") == 2
    assert sample(metrics, "tts_generation_finish_reasons_total", model=MODEL, reason="stop") == 1
