"""Graceful drain (gateway.drain) of a real `python -m gateway` process over the fake backend
(tests/fake_gateway.py): after SIGTERM, /ready is 503 at once, new requests get 503 + Retry-After
(WebSocket: close 1013), what is in flight finishes with all its audio (a WebSocket session its open
utterance, then close 1001), and the process exits with status 0 once nothing is left; the drain
time bounds the wait, and a second signal ends it.

Requests are held in flight by a gate file (the fake's "gated" text), never by sleeping; the only
time bounds are "within N seconds" deadlines.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from gateway_fixtures import fake_audio
from gateway_process import GatewayProcess, fake_config
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from gateway import encoding

pytestmark = pytest.mark.gateway

SPEECH = "/v1/audio/speech"
GATED = {"input": "gated", "stream_format": "audio", "response_format": "pcm", "max_new_tokens": 9}
EXIT_S = 20  # deadline for the process to exit once it has nothing left to do


def start(tmp_path: Path, *args: str, **config: object) -> tuple[GatewayProcess, Path]:
    gate = tmp_path / "gate"
    gw = GatewayProcess(fake_config(tmp_path, **config), tmp_path / "gateway.log", fake=True, args=args,
                        env={"FAKE_GATE": str(gate)})
    return gw.start(), gate


def ws_json(ws: ClientConnection) -> dict:
    message = ws.recv(timeout=10)
    assert isinstance(message, str), message
    return dict(json.loads(message))


def ws_closed_with(ws: ClientConnection) -> int:
    with pytest.raises(ConnectionClosed) as closed:
        ws.recv(timeout=10)
    assert closed.value.rcvd is not None
    return closed.value.rcvd.code


def test_sigterm_drains_a_stream_in_flight_then_exits_0(tmp_path) -> None:  # type: ignore[no-untyped-def]
    gw, gate = start(tmp_path)
    try:
        with httpx.stream("POST", gw.url + SPEECH, json=GATED, timeout=30) as stream:
            assert stream.status_code == 200
            chunks = stream.iter_raw()
            audio = next(chunks)  # the first chunk is out; the rest waits for the gate
            gw.terminate()
            ready = gw.until_draining()
            assert ready.json()["status"] == "draining" and ready.headers["retry-after"] == "5"
            r = httpx.post(gw.url + SPEECH, json={"input": "Hi"}, timeout=10)
            assert r.status_code == 503 and r.headers["retry-after"] == "5"
            err = r.json()["error"]
            assert err["type"] == "ServiceUnavailableError" and err["code"] == 503 and "shutting down" in err["message"]
            assert r.headers["x-request-id"]
            assert httpx.get(gw.url + "/v1/models", timeout=10).status_code == 503
            assert httpx.get(gw.url + "/health", timeout=10).status_code == 200
            assert httpx.get(gw.url + "/metrics", timeout=10).status_code == 200
            with connect(gw.url.replace("http", "ws") + "/v1/audio/speech/stream") as ws:
                assert "shutting down" in ws_json(ws)["message"]
                assert ws_closed_with(ws) == 1013  # try again later
            assert gw.proc is not None and gw.proc.poll() is None  # still serving the stream
            gate.touch()
            audio += b"".join(chunks)
        assert audio == encoding.pcm_bytes(fake_audio(9))  # all of it
        assert gw.wait(EXIT_S) == 0
        assert "drained: nothing in flight" in gw.log_text()
    finally:
        gw.stop()


def test_websocket_sessions_finish_their_open_utterance_then_close(tmp_path) -> None:  # type: ignore[no-untyped-def]
    gw, _ = start(tmp_path)
    url = gw.url.replace("http", "ws") + "/v1/audio/speech/stream"
    config = {"type": "session.config", "voice": "vivian", "max_new_tokens": 2, "response_format": "pcm"}
    try:
        with connect(url) as idle, connect(url) as busy:
            idle.send(json.dumps(config))
            busy.send(json.dumps(config))
            busy.send(json.dumps({"type": "input.text", "text": "Hello there."}))  # an utterance is open
            for ws in (idle, busy):  # messages are handled in order: this answer means the ones before were
                ws.send(json.dumps({"type": "ping"}))
                assert "Unknown message type" in ws_json(ws)["message"]
            gw.terminate()
            assert "shutting down" in ws_json(idle)["message"]
            assert ws_closed_with(idle) == 1001  # going away
            busy.send(json.dumps({"type": "input.done"}))
            assert ws_json(busy)["type"] == "audio.start"
            assert busy.recv(timeout=10) == encoding.pcm_bytes(fake_audio(2))
            assert ws_json(busy)["type"] == "audio.done"
            assert ws_json(busy) == {"type": "session.done", "utterance_index": 0, "total_sentences": 1}
            assert "shutting down" in ws_json(busy)["message"]
            assert ws_closed_with(busy) == 1001
        assert gw.wait(EXIT_S) == 0
    finally:
        gw.stop()


def test_the_drain_time_bounds_the_wait(tmp_path) -> None:  # type: ignore[no-untyped-def]
    gw, _ = start(tmp_path, "--drain-timeout", "1", drain_timeout_s=60)  # the flag wins over the config
    try:
        with httpx.stream("POST", gw.url + SPEECH, json=GATED, timeout=30) as stream:
            chunks = stream.iter_raw()
            next(chunks)
            gw.terminate()
            with pytest.raises(httpx.RemoteProtocolError):  # never released: cut when the time is up
                b"".join(chunks)
        assert gw.wait(EXIT_S) == 0
        assert "drain time (1s) is up: 1 request(s) still in flight are cut" in gw.log_text()
    finally:
        gw.stop()


def test_a_second_signal_stops_at_once(tmp_path) -> None:  # type: ignore[no-untyped-def]
    gw, _ = start(tmp_path, drain_timeout_s=600)
    try:
        with httpx.stream("POST", gw.url + SPEECH, json=GATED, timeout=30) as stream:
            chunks = stream.iter_raw()  # (kept: a dropped iterator closes the stream, ending the drain)
            next(chunks)
            gw.terminate()
            gw.until_draining()
            gw.terminate()
            assert gw.wait(EXIT_S) == 0  # far sooner than the 600 s drain time
        assert "second signal" in gw.log_text()
    finally:
        gw.stop()
