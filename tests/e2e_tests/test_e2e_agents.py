"""Voice agents over the real stack (the session's e2e Triton deployment, tests/e2e_fixtures.py,
one request at a time per model, behind an in-process gateway): barge-in on the WebSocket
(`input.cancel` in the middle of a long utterance cancels its Triton request and frees the slot,
then the next utterance on the same session succeeds) and telephony output (G.711)."""

from __future__ import annotations

import io
import json
import re
import time
import warnings
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf
from gateway_fixtures import start_gateway

from gateway import encoding
from gateway.settings import Settings
from ttscore.backend.triton_server import free_port
from ttscore.runtime.engine import Generator
from ttscore.runtime.families.qwen3_tts.request import Qwen3TTSRequest

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # audioop: deprecated, still the stdlib's G.711
    import audioop

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TEXT = "Hello from the gateway."
FRAMES = 16
SEED = 7


@pytest.fixture(scope="module")
def stack(e2e_triton, tmp_path_factory):
    cfg = {**e2e_triton["config"], "speaker_samples_dir": str(tmp_path_factory.mktemp("agents-speakers")),
           "health_interval_s": 0}
    port = free_port()
    gw, thread = start_gateway(Settings.from_dict(cfg), port)
    yield {"url": f"http://127.0.0.1:{port}", "server": e2e_triton["server"],
           "model": e2e_triton["names"]["custom_voice"], "triton_model": e2e_triton["triton_models"]["custom_voice"],
           "pipeline": e2e_triton["pipelines"]["custom_voice"]}
    gw.should_exit = True
    thread.join(15)


def offline_pcm(stack, text=TEXT, frames=FRAMES) -> np.ndarray:
    gen = Generator(stack["pipeline"], max_batch=1)
    req = Qwen3TTSRequest(text=text, speaker="vivian", language="English", seed=SEED, max_new_tokens=frames)
    return np.concatenate([ev.pcm for ev in gen.synthesize(req)])


def triton_samples(stack) -> dict[tuple[str, frozenset], float]:
    text = httpx.get(stack["server"].metrics_url, timeout=10).text
    samples = {}
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)$", line)
        if m and not line.startswith("#"):
            samples[(m.group(1), frozenset(re.findall(r'(\w+)="([^"]*)"', m.group(2) or "")))] = float(m.group(3))
    return samples


def triton_sample(samples, name: str, **labels: str) -> float:
    found = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]
    assert len(found) == 1, f"{name}{labels}: {len(found)} samples"
    return found[0]


def recv(ws):
    m = ws.recv(timeout=120)
    return json.loads(m) if isinstance(m, str) else m


def collect(ws, until="session.done"):
    out = []
    while True:
        m = recv(ws)
        out.append(m)
        if isinstance(m, dict) and m["type"] == until:
            return out


