"""What the families' end-to-end tests share (tests/e2e_tests/test_e2e_<family>.py): the speech route, a
module's gateway over the shared deployment and the `http` fixture over its `stack`, a reference clip, the
offline engine fed the tensors the gateway sends, a response's WAV samples, "the same audio as the offline
engine" (one 16-bit step) or as a reference (its float tolerance), the three ways to get one request's audio
(whole file, raw stream, SSE), the openai SDK, the WebSocket, uploaded voices, refusals and requests of
several families in flight together."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf
from gateway_fixtures import start_gateway

from gateway import encoding
from gateway.settings import Settings
from ttscore.backend.triton_server import free_port
from ttscore.contract import tensors as triton_io
from ttscore.runtime.engine import ChunkEvent, Generator
from ttscore.runtime.families import FAMILIES

SPEECH = "/v1/audio/speech"
# Style and cloning fields of other families (Qwen3-TTS's; word timestamps: a 400 without an aligner in the stack, and for
# Gepard always) as (extra fields, refused param):
# the rows a family that takes none of them shares in its refusal matrix (each a 400 naming the field).
OTHER_FAMILIES_FIELDS = [
    ({"speaker_embedding": [0.0, 1.0]}, "speaker_embedding"),
    ({"instructions": "A calm voice."}, "instructions"),
    ({"language": "English"}, "language"),
    ({"task_type": "Base"}, "task_type"),
    ({"x_vector_only_mode": True}, "x_vector_only_mode"),
    ({"non_streaming_mode": False}, "non_streaming_mode"),
    ({"initial_codec_chunk_frames": 4}, "initial_codec_chunk_frames"),
    ({"word_timestamps": True}, "word_timestamps"),
]


@pytest.fixture(scope="module")
def http(stack: dict[str, Any]) -> Iterator[httpx.Client]:
    """A client of the module's gateway (its `stack` fixture's `url`)."""
    with httpx.Client(base_url=stack["url"], timeout=600) as c:
        yield c


@contextmanager
def serve_gateway(config: dict[str, Any], speakers: Path) -> Iterator[str]:
    """A gateway (uvicorn in a thread) over `config`, with its own uploaded-voices folder and no health
    polling; yields its URL and stops it after."""
    cfg = {**config, "health_interval_s": 0, "speaker_samples_dir": str(speakers)}
    port = free_port()
    gw, thread = start_gateway(Settings.from_dict(cfg), port)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        gw.should_exit = True
        thread.join(15)


@contextmanager
def family_stack(e2e_triton: dict[str, Any], tmp_path_factory: pytest.TempPathFactory, family: str, served: str,
                 **more: Any) -> Iterator[dict[str, Any]]:
    """A family's stack over the session's Triton (the e2e_triton fixture): a gateway (serve_gateway, its
    uploaded voices in a fresh folder) and what the family's tests read: "url", "names" (every served model's),
    `served` (the family's served name), "model" (its offline pipeline) and `more`."""
    with serve_gateway(e2e_triton["config"], tmp_path_factory.mktemp(f"{family}-speakers")) as url:
        yield {"url": url, "names": e2e_triton["names"], served: e2e_triton["names"][family],
               "model": e2e_triton["pipelines"][family], **more}


def write_tone(path: Path, rate: int, seconds: float, hz: float = 220, wobble_hz: float = 3,
               floor: float = 0.6) -> np.ndarray:
    """A reference clip (float samples, so the decoded clip is this one exactly): a `hz` tone at 0.3 whose
    amplitude swings between `floor` and 1 (floor 0: a plain product with a `wobble_hz` sine) `wobble_hz`
    times a second. Uploads need at least 1 s."""
    t = np.arange(int(rate * seconds)) / rate
    clip = (0.3 * np.sin(2 * np.pi * hz * t) * (floor + (1 - floor) * np.sin(2 * np.pi * wobble_hz * t))
            ).astype(np.float32)
    sf.write(path, clip, rate, subtype="FLOAT")
    return clip


def offline_events(model: Any, family: str, chunk_policy: str | None = "fixed", **fields: Any) -> list[ChunkEvent]:
    """The offline engine with the tensors the gateway sends for `fields` (the family's request_from_tensors),
    one request at a time (`chunk_policy` None: the engine's default)."""
    request = FAMILIES[family].request_from_tensors(triton_io.request_tensors(**fields))
    policy = {} if chunk_policy is None else {"chunk_policy": chunk_policy}
    return list(Generator(model, max_batch=1, **policy).synthesize(request))


def offline_audio(model: Any, family: str, **fields: Any) -> tuple[np.ndarray, int]:
    """offline_events' audio and the frames it made."""
    events = offline_events(model, family, **fields)
    return np.concatenate([e.pcm for e in events]), sum(e.frames for e in events)


def model_cards(http: httpx.Client) -> dict[str, dict[str, Any]]:
    """/v1/models' cards by id."""
    return {m["id"]: m for m in http.get("/v1/models").json()["data"]}


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


@dataclass
class ThreeWays:
    """One request's audio as the whole file, the raw PCM stream and SSE events (int16 samples of each, in
    that order), the SSE's audio deltas and what its final usage counts."""

    audio: list[np.ndarray]
    deltas: list[bytes]
    counted: int


def sse_events(r: httpx.Response) -> list[dict[str, Any]]:
    """A 200 SSE response's events, the last one `speech.audio.done`."""
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream"), r.read()
    text = "".join(r.iter_text())
    events = [json.loads(line[len("data: "):]) for line in text.splitlines() if line.startswith("data: ")]
    assert events[-1]["type"] == "speech.audio.done", events[-1]
    return events


def sse_deltas(r: httpx.Response) -> list[bytes]:
    """A 200 SSE response's audio deltas."""
    return [base64.b64decode(e["audio"]) for e in sse_events(r) if e["type"] == "speech.audio.delta"]


def streamed_pcm(http: httpx.Client, payload: dict[str, Any]) -> np.ndarray:
    """The raw PCM stream of a request (200)."""
    with http.stream("POST", SPEECH, json={**payload, "response_format": "pcm", "stream_format": "audio"}) as r:
        assert r.status_code == 200, r.read()
        return np.frombuffer(b"".join(r.iter_bytes()), "<i2")


def three_ways(http: httpx.Client, payload: dict[str, Any], rate: int) -> ThreeWays:
    """The whole file (a WAV at `rate`), the raw PCM stream and SSE events of one request."""
    whole = wav_at(http.post(SPEECH, json=payload), rate)
    raw = streamed_pcm(http, payload)
    with http.stream("POST", SPEECH, json={**payload, "response_format": "pcm", "stream": True}) as r:
        events = sse_events(r)
    deltas = [base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta"]
    return ThreeWays([whole, raw, np.frombuffer(b"".join(deltas), "<i2")], deltas,
                     int(events[-1]["usage"]["output_tokens"]))


def assert_three_ways_equal(got: ThreeWays, want: np.ndarray, frames: int, samples: int | None = None) -> None:
    """The SSE's usage counts `frames`, each way is the offline audio `want` within one 16-bit step (and
    `samples` long), and the streams are the whole file exactly (an exact streaming vocoder)."""
    assert got.counted == frames
    for audio in got.audio:
        same_audio(audio, want, samples)
    assert all(np.array_equal(got.audio[0], g) for g in got.audio[1:])


def assert_three_ways_within(got: ThreeWays, want: np.ndarray, frames: int, atol: float) -> None:
    """The SSE's usage counts `frames`, each way is a reference's float audio `want` within `atol` plus one
    16-bit step (int16 floors the served float: within one step of it, which is within `atol` of `want`), and
    the streams are the whole file exactly."""
    assert got.counted == frames
    for audio in got.audio:
        assert audio.shape == want.shape
        assert np.max(np.abs(audio / 32768.0 - want)) <= atol + 1 / 32768
    assert all(np.array_equal(got.audio[0], g) for g in got.audio[1:])


def sdk(url: str, timeout: float = 300) -> openai.OpenAI:
    """The openai SDK against a gateway (no retries)."""
    return openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=timeout)


def sdk_wav(client: openai.OpenAI, rate: int, **kw: Any) -> np.ndarray:
    """The SDK's whole WAV file of a request: its int16 samples, at `rate`."""
    got, samples = encoding.parse_wav(client.audio.speech.create(response_format="wav", **kw).content)
    assert got == rate
    return samples


def sdk_pcm(client: openai.OpenAI, extra_body: dict[str, Any], **kw: Any) -> np.ndarray:
    """The SDK's raw PCM stream of a request: its int16 samples."""
    with client.audio.speech.with_streaming_response.create(
            response_format="pcm", extra_body={"stream_format": "audio", **extra_body}, **kw) as r:
        return np.frombuffer(b"".join(r.iter_bytes()), "<i2")


def websocket_audio(url: str, config: dict[str, Any], text: str) -> np.ndarray:
    """The PCM of one WebSocket session (`config` its session.config, `text` its one input) up to
    session.done; an error message fails."""
    from websockets.sync.client import connect

    ws_url = url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    with connect(ws_url, open_timeout=30, max_size=None) as ws:
        ws.send(json.dumps({"type": "session.config", "response_format": "pcm", **config}))
        ws.send(json.dumps({"type": "input.text", "text": text}))
        ws.send(json.dumps({"type": "input.done"}))
        audio, done = b"", None
        while done is None:
            m = ws.recv(timeout=300)
            if isinstance(m, bytes):
                audio += m
            elif json.loads(m)["type"] == "session.done":
                done = json.loads(m)
            else:
                assert json.loads(m)["type"] != "error", m
    return np.frombuffer(audio, "<i2")


def upload_voice(http: httpx.Client, clip: Path, name: str, ref_text: str | None = None) -> None:
    """Uploads `clip` as voice `name` (with its transcript, if given)."""
    with clip.open("rb") as f:
        r = http.post("/v1/audio/voices", files={"audio_sample": ("ref.wav", f, "audio/wav")},
                      data={"name": name, "consent": "ok", **({"ref_text": ref_text} if ref_text else {})})
    assert r.status_code == 200, r.text


def assert_refused(r: httpx.Response, param: str) -> None:
    """A 400 whose error names `param`."""
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.json()


def assert_served_after_a_refusal(http: httpx.Client, refused: dict[str, Any], served: dict[str, Any],
                                  rate: int) -> None:
    """`refused` (max_new_tokens 0) is a 400 naming max_new_tokens, and then `served` gives audio: the
    end-to-end half of a refusal matrix that runs without a generation after each 400."""
    assert_refused(http.post(SPEECH, json=refused), "max_new_tokens")
    assert wav_at(http.post(SPEECH, json=served), rate).size


def in_flight_together(url: str, payloads: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Streams every payload at once (one client each) and returns each one's status code."""
    results: dict[str, int] = {}

    def post(key: str, payload: dict[str, Any]) -> None:
        with httpx.Client(base_url=url, timeout=300) as c, c.stream("POST", SPEECH, json=payload) as r:
            results[key] = r.status_code
            b"".join(r.iter_bytes())

    threads = [threading.Thread(target=post, args=item) for item in payloads.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    return results


def data_url(path: Path) -> str:
    """A file as a base64 WAV data URL (`ref_audio`)."""
    return "data:audio/wav;base64," + base64.b64encode(Path(path).read_bytes()).decode()
