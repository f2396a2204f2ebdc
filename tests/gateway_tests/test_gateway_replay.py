"""gateway.replay: a stream whose Triton fails after audio went out is replayed elsewhere (unit level, over
fake endpoints; the real thing with SIGKILLed Tritons is tests/e2e_tests/test_multi_replica.py).

- `SampleCursor`: the samples already handed on are dropped from the replay across any chunk boundaries,
  and the concatenation is the undisturbed stream exactly; a replay that differs or ends early is refused.
- Through the app over two fake endpoints whose chunk sizes differ: raw PCM, SSE, whole file, WAV at
  another rate, a WebSocket utterance and a long text equal the undisturbed response byte for byte; a
  long text replays only its segment in flight; the metrics count the replay and its dropped audio.
- Not replayed: a family whose sampling is UNSEEDED, `max_replays` 0, no endpoint left, errors of
  the request itself; these end exactly as without replay.
"""

from __future__ import annotations

import base64
import dataclasses
import itertools
import json
from dataclasses import dataclass

import numpy as np
import pytest
from fastapi.testclient import TestClient
from gateway_fixtures import SAMPLE_RATE, SAMPLES_PER_FRAME, FakeBackend, fake_deployment
from prometheus_text import parse

from gateway import sse
from gateway.app import create_app
from gateway.backend import INTERNAL, INVALID_ARG, UNAVAILABLE, BackendError
from gateway.replay import CHECK_SAMPLES, Diverged, ReplayBudget, SampleCursor
from ttscore.contract import families
from ttscore.contract import tensors as triton_io
from ttscore.contract.rules import UNSEEDED

pytestmark = pytest.mark.gateway

SPEECH = "/v1/audio/speech"
A, B = "10.0.0.1:8001", "10.0.0.2:8001"


# --- the cursor -----------------------------------------------------------------------------------


def chunks_of(audio: np.ndarray, sizes: list[int]) -> list[np.ndarray]:
    edges = np.cumsum([0, *sizes])
    return [audio[a:b] for a, b in itertools.pairwise(edges)]


def random_sizes(rng: np.random.Generator, total: int) -> list[int]:
    sizes = []
    while sum(sizes) < total:
        sizes.append(int(min(rng.integers(0, 700), total - sum(sizes))))  # empty chunks too
    return sizes


def test_replays_continue_the_samples_across_chunk_boundaries():
    rng = np.random.default_rng(0)
    audio = rng.standard_normal(5000).astype(np.float32)
    for _ in range(200):
        cursor = SampleCursor()
        out: list[np.ndarray] = []
        failures = int(rng.integers(0, 4))
        for attempt in range(failures + 1):
            sizes = random_sizes(rng, audio.size)  # each attempt cuts the same samples differently
            stop = len(sizes) if attempt == failures else int(rng.integers(0, len(sizes) + 1))
            for piece in chunks_of(audio, sizes)[:stop]:
                out.append(cursor.take(piece))
            if attempt < failures:
                cursor.restart()
        cursor.finish()
        got = np.concatenate(out)
        assert got.size == audio.size and np.array_equal(got, audio)
        assert cursor.sent == audio.size and cursor.attempts == failures + 1


def test_what_a_replay_drops_and_keeps():
    audio = np.arange(20, dtype=np.float32)
    cursor = SampleCursor()
    assert cursor.take(audio[:7]).size == 7
    cursor.restart()
    assert cursor.behind == 7
    assert cursor.take(audio[:5]).size == 0  # all handed on already
    kept = cursor.take(audio[5:12])  # 2 dropped, 5 new
    assert np.array_equal(kept, audio[7:12]) and cursor.sent == 12 and cursor.behind == 0
    assert np.array_equal(cursor.take(audio[12:]), audio[12:])
    cursor.finish()


