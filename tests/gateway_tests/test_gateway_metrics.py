"""GET /metrics (gateway.metrics) over a fake Triton backend: every metric appears and moves by the
known amount after a known request, labels stay bounded, and the underrun rule is exact.

Counts are read back through Prometheus' own text parser, as a scraper reads them. No assertion
depends on timing except "within N seconds" deadlines and the lower bound of a stall that is
longer than the audio sent before it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from fastapi.testclient import TestClient
from gateway_fixtures import SAMPLE_RATE, SAMPLES_PER_FRAME, FakeBackend, fake_deployment, start_gateway
from prometheus_text import Samples, count, sample, scrape
from voices_audio import wav

import gateway.app
from gateway.app import create_app
from gateway.metrics import GatewayMetrics, Generation, PlaybackClock, RequestTrace
from ttscore.backend.triton_server import free_port
from ttscore.contract import tensors as triton_io

pytestmark = pytest.mark.gateway

SPEECH = "/v1/audio/speech"
BATCH = "/v1/audio/speech/batch"
WS = "/v1/audio/speech/stream"
CV = "tiny-custom-voice"
FRAME_S = SAMPLES_PER_FRAME / SAMPLE_RATE  # 0.08 s of audio per frame
STALL_S = 0.3  # longer than the first chunk's audio (1 frame): the client's buffer must run dry


class StallingBackend(FakeBackend):
    """FakeBackend, plus: "stall" pauses STALL_S after the first chunk; "held" sends nothing until
    `release` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    async def stream_speech(self, model, inputs, request_id):  # type: ignore[no-untyped-def]
        text = triton_io.request_kwargs(inputs)["text"]
        while text == "held" and not self.release.is_set():
            await asyncio.sleep(0.01)
        first = True
        async for chunk in super().stream_speech(model, inputs, request_id):
            yield chunk
            if text == "stall" and first:
                await asyncio.sleep(STALL_S)
            first = False


@pytest.fixture(scope="module")
def settings(tmp_path_factory):  # type: ignore[no-untyped-def]
    return fake_deployment(tmp_path_factory.mktemp("metrics"))


@pytest.fixture
def fake() -> StallingBackend:
    return StallingBackend()


@pytest.fixture
def client(settings, fake):  # type: ignore[no-untyped-def]
    with TestClient(create_app(settings, backend_factory=lambda s: fake), raise_server_exceptions=False) as c:
        yield c


# --- the underrun rule and one generation's meter (pure) --------------------------------------------


@pytest.mark.unit
def test_playback_clock_counts_a_chunk_that_arrives_after_the_buffer_ran_dry() -> None:
    clock = PlaybackClock()
    assert clock.chunk(10.0, 0.08) is False  # playback starts: 0.08 s buffered, dry at 10.08
    assert clock.chunk(10.05, 0.32) is False  # 0.03 s still buffered; dry at 10.40
    assert clock.chunk(10.40, 0.32) is False  # arrives exactly as the buffer empties: no gap heard
    assert clock.chunk(11.00, 0.32) is True  # dry since 10.72: an underrun; playback resumes at 11.00
    assert clock.chunk(11.30, 0.10) is False  # 0.02 s left when it came; dry at 11.42
    assert clock.chunk(11.43, 0.10) is True


