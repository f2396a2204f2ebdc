"""The clients the fault tests run in threads while a model, Triton or the network breaks
(tests/gateway_tests/test_gateway_faults.py against a fake Triton, tests/e2e_tests/test_faults.py and
test_multi_replica.py against real ones): SSE, raw-stream and WebSocket speech requests, each noting its first
audio, and an SSE response read block by block as it arrives."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from gateway import sse

SPEECH = "/v1/audio/speech"


class Client(threading.Thread):
    """One client in a thread: `first` is set at its first audio, `result` is what it saw (or the exception it
    raised), `ended_at` when it ended (time.monotonic)."""

    def __init__(self, work: Callable[[Client], Any]) -> None:
        super().__init__(daemon=True)
        self.work = work
        self.first = threading.Event()
        self.result: Any = None
        self.ended_at = 0.0
        self.start()

    def run(self) -> None:
        try:
            self.result = self.work(self)
        except Exception as exc:
            self.result = exc
        self.ended_at = time.monotonic()


def sse_blocks(r: httpx.Response) -> Iterator[list[tuple[str, dict]]]:
    """An SSE response's events, one block's (name, data) pairs at a time, each as soon as it has arrived."""
    buf = ""
    for part in r.iter_text():
        buf += part
        while "\n\n" in buf:
            block, buf = buf.split("\n\n", 1)
            yield sse.parse(block + "\n\n")


def sse_client(url: str, body: dict[str, Any], timeout: float) -> Callable[[Client], Any]:
    """`body` streamed as SSE (pcm): the events, parsed as they come."""
    def work(c: Client) -> list[tuple[str, dict]]:
        events: list[tuple[str, dict]] = []
        with httpx.stream("POST", url + SPEECH, json={**body, "stream": True, "response_format": "pcm"},
                          timeout=timeout) as r:
            assert r.status_code == 200, r.read()
            for block in sse_blocks(r):
                events += block
                c.first.set()
        return events
    return work


def raw_client(url: str, body: dict[str, Any], timeout: float) -> Callable[[Client], Any]:
    """`body` as a raw PCM stream: the bytes it got."""
    def work(c: Client) -> int:
        n = 0
        with httpx.stream("POST", url + SPEECH, json={**body, "stream_format": "audio", "response_format": "pcm"},
                          timeout=timeout) as r:
            assert r.status_code == 200
            for part in r.iter_raw():
                n += len(part)
                c.first.set()
        return n
    return work


def until_audio_done(ws: Any, c: Client, got: list, timeout: float) -> None:
    """Collects a WebSocket session's messages (binary audio, JSON events) into `got` up to its audio.done."""
    while True:
        m = ws.recv(timeout=timeout)
        got.append(m if isinstance(m, bytes) else json.loads(m))
        if isinstance(m, bytes):
            c.first.set()
        elif got[-1]["type"] == "audio.done":
            return


def ws_done(messages: list) -> list[bool]:
    """The `error` flag of each audio.done in a WebSocket session's messages."""
    return [m["error"] for m in messages if isinstance(m, dict) and m["type"] == "audio.done"]


def ws_errors(messages: list) -> list[str]:
    """The message of each error event in a WebSocket session's messages."""
    return [m["message"] for m in messages if isinstance(m, dict) and m["type"] == "error"]