def test_a_replay_that_differs_or_ends_early_is_refused():
    rng = np.random.default_rng(1)
    audio = rng.standard_normal(3 * CHECK_SAMPLES).astype(np.float32)
    cursor = SampleCursor()
    cursor.take(audio[:2 * CHECK_SAMPLES])
    cursor.restart()
    cursor.take(audio[:CHECK_SAMPLES])  # before the samples kept for the check: not compared
    other = audio.copy()
    other[CHECK_SAMPLES + 10] += 0.01
    with pytest.raises(Diverged, match="differs"):
        cursor.take(other[CHECK_SAMPLES:2 * CHECK_SAMPLES])

    cursor = SampleCursor()
    cursor.take(audio[:100])
    cursor.restart()
    cursor.take(audio[:100] + 1e-4)  # within the tolerance (a few LSB)
    cursor.restart()
    cursor.take(audio[:60])
    with pytest.raises(Diverged, match="ended"):
        cursor.finish()


def test_the_budget_is_per_request():
    budget = ReplayBudget(2)
    assert budget.take() and budget.take() and not budget.take() and budget.used == 2
    assert not ReplayBudget(0).take()


# --- through the app ------------------------------------------------------------------------------


@dataclass
class Killer:
    """Fails the stream that first reaches `after` chunks (`left` times), with `code`; `dies`: its
    endpoint answers nothing after (a dead Triton). `only`: streams whose text has this word."""

    after: int = 2
    code: str = UNAVAILABLE
    left: int = 1
    dies: bool = True
    only: str = ""


@dataclass
class Endpoint(FakeBackend):
    killer: Killer | None = None
    dead: bool = False

    async def stream_speech(self, model, tensors, request_id):
        if self.dead:
            raise BackendError(UNAVAILABLE, "the inference server is unreachable")
        text = triton_io.request_kwargs(tensors)["text"]
        n = 0
        async for chunk in super().stream_speech(model, tensors, request_id):
            yield chunk
            n += 1
            k = self.killer
            if k is not None and k.left > 0 and n >= k.after and not chunk.final and k.only in text:
                k.left -= 1
                if k.dies:
                    self.dead, self.ready = True, False
                raise BackendError(k.code, "the inference server is unreachable")


def served(tmp_path, killer: Killer | None, **settings) -> tuple[TestClient, dict[str, Endpoint]]:
    config = fake_deployment(tmp_path, ("custom_voice",), health_interval_s=0, triton_urls=[A, B], **settings)
    fakes: dict[str, Endpoint] = {}

    def backend(url: str) -> Endpoint:
        # Different chunk sizes: a replay's chunks never line up with the failed stream's.
        fakes[url] = Endpoint(chunk_frames=4 if url == A else 3, killer=killer)
        return fakes[url]

    return TestClient(create_app(config, backend_factory=backend), raise_server_exceptions=False), fakes


BODY = {"input": "Hello there, how are you?", "voice": "vivian", "max_new_tokens": 12, "seed": 5,
        "initial_codec_chunk_frames": 1}
FORMS = {
    "raw": {"stream_format": "audio", "response_format": "pcm"},
    "sse": {"stream_format": "sse", "response_format": "pcm"},
    "whole": {"response_format": "wav"},
    "whole-resampled": {"response_format": "pcm", "sample_rate": 16000},
    "raw-wav-resampled": {"stream_format": "audio", "response_format": "wav", "sample_rate": 8000},
}


def audio_of(client: TestClient, form: str, body: dict) -> tuple[bytes, list[str]]:
    """The audio bytes of one response and its SSE event names (none for the others)."""
    r = client.post(SPEECH, json={**body, **FORMS[form]})
    assert r.status_code == 200, r.text
    if form != "sse":
        return r.content, []
    events = list(sse.parse(r.text))
    data = b"".join(base64.b64decode(d["audio"]) for name, d in events if name == sse.DELTA)
    return data, [name for name, _ in events]


def metrics(client: TestClient) -> dict[str, float]:
    out: dict[str, float] = {}
    for (name, _labels), value in parse(client.get("/metrics").text).items():
        out[name] = out.get(name, 0.0) + value
    return out