@pytest.mark.unit
def test_a_generation_meters_ttfa_rtf_audio_and_the_gauges() -> None:
    metrics = GatewayMetrics([CV], lambda m: m if m == CV else None, lambda: 0)
    get = metrics.registry.get_sample_value
    now = [100.0]
    meter = Generation(metrics, CV, received_at=99.0, streamed=True, clock=lambda: now[0])
    assert get("tts_active_requests", {"model": CV}) == 1 and get("tts_queued_requests", {"model": CV}) == 1
    meter.audio(0.0)  # an empty response is no audio: still queued
    assert get("tts_queued_requests", {"model": CV}) == 1
    meter.audio(0.5)  # first audio 1 s after receipt
    assert get("tts_time_to_first_audio_seconds_sum", {"model": CV}) == 1.0
    assert get("tts_queued_requests", {"model": CV}) == 0 and get("tts_active_requests", {"model": CV}) == 1
    now[0] = 100.5  # as the first 0.5 s finish playing: on time
    meter.audio(1.5)
    now[0] = 103.0  # a 2.5 s gap with 1.5 s buffered: an underrun
    meter.audio(0.5)
    now[0] = 104.0
    meter.completed()
    meter.close()
    meter.close()  # idempotent
    assert get("tts_stream_underruns_total", {"model": CV}) == 1
    assert get("tts_audio_seconds_total", {"model": CV}) == 2.5
    assert get("tts_real_time_factor_sum", {"model": CV}) == (104.0 - 99.0) / 2.5
    assert get("tts_active_requests", {"model": CV}) == 0 and get("tts_queued_requests", {"model": CV}) == 0
    assert get("tts_time_to_first_audio_seconds_count", {"model": CV}) == 1


@pytest.mark.unit
def test_model_labels_are_served_ids_or_a_fixed_word() -> None:
    metrics = GatewayMetrics([CV], lambda m: CV if m in (CV, f"Qwen/{CV}") else None, lambda: 0)
    trace = RequestTrace("/v1/audio/speech")
    assert trace.model_label() == "none"
    metrics.requested(trace, "some free text the client sent")
    assert trace.model_label() == "unknown"
    metrics.requested(trace, f"Qwen/{CV}")
    assert trace.model_label() == CV
    metrics.generation(CV, trace, streamed=False).close()
    metrics.generation("tiny-base", trace, streamed=False).close()  # (not served: labelled unknown)
    assert trace.model_label() == "mixed"


def test_route_labels_are_remembered_only_for_paths_without_parameters() -> None:
    from starlette.routing import Route

    from gateway.metrics import ROUTE_OTHER, MetricsMiddleware

    async def endpoint(request):  # type: ignore[no-untyped-def]
        return None

    middleware = MetricsMiddleware(None, GatewayMetrics([CV], lambda m: None, lambda: 0),  # type: ignore[arg-type]
                                   [Route("/v1/audio/voices/{name}", endpoint, methods=["DELETE"]),
                                    Route("/v1/audio/speech", endpoint, methods=["POST"])])

    def scope(path: str, method: str = "POST") -> dict:
        return {"type": "http", "path": path, "method": method, "root_path": ""}

    for _ in range(2):
        assert middleware.template(scope("/v1/audio/speech")) == "/v1/audio/speech"
        assert middleware.template(scope("/v1/audio/speech", "GET")) == "/v1/audio/speech"  # a wrong method names it
        assert middleware.template(scope("/v1/audio/voices/anna", "DELETE")) == "/v1/audio/voices/{name}"
        assert middleware.template(scope("/nowhere")) == ROUTE_OTHER
    assert middleware._fixed == {"/v1/audio/speech": "/v1/audio/speech"}  # any other path is looked up each time


def test_fastapis_own_telemetry_is_on_only_where_the_environment_configures_opentelemetry() -> None:
    from gateway.app import _opentelemetry_configured

    assert not _opentelemetry_configured({"PATH": "/bin", "TTS_MAX_RUNNING": "4"})
    assert _opentelemetry_configured({"OTEL_SERVICE_NAME": "tts-gateway"})
    assert _opentelemetry_configured({"FASTAPI_OTEL_AUTO_CONFIGURE": "true"})


# --- over the app ---------------------------------------------------------------------------------


