"""What the families' end-to-end tests share (tests/e2e_tests/test_e2e_<family>.py): the speech route, the
`http` fixture over a module's `stack`, a response's WAV samples, "the same audio as the offline engine" (one
16-bit step), the three ways to get one request's audio (whole file, raw stream, SSE) and data URLs."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from gateway import encoding

SPEECH = "/v1/audio/speech"


@pytest.fixture(scope="module")
def http(stack: dict[str, Any]) -> Iterator[httpx.Client]:
    """A client of the module's gateway (its `stack` fixture's `url`)."""
    with httpx.Client(base_url=stack["url"], timeout=600) as c:
        yield c


def wav_at(r: httpx.Response, rate: int) -> np.ndarray:
    """A 200 response's WAV samples (int16), at `rate`."""
    assert r.status_code == 200, r.text
    got, samples = encoding.parse_wav(r.content)
    assert got == rate
    return samples


def same_audio(got_int16: np.ndarray, want_float: np.ndarray, samples: int | None = None) -> None:
    """The served int16 audio is the offline engine's float audio within one 16-bit step (and, given
    `samples`, that long)."""
    want = encoding.to_int16(want_float).astype(np.int32)
    if samples is not None:
        assert want.size == samples
    assert got_int16.shape == want.shape, (got_int16.shape, want.shape)
    assert want.size and np.max(np.abs(got_int16.astype(np.int32) - want)) <= 1


def three_ways(http: httpx.Client, payload: dict[str, Any]) -> tuple[list[np.ndarray], int]:
    """The whole file, the raw PCM stream and SSE events (int16 samples of each), and the frames the
    SSE's final usage counts."""
    out = [encoding.parse_wav(_ok(http.post(SPEECH, json=payload)).content)[1]]
    with http.stream("POST", SPEECH, json={**payload, "response_format": "pcm", "stream_format": "audio"}) as r:
        assert r.status_code == 200, r.read()
        out.append(np.frombuffer(b"".join(r.iter_bytes()), "<i2"))
    with http.stream("POST", SPEECH, json={**payload, "response_format": "pcm", "stream": True}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        text = "".join(r.iter_text())
    events = [json.loads(line[len("data: "):]) for line in text.splitlines() if line.startswith("data: ")]
    assert events[-1]["type"] == "speech.audio.done", events[-1]
    out.append(np.frombuffer(b"".join(base64.b64decode(e["audio"]) for e in events
                                      if e["type"] == "speech.audio.delta"), "<i2"))
    return out, int(events[-1]["usage"]["output_tokens"])


def data_url(path: Path) -> str:
    """A file as a base64 WAV data URL (`ref_audio`)."""
    return "data:audio/wav;base64," + base64.b64encode(Path(path).read_bytes()).decode()


def _ok(r: httpx.Response) -> httpx.Response:
    assert r.status_code == 200, r.text
    return r