def calls(fakes: dict[str, Endpoint]) -> dict[str, list[str]]:
    return {url: [c.request_id for c in f.calls] for url, f in fakes.items()}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_stream_whose_triton_dies_continues_seamlessly(tmp_path, form):
    with served(tmp_path / "calm", None)[0] as client:
        want, want_events = audio_of(client, form, BODY)
    with served(tmp_path / "kill", Killer(after=2))[0] as client:
        got, events = audio_of(client, form, BODY)
        m = metrics(client)
    assert got == want  # same length, same bytes: nothing missing, nothing twice
    # (the replay's chunks are cut differently: SSE deltas may differ in number, not in content)
    assert set(events) == set(want_events) and sse.ERROR not in events
    assert form != "sse" or (events[-1] == sse.DONE and events.count(sse.DONE) == 1)
    assert m["tts_replayed_requests_total"] == 1
    # What the client had at the failure (the first chunk of 1 frame, then 4 frames on A, or 3 on B)
    # was generated again and dropped.
    assert m["tts_replayed_audio_seconds_total"] * SAMPLE_RATE / SAMPLES_PER_FRAME in (4.0, 5.0)


def test_a_websocket_utterance_continues_seamlessly(tmp_path):
    def utterance(client: TestClient) -> tuple[bytes, list[dict]]:
        audio, messages = b"", []
        with client.websocket_connect("/v1/audio/speech/stream") as ws:
            ws.send_json({"type": "session.config", "voice": "vivian", "max_new_tokens": 12, "seed": 5,
                          "stream_audio": True, "response_format": "pcm", "initial_codec_chunk_frames": 1})
            ws.send_json({"type": "input.text", "text": "Hello there, how are you?"})
            ws.send_json({"type": "input.done"})
            while True:
                m = ws.receive()
                if m.get("bytes"):
                    audio += m["bytes"]
                elif m.get("text"):
                    messages.append(json.loads(m["text"]))
                    if messages[-1]["type"] == "session.done":
                        return audio, messages

    with served(tmp_path / "calm", None)[0] as client:
        want, want_messages = utterance(client)
    with served(tmp_path / "kill", Killer(after=2))[0] as client:
        got, messages = utterance(client)
        assert metrics(client)["tts_replayed_requests_total"] == 1
    assert got == want and len(want) == 12 * SAMPLES_PER_FRAME * 2
    assert [m["type"] for m in messages] == [m["type"] for m in want_messages]
    assert not any(m["type"] == "error" for m in messages)


def test_a_long_text_replays_only_its_segment_in_flight(tmp_path):
    body = {**BODY, "input": "First sentence here. Second one follows. Third comes last.",
            "stream_format": "audio", "response_format": "pcm", "max_new_tokens": 6}
    settings = {"segment_chars": 25, "segment_lookahead": 1}
    with served(tmp_path / "calm", None, **settings)[0] as client:
        want = client.post(SPEECH, json=body).content
    client, fakes = served(tmp_path / "kill", Killer(after=2, only="Second"), **settings)
    with client:
        r = client.post(SPEECH, json=body)
        assert metrics(client)["tts_replayed_requests_total"] == 1
    assert r.status_code == 200 and r.content == want and len(want) == 3 * 6 * SAMPLES_PER_FRAME * 2
    ids = [rid.rsplit("-", 1)[-1] for f in fakes.values() for rid in (c.request_id for c in f.calls)]
    assert sorted(ids) == ["s0", "s1", "s1", "s2"], calls(fakes)  # segment s1 ran twice, the others once


def test_a_request_that_cannot_be_reproduced_is_not_replayed(tmp_path, monkeypatch):
    family = "qwen3_tts"
    monkeypatch.setitem(families.RULES, family, dataclasses.replace(families.RULES[family], sampling=UNSEEDED))
    client, fakes = served(tmp_path, Killer(after=2))
    with client:
        events = list(sse.parse(client.post(SPEECH, json={**BODY, **FORMS["sse"]}).text))
        assert metrics(client)["tts_replayed_requests_total"] == 0
    assert events[-1][0] == sse.ERROR and events[-1][1]["error"]["code"] == 503
    assert sum(len(f.calls) for f in fakes.values()) == 1