def test_every_metric_is_exposed_before_any_request(client) -> None:  # type: ignore[no-untyped-def]
    s = scrape(client.get)
    for model in ("tiny-custom-voice", "tiny-voice-design", "tiny-base"):
        for name in ("tts_time_to_first_audio_seconds_count", "tts_real_time_factor_count", "tts_audio_seconds_total",
                     "tts_active_requests", "tts_queued_requests", "tts_stream_underruns_total"):
            assert sample(s, name, model=model) == 0
    assert sample(s, "tts_uploaded_voices") == 0
    text = client.get("/metrics").text
    for family in ("tts_requests_total", "tts_cancelled_requests_total", "tts_errors_total"):
        assert f"# TYPE {family} counter" in text
    assert "below 1 is faster than real time" in text  # the RTF's direction is in its help


def test_a_known_request_moves_each_metric_by_its_amount(client) -> None:  # type: ignore[no-untyped-def]
    r = client.post(SPEECH, json={"input": "Hello", "voice": "ryan", "max_new_tokens": 5, "model": CV})
    assert r.status_code == 200
    s = scrape(client.get)
    assert sample(s, "tts_requests_total", route=SPEECH, status="200", model=CV) == 1
    assert sample(s, "tts_time_to_first_audio_seconds_count", model=CV) == 1
    assert sample(s, "tts_real_time_factor_count", model=CV) == 1
    assert sample(s, "tts_audio_seconds_total", model=CV) == pytest.approx(5 * SAMPLES_PER_FRAME / SAMPLE_RATE)
    assert sample(s, "tts_active_requests", model=CV) == 0 and sample(s, "tts_queued_requests", model=CV) == 0
    assert sample(s, "tts_stream_underruns_total", model=CV) == 0
    assert count(s, "tts_errors_total", cause="BadRequestError") == 0
    # a first audio after the request arrived and before the client had its answer
    ttfa = sample(s, "tts_time_to_first_audio_seconds_sum", model=CV)
    assert 0 < ttfa < 10


@pytest.mark.parametrize("stream", [{"stream_format": "audio"}, {"stream": True}], ids=["raw", "sse"])
def test_streams_are_metered_like_whole_clips(client, stream) -> None:  # type: ignore[no-untyped-def]
    r = client.post(SPEECH, json={"input": "Hi", "response_format": "pcm", "max_new_tokens": 9, **stream})
    assert r.status_code == 200
    s = scrape(client.get)
    assert sample(s, "tts_requests_total", route=SPEECH, status="200", model=CV) == 1
    assert sample(s, "tts_time_to_first_audio_seconds_count", model=CV) == 1
    assert sample(s, "tts_audio_seconds_total", model=CV) == pytest.approx(9 * FRAME_S)
    assert sample(s, "tts_real_time_factor_count", model=CV) == 1


def test_a_stream_that_stalls_longer_than_its_buffered_audio_underruns(client) -> None:  # type: ignore[no-untyped-def]
    body = {"input": "stall", "response_format": "pcm", "max_new_tokens": 9}
    assert client.post(SPEECH, json={**body, "stream_format": "audio"}).status_code == 200
    assert sample(scrape(client.get), "tts_stream_underruns_total", model=CV) >= 1
    before = sample(scrape(client.get), "tts_stream_underruns_total", model=CV)
    # the same stall in a whole clip: nothing was playing, so nothing ran dry
    assert client.post(SPEECH, json=body).status_code == 200
    assert sample(scrape(client.get), "tts_stream_underruns_total", model=CV) == before


