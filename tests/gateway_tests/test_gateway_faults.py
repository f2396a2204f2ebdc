"""What clients see when a model breaks under them, when Triton goes away, and when a request runs
out of time: the gateway (uvicorn, in a thread) over the fake backend, with a fast health monitor.

- A model that fails its health probe ends every stream in flight that needs it within a monitor
  round: SSE with `speech.audio.error`, a raw stream cut short, a request before its headers with
  503 + Retry-After, a WebSocket request with `error` + `audio.done(error)` while the session goes
  on; /ready is 503 naming the model until the reload through the repository API is done and a
  probe passes, then 200 again and requests succeed, all without a person.
- The same for a step of the voice_features ensemble (named as `voice_features: <step>: ...`) and for
  Triton not answering at all (no reload: the gRPC channel reconnects when it is back).
- request_timeout_s / stall_timeout_s: 504 before the headers, in-band after; the Triton request is
  cancelled; a stream that keeps progressing is never cut.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import fault_clients
import httpx
import pytest
from fault_clients import SPEECH, Client, until_audio_done, ws_done, ws_errors
from gateway_fixtures import NAMES, FakeBackend, fake_deployment
from websockets.sync.client import connect

from gateway import sse
from gateway.app import create_app
from gateway.backend import ProbeResult
from ttscore.backend.triton_server import free_port

pytestmark = pytest.mark.gateway

CV = f"speech_generation_{NAMES['custom_voice']}"
DEAD = ProbeResult("failed", "Stub process 'x_0_0' is not healthy.")
FAST = {"health_interval_s": 0.05, "readiness_ttl_s": 0.05}


class Served:
    def __init__(self, tmp_path, fake: FakeBackend, **settings: Any) -> None:
        import uvicorn

        self.fake = fake
        app = create_app(fake_deployment(tmp_path, **{**FAST, **settings}), backend_factory=lambda s: fake)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        assert wait_for(lambda: self.ready_status() is not None, 30), "the gateway did not start"

    def ready_status(self) -> int | None:
        try:
            return httpx.get(self.url + "/ready", timeout=2).status_code
        except httpx.HTTPError:
            return None

    def ready(self) -> httpx.Response:
        return httpx.get(self.url + "/ready", timeout=5)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture
def served(tmp_path):
    made: list[Served] = []

    def make(fake: FakeBackend | None = None, **settings: Any) -> Served:
        made.append(Served(tmp_path, fake or FakeBackend(), **settings))
        return made[-1]

    yield make
    for s in made:
        s.stop()


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    return None


def sse_client(url: str, text: str, **fields: Any) -> Callable[[Client], Any]:
    return fault_clients.sse_client(url, {"input": text, "voice": "vivian", "max_new_tokens": 50, **fields}, 30)


def raw_client(url: str, text: str) -> Callable[[Client], Any]:
    return fault_clients.raw_client(url, {"input": text, "voice": "vivian", "max_new_tokens": 50}, 30)


def plain_client(url: str, text: str) -> Callable[[Client], Any]:
    def work(c: Client) -> httpx.Response:
        return httpx.post(url + SPEECH, json={"input": text, "voice": "vivian", "max_new_tokens": 5}, timeout=30)
    return work


def ws_client(port: int, first: str, then: Callable[[], None]) -> Callable[[Client], Any]:
    """Speaks `first`, collects up to its audio.done, calls `then`, speaks once more: the session goes on."""
    def work(c: Client) -> list:
        got: list = []
        with connect(f"ws://127.0.0.1:{port}/v1/audio/speech/stream") as ws:
            ws.send(json.dumps({"type": "session.config", "voice": "vivian", "max_new_tokens": 9,
                                "stream_audio": True}))
            ws.send(json.dumps({"type": "input.text", "text": first}))
            ws.send(json.dumps({"type": "input.done"}))
            until_audio_done(ws, c, got, 30)
            then()
            ws.send(json.dumps({"type": "input.text", "text": "Back again."}))
            ws.send(json.dumps({"type": "input.done"}))
            until_audio_done(ws, c, got, 30)
        return got
    return work


# --- a model breaks ------------------------------------------------------------------------------


def test_a_broken_model_ends_every_stream_in_flight_and_is_reloaded(served):
    gw = served(FakeBackend(hold_reloads=True))
    fake = gw.fake
    assert gw.ready().status_code == 200
    recovered = threading.Event()
    clients = {
        "sse": Client(sse_client(gw.url, "hang-midstream")),
        "raw": Client(raw_client(gw.url, "hang-midstream")),
        "ws": Client(ws_client(gw.port, "hang-midstream", lambda: recovered.wait(30))),
    }
    for c in clients.values():
        assert c.first.wait(10), "no audio before the fault"
    clients["plain"] = Client(plain_client(gw.url, "hang"))  # headers not sent yet
    assert wait_for(lambda: any(call.fields["text"] == "hang" for call in fake.calls), 10)

    broke = time.monotonic()
    fake.probe_results[CV] = DEAD  # what a probe gets once the stub is gone
    for name in ("sse", "raw", "plain"):
        clients[name].join(10)
        assert not clients[name].is_alive(), f"{name} still hanging"
        assert clients[name].ended_at - broke < 5, name

    events = clients["sse"].result
    assert [name for name, _ in events][-1] == sse.ERROR
    error = events[-1][1]["error"]
    assert error["code"] == 503 and error["type"] == "server_error"
    assert isinstance(clients["raw"].result, httpx.RemoteProtocolError)  # body cut: incomplete chunked read
    plain = clients["plain"].result
    assert plain.status_code == 503 and plain.headers["retry-after"] == "5"
    assert plain.json()["error"]["type"] == "ServiceUnavailableError"

    r = gw.ready()
    assert r.status_code == 503 and r.headers["retry-after"] == "5"
    body = r.json()
    assert body["models"][CV] is False and "not healthy" in body["broken"][CV]
    refused = httpx.post(gw.url + SPEECH, json={"input": "Hi", "voice": "vivian"}, timeout=10)
    assert refused.status_code == 503 and CV in refused.json()["error"]["message"]
    assert fake.reloads == [CV]
    assert all(call.cancelled for call in fake.calls if call.model == CV and not call.finished)

    fake.hold_reloads = False  # the reload completes: a fresh stub
    assert wait_for(lambda: gw.ready().status_code == 200, 10)
    assert gw.ready().json()["broken"] == {}
    ok = httpx.post(gw.url + SPEECH, json={"input": "Hi", "voice": "vivian", "max_new_tokens": 5}, timeout=10)
    assert ok.status_code == 200 and ok.content[:4] == b"RIFF"
    recovered.set()
    clients["ws"].join(10)
    messages = clients["ws"].result
    assert isinstance(messages, list), messages
    assert ws_done(messages) == [True, False]  # the failed request, then one after the repair
    [err] = ws_errors(messages)
    assert err.startswith("Generation failed for utterance 0, sentence 0: The speech service is not available")
    assert fake.reloads == [CV]


def test_a_broken_ensemble_step_is_named_and_reloaded(served):
    fake = FakeBackend(components={"voice_features": ["audio_preprocess", "speaker_encoder", "speech_encoder"]},
                       hold_reloads=True)
    gw = served(fake)
    assert wait_for(lambda: gw.ready().status_code == 200)
    fake.probe_results["audio_preprocess"] = DEAD
    def not_ready():
        r = gw.ready()
        return r if r.status_code == 503 else None

    r = wait_for(not_ready, 5)
    assert r is not None
    body = r.json()
    assert body["models"]["voice_features"] is False and all(v for m, v in body["models"].items() if m != "voice_features")
    assert body["broken"]["voice_features"].startswith("audio_preprocess: ")
    assert wait_for(lambda: fake.reloads == ["audio_preprocess"], 5)
    fake.hold_reloads = False
    assert wait_for(lambda: gw.ready().status_code == 200, 10)


def test_triton_gone_ends_streams_and_readiness_follows_it_back(served):
    gw = served()
    fake = gw.fake
    c = Client(sse_client(gw.url, "hang-midstream"))
    assert c.first.wait(10)
    gone = time.monotonic()
    fake.live = fake.ready = False
    c.join(10)
    assert not c.is_alive() and c.ended_at - gone < 5
    assert c.result[-1][0] == sse.ERROR
    r = gw.ready()
    assert r.status_code == 503 and r.json()["triton"] is False
    assert "Triton is unreachable" in r.json()["broken"][CV]
    fake.live = fake.ready = True  # e.g. restarted by `triton-tts serve`
    assert wait_for(lambda: gw.ready().status_code == 200, 10)
    assert fake.reloads == []  # nothing to reload: a restarted Triton loads every model


# --- time limits ---------------------------------------------------------------------------------


def test_a_stalled_stream_is_cut_in_band_and_cancelled_in_triton(served):
    gw = served(stall_timeout_s=0.3, request_timeout_s=20)
    c = Client(sse_client(gw.url, "hang-midstream"))
    c.join(10)
    assert not c.is_alive()
    name, data = c.result[-1]
    assert name == sse.ERROR and data["error"]["code"] == 504 and "sent nothing for 0.3 s" in data["error"]["message"]
    assert wait_for(lambda: gw.fake.calls[-1].cancelled, 5)
    c = Client(raw_client(gw.url, "hang-midstream"))
    c.join(10)
    assert isinstance(c.result, httpx.RemoteProtocolError)


def test_a_request_past_its_time_limit_is_504_before_the_headers(served):
    gw = served(stall_timeout_s=0.2, request_timeout_s=0.5)
    started = time.monotonic()
    r = httpx.post(gw.url + SPEECH, json={"input": "hang", "voice": "vivian"}, timeout=10)
    assert 0.4 < time.monotonic() - started < 5
    assert r.status_code == 504 and r.json()["error"]["type"] == "GatewayTimeoutError"
    assert "limit of 0.5 s" in r.json()["error"]["message"]
    assert wait_for(lambda: gw.fake.calls[-1].cancelled, 5)
    # The stall limit does not apply before the first response (a request may queue).
    r = httpx.post(gw.url + SPEECH, json={"input": "hang", "voice": "vivian", "stream": True}, timeout=10)
    assert r.status_code == 504 and "limit of 0.5 s" in r.json()["error"]["message"]


def test_a_slow_but_steady_stream_is_never_cut(served):
    gw = served(stall_timeout_s=0.3, request_timeout_s=20)
    c = Client(sse_client(gw.url, "slow", max_new_tokens=60))  # 15 chunks 0.05 s apart
    c.join(20)
    assert [name for name, _ in c.result][-1] == sse.DONE


def test_keepalives_hold_a_long_step_past_the_stall_limit_and_carry_nothing(served):
    """speech_generation's keep-alives during a step longer than stall_timeout_s (0.6 s of them, 0.1 s apart, against
    a 0.3 s limit): the stream is not cut, and the client gets the same audio as without them (no empty deltas)."""
    from gateway_fixtures import KEEPALIVES

    gw = served(stall_timeout_s=0.3, request_timeout_s=20)
    got = {}
    for text in ("keepalive-midstream", "plain"):
        c = Client(sse_client(gw.url, text, max_new_tokens=6))
        c.join(20)
        assert [name for name, _ in c.result][-1] == sse.DONE, c.result
        deltas = [data["audio"] for name, data in c.result if name == sse.DELTA]
        assert all(deltas), "an empty audio delta reached the client"
        got[text] = "".join(deltas)
        c = Client(raw_client(gw.url, text))
        c.join(20)
        assert isinstance(c.result, int) and c.result > 0, c.result
        c = Client(ws_client(gw.port, text, lambda: None))
        c.join(20)
        assert isinstance(c.result, list), c.result
        got["ws " + text] = [len(m) if isinstance(m, bytes) else m.get("type") for m in c.result]
    assert got["keepalive-midstream"] == got["plain"]
    assert got["ws keepalive-midstream"] == got["ws plain"]  # the same messages: no empty audio frame
    assert 0.1 * KEEPALIVES > 0.3  # the keep-alives span more than the stall limit


def test_websocket_request_past_its_limit_reports_and_the_session_goes_on(served):
    gw = served(stall_timeout_s=0.3, request_timeout_s=20)
    c = Client(ws_client(gw.port, "hang-midstream", lambda: None))
    c.join(20)
    assert isinstance(c.result, list), c.result
    assert ws_done(c.result) == [True, False]
    [err] = ws_errors(c.result)
    assert "sent nothing for 0.3 s" in err


def test_a_broken_aligner_is_named_by_readiness_and_reloaded_like_every_model(served):
    """word_timestamps' forced aligner (settings.aligner_model) is watched by the health monitor."""
    fake = FakeBackend(hold_reloads=True)
    gw = served(fake, aligner_model="forced_aligner")
    assert wait_for(lambda: gw.ready().status_code == 200)
    assert "forced_aligner" in gw.ready().json()["models"]
    fake.probe_results["forced_aligner"] = DEAD

    def not_ready():
        r = gw.ready()
        return r if r.status_code == 503 else None

    r = wait_for(not_ready, 5)
    assert r is not None and "not healthy" in r.json()["broken"]["forced_aligner"]
    assert wait_for(lambda: fake.reloads == ["forced_aligner"], 5)
    fake.hold_reloads = False
    assert wait_for(lambda: gw.ready().status_code == 200, 10)