@pytest.mark.parametrize("limit", [0, 1, 2])
def test_replays_are_bounded(tmp_path, limit):
    # Every attempt fails mid-stream (INTERNAL: the endpoints stay in): `limit` replays, then the in-band error.
    client, fakes = served(tmp_path, Killer(after=2, code=INTERNAL, left=99, dies=False), max_replays=limit)
    with client:
        events = list(sse.parse(client.post(SPEECH, json={**BODY, **FORMS["sse"]}).text))
        assert metrics(client)["tts_replayed_requests_total"] == limit
    assert events[-1][0] == sse.ERROR and events[-1][1]["error"]["code"] == 500
    assert events[-1][1]["error"]["type"] == "server_error"
    assert sum(len(f.calls) for f in fakes.values()) == 1 + limit


def test_no_endpoint_left_ends_the_stream_as_before(tmp_path):
    client, fakes = served(tmp_path, Killer(after=2))
    with client:
        fakes[B].ready = False
        assert client.get("/ready").json()["endpoints"][B]["serving"] is False
        events = list(sse.parse(client.post(SPEECH, json={**BODY, **FORMS["sse"]}).text))
        assert metrics(client)["tts_replayed_requests_total"] == 0
    assert events[-1][0] == sse.ERROR and events[-1][1]["error"]["code"] == 503
    assert events[-1][1]["error"]["type"] == "server_error"
    assert calls(fakes)[B] == [] and len(calls(fakes)[A]) == 1


def test_errors_of_the_request_are_not_replayed(tmp_path):
    @dataclass
    class Refusing(Endpoint):
        async def stream_speech(self, model, tensors, request_id):
            n = 0
            async for chunk in FakeBackend.stream_speech(self, model, tensors, request_id):
                yield chunk
                n += 1
                if n == 2:
                    raise BackendError(INVALID_ARG, "no")

    config = fake_deployment(tmp_path, ("custom_voice",), health_interval_s=0, triton_urls=[A, B])
    fakes: dict[str, Endpoint] = {}

    def backend(url: str) -> Endpoint:
        fakes[url] = Refusing()
        return fakes[url]

    with TestClient(create_app(config, backend_factory=backend), raise_server_exceptions=False) as client:
        events = list(sse.parse(client.post(SPEECH, json={**BODY, **FORMS["sse"]}).text))
        assert metrics(client)["tts_replayed_requests_total"] == 0
    assert events[-1][0] == sse.ERROR and events[-1][1]["error"]["code"] == 400
    assert sum(len(f.calls) for f in fakes.values()) == 1


def test_a_replayed_sentences_words_time_the_audio_the_client_got_once(tmp_path):
    """word_timestamps across a replay: the aligner gets exactly the audio handed on (nothing twice), and the
    words equal those of the undisturbed request."""
    body = {**BODY, **FORMS["sse"], "word_timestamps": True}

    def words_and_aligned(killer: Killer | None) -> tuple[list, list[np.ndarray], bytes]:
        client, fakes = served(tmp_path / ("kill" if killer else "calm"), killer, aligner_model="forced_aligner")
        with client:
            r = client.post(SPEECH, json=body)
        events = list(sse.parse(r.text))
        audio = b"".join(base64.b64decode(d["audio"]) for name, d in events if name == sse.DELTA)
        words = [d["timestamps"] for name, d in events if name == sse.TIMESTAMPS]
        return words, [call[1] for f in fakes.values() for call in f.aligner_calls], audio

    want_words, want_aligned, want_audio = words_and_aligned(None)
    got_words, got_aligned, got_audio = words_and_aligned(Killer(after=2))
    assert got_audio == want_audio and len(got_aligned) == len(want_aligned) == 1
    np.testing.assert_array_equal(got_aligned[0], want_aligned[0])
    assert got_words == want_words and len(got_words) == 1 and got_words[0]