def test_errors_by_cause_and_bounded_labels(client) -> None:  # type: ignore[no-untyped-def]
    assert client.post(SPEECH, json={"input": "Hi", "voice": "nobody"}).status_code == 400
    assert client.post(SPEECH, json={"input": "Hi", "model": "no such model, free text"}).status_code == 404
    assert client.post(SPEECH, json={"input": "fail-unavailable"}).status_code == 503
    assert client.post(SPEECH, json={"input": "fail-internal"}).status_code == 500
    r = client.post(SPEECH, json={"input": "fail-midstream", "stream": True, "response_format": "pcm",
                                  "max_new_tokens": 9})
    assert r.status_code == 200 and b"speech.audio.error" in r.content
    assert client.get("/v1/models").status_code == 200
    assert client.get("/no/such/path/speech-1234").status_code == 404
    s = scrape(client.get)
    assert sample(s, "tts_requests_total", route=SPEECH, status="400", model="none") == 1
    assert sample(s, "tts_requests_total", route=SPEECH, status="404", model="unknown") == 1
    assert sample(s, "tts_requests_total", route=SPEECH, status="503", model=CV) == 1
    assert sample(s, "tts_requests_total", route=SPEECH, status="500", model=CV) == 1
    assert sample(s, "tts_requests_total", route=SPEECH, status="200", model=CV) == 1  # the SSE error is in-band
    assert sample(s, "tts_requests_total", route="/v1/models", status="200", model="none") == 1
    assert sample(s, "tts_requests_total", route="other", status="404", model="none") == 1
    assert sample(s, "tts_errors_total", cause="BadRequestError") == 1
    assert sample(s, "tts_errors_total", cause="NotFoundError") == 2
    assert sample(s, "tts_errors_total", cause="ServiceUnavailableError") == 1
    assert sample(s, "tts_errors_total", cause="InternalServerError") == 2  # the 500 and the SSE error event
    labels = {v for (name, ls) in s for k, v in ls if name == "tts_requests_total"}
    assert not any("free text" in v or "1234" in v for v in labels)
    assert sample(s, "tts_active_requests", model=CV) == 0 and sample(s, "tts_queued_requests", model=CV) == 0


def test_batch_items_are_generations_of_one_request(client) -> None:  # type: ignore[no-untyped-def]
    r = client.post(BATCH, json={"items": [{"input": "One"}, {"input": "Two"}, {"input": "Hi", "voice": "nobody"}],
                                 "max_new_tokens": 3, "model": CV})
    assert r.json()["succeeded"] == 2
    s = scrape(client.get)
    assert sample(s, "tts_requests_total", route=BATCH, status="200", model=CV) == 1
    assert sample(s, "tts_time_to_first_audio_seconds_count", model=CV) == 2
    assert sample(s, "tts_audio_seconds_total", model=CV) == pytest.approx(2 * 3 * FRAME_S)
    assert sample(s, "tts_errors_total", cause="BadRequestError") == 1  # the failed item
    r = client.post(BATCH, json={"items": [{"input": "One"}, {"input": "Two", "task_type": "VoiceDesign",
                                                               "instructions": "A warm and friendly voice"}]})
    assert r.json()["succeeded"] == 2
    assert sample(scrape(client.get), "tts_requests_total", route=BATCH, status="200", model="mixed") == 1


def test_websocket_requests_are_counted_per_tts_request(client) -> None:  # type: ignore[no-untyped-def]
    with client.websocket_connect(WS) as ws:
        ws.send_json({"type": "session.config", "voice": "vivian", "max_new_tokens": 3, "stream_audio": True,
                      "response_format": "pcm", "split_granularity": "sentence"})
        ws.send_json({"type": "input.text", "text": "First one. Second one. fail-internal"})
        ws.send_json({"type": "input.done"})
        while True:
            m = ws.receive()
            if m.get("text") and json.loads(m["text"])["type"] == "session.done":
                break
        ws.send_json({"type": "session.close"})
    s = scrape(client.get)
    assert sample(s, "tts_requests_total", route=WS, status="200", model=CV) == 2
    assert sample(s, "tts_requests_total", route=WS, status="500", model=CV) == 1
    assert sample(s, "tts_errors_total", cause="InternalServerError") == 1
    assert sample(s, "tts_time_to_first_audio_seconds_count", model=CV) == 2
    assert sample(s, "tts_audio_seconds_total", model=CV) == pytest.approx(2 * 3 * FRAME_S)