def test_input_cancel_mid_utterance_frees_the_triton_slot_and_the_session_goes_on(stack):
    from websockets.sync.client import connect

    log = Path(stack["server"].log_file)
    model = {"model": stack["triton_model"]}
    before = triton_samples(stack)
    cancelled_before = triton_sample(before, "tts_generation_requests_total", outcome="cancelled", **model)
    url = stack["url"].replace("http://", "ws://") + "/v1/audio/speech/stream"
    with connect(url, additional_headers={"X-Request-Id": "e2e-cancel-1"}) as ws:
        # a long utterance: 4000 frames is minutes of work for the one slot of this model
        ws.send(json.dumps({"type": "session.config", "model": stack["model"], "voice": "vivian",
                            "language": "English", "seed": SEED, "max_new_tokens": 4000, "stream_audio": True}))
        ws.send(json.dumps({"type": "input.text", "text": "A long answer that the user interrupts. " * 3}))
        ws.send(json.dumps({"type": "input.done"}))
        head = [recv(ws), recv(ws)]
        assert head[0]["type"] == "audio.start" and isinstance(head[1], bytes), head
        ws.send(json.dumps({"type": "input.cancel"}))
        cancelled = collect(ws)
        done_at = next(i for i, m in enumerate(cancelled) if isinstance(m, dict) and m["type"] == "audio.done")
        done = cancelled[done_at]
        assert done["cancelled"] is True and done["error"] is False
        assert not any(isinstance(m, bytes) for m in cancelled[done_at + 1:]), "audio after the cancelled audio.done"
        assert done["total_bytes"] == sum(len(m) for m in head[1:] + cancelled[:done_at] if isinstance(m, bytes))
        assert done["total_bytes"] < 8000 * 1920 * 2
        assert cancelled[-1] == {"type": "session.done", "utterance_index": 0, "total_sentences": 1,
                                 "cancelled": True}
        # Triton saw the cancellation and released the slot
        deadline = time.time() + 30
        while "request e2e-cancel-1-u0-s0 cancelled by the client; released" not in log.read_text(errors="replace"):
            assert time.time() < deadline, "Triton never saw the cancellation"
            time.sleep(0.1)
        while True:
            samples = triton_samples(stack)
            try:
                assert triton_sample(samples, "tts_generation_active_requests", **model) == 0
                assert triton_sample(samples, "tts_generation_requests_total", outcome="cancelled",
                                     **model) == cancelled_before + 1
                break
            except AssertionError:
                if time.time() > deadline:
                    raise
                time.sleep(0.2)
        gateway_metrics = httpx.get(stack["url"] + "/metrics", timeout=10).text
        assert 'tts_cancelled_requests_total{route="/v1/audio/speech/stream"} 1.0' in gateway_metrics
        outstanding = [line for line in gateway_metrics.splitlines()
                       if line.startswith("tts_triton_endpoint_outstanding{") and stack["triton_model"] in line]
        assert outstanding and all(line.endswith(" 0.0") for line in outstanding), outstanding
        # The next utterance on the same session: the one slot is free again, so it runs at once.
        ws.send(json.dumps({"type": "session.config", "model": stack["model"], "voice": "vivian",
                            "language": "English", "seed": SEED, "max_new_tokens": FRAMES, "stream_audio": True}))
        ws.send(json.dumps({"type": "input.text", "text": TEXT}))
        ws.send(json.dumps({"type": "input.done"}))
        after = collect(ws)
    audio = b"".join(m for m in after if isinstance(m, bytes))
    done = [m for m in after if isinstance(m, dict) and m["type"] == "audio.done"]
    assert [d.get("cancelled") for d in done] == [None] and done[0]["error"] is False
    assert after[-1] == {"type": "session.done", "utterance_index": 1, "total_sentences": 1}
    got = np.frombuffer(audio, dtype="<i2").astype(np.int32)
    want = encoding.to_int16(offline_pcm(stack)).astype(np.int32)
    assert got.shape == want.shape and np.max(np.abs(got - want)) <= 1


@pytest.mark.parametrize("fmt", ["ulaw", "alaw"])
def test_telephony_formats_over_the_real_stack(stack, fmt):
    decode = {"ulaw": audioop.ulaw2lin, "alaw": audioop.alaw2lin}[fmt]
    body = {"model": stack["model"], "input": TEXT, "voice": "vivian", "language": "English", "seed": SEED,
            "max_new_tokens": FRAMES}
    with httpx.Client(base_url=stack["url"], timeout=120) as c:
        pcm8k = np.frombuffer(c.post("/v1/audio/speech", json={**body, "response_format": "pcm",
                                                                "sample_rate": 8000}).content, dtype="<i2")
        whole = c.post("/v1/audio/speech", json={**body, "response_format": fmt})
        raw = c.post("/v1/audio/speech", json={**body, "response_format": fmt, "stream_format": "audio"})
    assert whole.status_code == raw.status_code == 200
    y, rate = sf.read(io.BytesIO(whole.content), dtype="int16")
    assert rate == 8000 and y.size == pcm8k.size == FRAMES * 1920 // 3
    streamed = np.frombuffer(decode(raw.content, 2), dtype="<i2")
    for decoded in (y, streamed):
        x = pcm8k.astype(np.int64)
        assert np.all(np.abs(decoded.astype(np.int64) - x) <= np.abs(x) / 32 + 8 + 2)  # G.711 (+ the 1-LSB run noise)


