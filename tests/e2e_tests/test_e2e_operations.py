"""End to end, operations: the real Triton deployment (tests/e2e_fixtures.py) behind the real gateway
*process* (`python -m gateway`, as `triton-tts serve` runs it).

- with an API key (TTS_API_KEYS), the official openai SDK's `api_key=` works and a wrong key is
  openai.AuthenticationError; /metrics needs none, and after one known request its time to first
  audio counted once and its audio seconds are exactly the samples that came back over 24 kHz;
- SIGTERM with a raw stream in flight and a WebSocket utterance open: /ready and new requests are
  503 at once, the stream completes with all its audio (the same bytes as before the signal), the
  utterance is spoken, and the process exits with status 0.
"""

from __future__ import annotations

import json
import time

import httpx
import numpy as np
import openai
import pytest
from gateway_process import GatewayProcess
from prometheus_text import count, sample, scrape
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KEY = "sk-e2e-operations"
TEXT = "Hello from the gateway."
FRAMES = 16
LONG_FRAMES = 240  # 19.2 s of audio: the stream is still being generated when the signal comes
SEED = 7
SPEECH = "/v1/audio/speech"


def gateway(e2e_triton, tmp_path, **env: str) -> GatewayProcess:  # type: ignore[no-untyped-def]
    config = tmp_path / "gateway.json"
    config.write_text(json.dumps({**e2e_triton["config"], "speaker_samples_dir": str(tmp_path / "speakers")}))
    return GatewayProcess(config, tmp_path / "gateway.log", env=env).start()


@pytest.fixture(scope="module")
def keyed(e2e_triton, tmp_path_factory):  # type: ignore[no-untyped-def]
    gw = gateway(e2e_triton, tmp_path_factory.mktemp("e2e-keyed"), TTS_API_KEYS=KEY)
    yield gw
    gw.stop()


def test_the_sdk_api_key_and_the_metrics_of_a_known_request(keyed, e2e_triton) -> None:  # type: ignore[no-untyped-def]
    model = e2e_triton["names"]["custom_voice"]

    def metrics():  # type: ignore[no-untyped-def]
        return scrape(lambda path: httpx.get(keyed.url + path, timeout=30))  # no key: /metrics is open

    before = metrics()
    sdk = openai.OpenAI(base_url=keyed.url + "/v1", api_key=KEY, max_retries=0, timeout=300)
    t0 = time.monotonic()
    r = sdk.audio.speech.create(model=model, voice="vivian", input=TEXT, response_format="pcm",
                                extra_body={"language": "English", "seed": SEED, "max_new_tokens": FRAMES})
    elapsed = time.monotonic() - t0
    samples = len(r.content) // 2
    assert samples == FRAMES * 1920
    after = metrics()

    def delta(name: str, **labels: str) -> float:
        return count(after, name, **labels) - count(before, name, **labels)

    assert delta("tts_time_to_first_audio_seconds_count", model=model) == 1
    assert 0 < delta("tts_time_to_first_audio_seconds_sum", model=model) <= elapsed
    assert delta("tts_audio_seconds_total", model=model) == pytest.approx(samples / 24000, rel=1e-9)
    assert delta("tts_real_time_factor_count", model=model) == 1
    assert delta("tts_requests_total", route=SPEECH, status="200", model=model) == 1
    assert sample(after, "tts_active_requests", model=model) == 0
    assert sample(after, "tts_queued_requests", model=model) == 0

    wrong = openai.OpenAI(base_url=keyed.url + "/v1", api_key="sk-wrong", max_retries=0, timeout=60)
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()
    assert count(metrics(), "tts_errors_total", cause="AuthenticationError") - count(
        after, "tts_errors_total", cause="AuthenticationError") == 1


def test_sigterm_drains_a_stream_and_an_utterance_then_exits_0(e2e_triton, tmp_path) -> None:  # type: ignore[no-untyped-def]
    gw = gateway(e2e_triton, tmp_path)
    model = e2e_triton["names"]["custom_voice"]
    body = {"model": model, "input": TEXT, "voice": "vivian", "language": "English", "seed": SEED,
            "max_new_tokens": LONG_FRAMES, "stream_format": "audio", "response_format": "pcm"}
    try:
        reference = httpx.post(gw.url + SPEECH, json=body, timeout=300)
        assert reference.status_code == 200 and len(reference.content) > 1920 * 2 * 4
        with connect(gw.url.replace("http", "ws") + "/v1/audio/speech/stream") as ws:
            ws.send(json.dumps({"type": "session.config", "model": model, "voice": "vivian", "language": "English",
                                "seed": SEED, "max_new_tokens": FRAMES, "response_format": "pcm"}))
            ws.send(json.dumps({"type": "input.text", "text": TEXT}))
            ws.send(json.dumps({"type": "ping"}))  # answered in order: the utterance is open once this is
            assert "Unknown message type" in json.loads(ws.recv(timeout=60))["message"]
            with httpx.stream("POST", gw.url + SPEECH, json=body, timeout=300) as stream:
                assert stream.status_code == 200
                chunks = stream.iter_raw()
                audio = next(chunks)
                gw.terminate()
                assert gw.until_draining().json()["status"] == "draining"
                r = httpx.post(gw.url + SPEECH, json={**body, "max_new_tokens": 2}, timeout=30)
                assert r.status_code == 503 and r.headers["retry-after"] and r.json()["error"]["code"] == 503
                audio += b"".join(chunks)
            # The whole stream arrived; the adaptive chunk schedule may round differently (one 16-bit step).
            got, want = np.frombuffer(audio, "<i2"), np.frombuffer(reference.content, "<i2")
            assert got.shape == want.shape and np.abs(got.astype(np.int32) - want).max() <= 1
            ws.send(json.dumps({"type": "input.done"}))
            kinds, spoken = [], 0
            while not kinds or kinds[-1] != "session.done":
                m = ws.recv(timeout=120)
                if isinstance(m, bytes):
                    spoken += len(m)
                    continue
                kinds.append(json.loads(m)["type"])
            assert kinds == ["audio.start", "audio.done", "session.done"] and spoken == FRAMES * 1920 * 2
            assert "shutting down" in json.loads(ws.recv(timeout=30))["message"]
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=30)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001
        assert gw.wait(60) == 0
    finally:
        gw.stop()