def test_uploaded_voices_are_counted_at_scrape_time(client) -> None:  # type: ignore[no-untyped-def]
    assert sample(scrape(client.get), "tts_uploaded_voices") == 0
    r = client.post("/v1/audio/voices", data={"name": "narrator", "consent": "ok"},
                    files={"audio_sample": ("v.wav", wav(1.5), "audio/wav")})
    assert r.status_code == 200, r.text
    assert sample(scrape(client.get), "tts_uploaded_voices") == 1
    assert client.delete("/v1/audio/voices/narrator").status_code == 200
    assert sample(scrape(client.get), "tts_uploaded_voices") == 0


def test_each_app_has_its_own_registry(settings, client) -> None:  # type: ignore[no-untyped-def]
    assert client.post(SPEECH, json={"input": "Hi"}).status_code == 200
    with TestClient(create_app(settings, backend_factory=lambda s: FakeBackend())) as other:
        assert count(scrape(other.get), "tts_requests_total", route=SPEECH, status="200", model=CV) == 0
    assert sample(scrape(client.get), "tts_requests_total", route=SPEECH, status="200", model=CV) == 1


# --- over a real HTTP server: disconnects and requests in flight -----------------------------------------


@contextlib.contextmanager
def served(settings, backend) -> Iterator[str]:  # type: ignore[no-untyped-def]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gateway.app, "_triton_backend", lambda s: (lambda url: backend))
        port = free_port()
        server, thread = start_gateway(settings, port)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def eventually(predicate, timeout_s: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_client_disconnects_are_counted(settings, fake) -> None:  # type: ignore[no-untyped-def]
    with served(settings, fake) as url:
        def metrics() -> Samples:
            return scrape(lambda path: httpx.get(url + path, timeout=10))

        body = {"input": "slow", "stream_format": "audio", "response_format": "pcm", "max_new_tokens": 2000}
        with httpx.stream("POST", url + SPEECH, json=body, timeout=10) as r:
            assert r.status_code == 200
            next(r.iter_raw())
        assert eventually(lambda: count(metrics(), "tts_cancelled_requests_total", route=SPEECH) == 1)
        assert eventually(lambda: sample(metrics(), "tts_active_requests", model=CV) == 0)
        s = metrics()
        assert sample(s, "tts_requests_total", route=SPEECH, status="200", model=CV) == 1  # the status was sent
        assert sample(s, "tts_real_time_factor_count", model=CV) == 0  # never completed
        # gone before the status line: 499
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(url + SPEECH, json={"input": "slow", "max_new_tokens": 2000}, timeout=0.5)
        assert eventually(lambda: count(metrics(), "tts_cancelled_requests_total", route=SPEECH) == 2)
        assert eventually(lambda: count(metrics(), "tts_requests_total", route=SPEECH, status="499", model=CV) == 1)
        # a complete response is not a cancellation
        assert httpx.post(url + SPEECH, json={"input": "Hi"}, timeout=10).status_code == 200
        assert count(metrics(), "tts_cancelled_requests_total", route=SPEECH) == 2


def test_queued_and_active_while_a_request_waits_for_its_first_audio(settings, fake) -> None:  # type: ignore[no-untyped-def]
    with served(settings, fake) as url:
        def metrics() -> Samples:
            return scrape(lambda path: httpx.get(url + path, timeout=10))

        done: list[int] = []
        worker = threading.Thread(target=lambda: done.append(
            httpx.post(url + SPEECH, json={"input": "held", "max_new_tokens": 3}, timeout=30).status_code))
        worker.start()
        try:
            assert eventually(lambda: sample(metrics(), "tts_queued_requests", model=CV) == 1)
            assert sample(metrics(), "tts_active_requests", model=CV) == 1
        finally:
            fake.release.set()
            worker.join(30)
        assert done == [200]
        s = metrics()
        assert sample(s, "tts_queued_requests", model=CV) == 0 and sample(s, "tts_active_requests", model=CV) == 0