INCREMENTAL_TEXT = "Hello there, the answer streams in word by word."
INCREMENTAL_FRAMES = 40


def offline_streaming_prompt(stack, text: str, frames: int) -> np.ndarray:
    gen = Generator(stack["pipeline"], max_batch=1)
    req = Qwen3TTSRequest(text=text, speaker="vivian", language="English", seed=SEED, max_new_tokens=frames,
                          non_streaming_mode=False)
    return np.concatenate([ev.pcm for ev in gen.synthesize(req)])


def test_incremental_text_word_by_word_equals_the_text_sent_whole(stack):
    """Greedy Qwen3-TTS over the real stack: the utterance streamed word by word into one running
    generation gives the audio of the same text sent in one input.text (and of the offline run in
    the streaming prompt mode), and its first audio comes while words are still unsent."""
    from websockets.sync.client import connect

    model = {"model": stack["triton_model"]}
    waits_before = triton_sample(triton_samples(stack), "tts_generation_text_wait_seconds_count", **model)
    url = stack["url"].replace("http://", "ws://") + "/v1/audio/speech/stream"
    words = INCREMENTAL_TEXT.split(" ")
    pieces = [words[0]] + [" " + w for w in words[1:]]
    with connect(url, additional_headers={"X-Request-Id": "e2e-incremental-1"}) as ws:
        ws.send(json.dumps({"type": "session.config", "model": stack["model"], "voice": "vivian",
                            "language": "English", "seed": SEED, "max_new_tokens": INCREMENTAL_FRAMES,
                            "stream_audio": True, "split_granularity": "incremental"}))
        assert recv(ws) == {"type": "session.configured", "split_granularity": "incremental"}
        ws.send(json.dumps({"type": "input.text", "text": pieces[0]}))
        ws.send(json.dumps({"type": "input.text", "text": pieces[1]}))
        messages = [recv(ws)]
        assert messages[0]["type"] == "audio.start"
        while not isinstance(messages[-1], bytes):  # audio while most words are still unsent
            messages.append(recv(ws))
            assert not (isinstance(messages[-1], dict) and messages[-1]["type"] in ("audio.done", "error")), messages
        for piece in pieces[2:]:
            ws.send(json.dumps({"type": "input.text", "text": piece}))
        ws.send(json.dumps({"type": "input.done"}))
        messages += collect(ws)
        # the same text in one input.text, on the same session
        ws.send(json.dumps({"type": "input.text", "text": INCREMENTAL_TEXT}))
        ws.send(json.dumps({"type": "input.done"}))
        whole = collect(ws)
    for got in (messages, whole):
        done = [m for m in got if isinstance(m, dict) and m["type"] == "audio.done"]
        assert len(done) == 1 and done[0]["error"] is False, got
    streamed = np.frombuffer(b"".join(m for m in messages if isinstance(m, bytes)), "<i2").astype(np.int32)
    at_once = np.frombuffer(b"".join(m for m in whole if isinstance(m, bytes)), "<i2").astype(np.int32)
    offline = encoding.to_int16(offline_streaming_prompt(stack, INCREMENTAL_TEXT, INCREMENTAL_FRAMES)).astype(np.int32)
    assert streamed.size > 0 and streamed.shape == at_once.shape == offline.shape
    assert np.max(np.abs(streamed - at_once)) <= 1 and np.max(np.abs(streamed - offline)) <= 1
    # the sequence waited for text in the scheduler (kept, not stepped), and is gone now
    deadline = time.time() + 30
    while True:
        samples = triton_samples(stack)
        try:
            assert triton_sample(samples, "tts_generation_text_wait_seconds_count", **model) > waits_before
            assert triton_sample(samples, "tts_generation_waiting_for_text_requests", **model) == 0
            assert triton_sample(samples, "tts_generation_active_requests", **model) == 0
            break
        except AssertionError:
            if time.time() > deadline:
                raise
            time.sleep(0.2)
    gateway_metrics = httpx.get(stack["url"] + "/metrics", timeout=10).text
    assert 'tts_ws_first_text_to_audio_seconds_count{split_granularity="incremental"} 2.0' in gateway_metrics
