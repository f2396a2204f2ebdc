"""Runaway guard, finish_reason and admission control over the real stack: a tritonserver of its own serving a
greedy tiny Qwen3-TTS CustomVoice that never stops (its greedy frames never reach the stop code) and a sampled one
that does for the seeds used here, at the committed speech_generation settings (the guard on: 10 s + 4 x 0.3 s per
text token), behind in-process gateways.

- A never-stopping generation ends at the guard's budget from its text (ttscore.contract.rules.runaway_frames)
  with finish_reason "length" on every path: SSE, whole file, raw stream (complete; its reason in the metrics),
  batch, WebSocket; max_new_tokens below the budget still caps it. One that stops says "stop"; a WebSocket
  utterance cancelled mid-way "cancelled".
- A burst above the admission limits: the admitted ones are served, the others get 503 + Retry-After and the error
  body at once, /ready and /metrics show it, and the server serves normally right after; an API key over its limit
  gets 429; a WebSocket sentence that cannot be admitted gets the in-band error and the session goes on.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
from gateway_fixtures import render_stack_repository, start_gateway
from prometheus_text import parse, sample

from gateway import sse
from gateway.settings import Settings
from ttscore.backend.triton_server import free_port
from ttscore.contract import families
from ttscore.contract.rules import runaway_frames

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SPEECH = "/v1/audio/speech"
SAMPLES_PER_FRAME = 1920  # 24 kHz at 12.5 frames per second
RUNAWAY_TEXT = "Hi."
STOP_TEXT, STOP_SEED = "Hello from the gateway.", 36  # the sampled checkpoint stops by itself after 25 frames
# About 100 text tokens: a budget of over two minutes of audio, many seconds of work that holds a slot.
HOLD_TEXT = "A long answer that keeps the model busy for a while. " * 8


@pytest.fixture(scope="module")
def stack(triton_server, tiny_custom_voice_greedy, tiny_custom_voice, tmp_path_factory):
    work = tmp_path_factory.mktemp("guards")
    pairs = [(t[0], t[1]) for t in (tiny_custom_voice_greedy, tiny_custom_voice)]
    repo, cfg = render_stack_repository(work, pairs, max_active=2)
    server = triton_server(repo, ready_timeout_s=180)
    cfg = {**cfg, "triton_url": server.grpc_url, "health_interval_s": 0,
           "speaker_samples_dir": str(work / "speakers")}
    gateways = []

    def gateway(**limits):
        port = free_port()
        gateways.append(start_gateway(Settings.from_dict({**cfg, **limits}), port))
        return f"http://127.0.0.1:{port}"

    yield {
        "url": gateway(),  # the default admission limits
        "tight": gateway(max_running_per_model=1, max_queued_per_model=1),
        "keys": gateway(api_keys=["key-a", "key-b"], max_concurrent_per_key=1),
        "greedy": cfg["models"][0]["name"],
        "sampled": cfg["models"][1]["name"],
        "frame_s": tiny_custom_voice_greedy[2].frame_seconds,
    }
    for gw, _ in gateways:
        gw.should_exit = True
    for _, thread in gateways:
        thread.join(15)


def budget(stack, text_tokens: int) -> int:
    frames = runaway_frames(families.RULES["qwen3_tts"].seconds_per_text_token, text_tokens, stack["frame_s"])
    assert frames is not None
    return frames


def body(stack, model: str = "greedy", text: str = RUNAWAY_TEXT, **extra):
    return {"model": stack[model], "input": text, "voice": "vivian", "language": "English", **extra}


def finish_counts(url: str, model: str) -> dict[str, float]:
    metrics = parse(httpx.get(url + "/metrics", timeout=10).text)
    out = {}
    for reason in ("stop", "length", "cancelled", "error"):
        try:
            out[reason] = sample(metrics, "tts_generation_finish_reasons_total", model=model, reason=reason)
        except KeyError:
            out[reason] = 0.0
    return out


def ws_utterance(url: str, config: dict, text: str, cancel_after_audio: bool = False) -> list:
    from websockets.sync.client import connect

    with connect(url.replace("http://", "ws://") + "/v1/audio/speech/stream") as ws:
        ws.send(json.dumps({"type": "session.config", **config}))
        ws.send(json.dumps({"type": "input.text", "text": text}))
        ws.send(json.dumps({"type": "input.done"}))
        out: list = []
        while True:
            m = ws.recv(timeout=120)
            m = json.loads(m) if isinstance(m, str) else m
            out.append(m)
            if cancel_after_audio and isinstance(m, bytes):
                ws.send(json.dumps({"type": "input.cancel"}))
                cancel_after_audio = False
            if isinstance(m, dict) and m["type"] == "session.done":
                return out


def audio_done(messages: list) -> dict:
    return next(m for m in messages if isinstance(m, dict) and m["type"] == "audio.done")


# --- runaway guard and finish_reason --------------------------------------------------------------------


def test_a_never_stopping_generation_ends_at_the_budget_with_length_on_every_path(stack):
    url, model = stack["url"], stack["greedy"]
    before = finish_counts(url, model)
    # SSE: the budget follows from the text tokens its usage reports
    r = httpx.post(url + SPEECH, json=body(stack, stream=True, response_format="pcm"), timeout=300)
    events = sse.parse(r.content)
    name, done = events[-1]
    assert name == sse.DONE and done["finish_reason"] == "length", events[-1]
    frames = budget(stack, done["usage"]["input_token_details"]["text_tokens"])
    assert done["usage"]["output_tokens"] == frames < 2048  # far below the default max_new_tokens
    pcm = b"".join(base64.b64decode(d["audio"]) for n, d in events if n == sse.DELTA)
    assert len(pcm) == frames * SAMPLES_PER_FRAME * 2
    # whole file
    r = httpx.post(url + SPEECH, json=body(stack, response_format="pcm"), timeout=300)
    assert r.status_code == 200 and r.headers["x-finish-reason"] == "length"
    assert int(r.headers["x-vllm-omni-output-tokens"]) == frames and len(r.content) == frames * SAMPLES_PER_FRAME * 2
    # raw stream: complete, no header (its first chunk was not its last); the reason is in the metrics
    r = httpx.post(url + SPEECH, json=body(stack, stream_format="audio", response_format="pcm"), timeout=300)
    assert r.status_code == 200 and "x-finish-reason" not in r.headers
    assert len(r.content) == frames * SAMPLES_PER_FRAME * 2
    # batch
    fields = body(stack)
    r = httpx.post(url + SPEECH + "/batch", json={"items": [{"input": fields.pop("input")}], "response_format": "pcm",
                                                  **fields}, timeout=300)
    assert r.status_code == 200, r.text
    (item,) = r.json()["results"]
    assert item["finish_reason"] == "length" and item["usage"]["output_tokens"] == frames
    # WebSocket, streamed audio
    config = {k: v for k, v in body(stack).items() if k != "input"}
    done = audio_done(ws_utterance(url, {**config, "stream_audio": True, "response_format": "pcm"}, RUNAWAY_TEXT))
    assert done["finish_reason"] == "length" and done["error"] is False
    assert done["total_bytes"] == frames * SAMPLES_PER_FRAME * 2
    after = finish_counts(url, model)
    assert after["length"] - before["length"] == 5 and after["stop"] == before["stop"]
    # max_new_tokens below the budget still caps it
    r = httpx.post(url + SPEECH, json=body(stack, response_format="pcm", max_new_tokens=12), timeout=300)
    assert r.headers["x-finish-reason"] == "length" and len(r.content) == 12 * SAMPLES_PER_FRAME * 2


def test_a_generation_that_stops_says_stop(stack):
    url = stack["url"]
    fields = body(stack, "sampled", STOP_TEXT, seed=STOP_SEED)
    r = httpx.post(url + SPEECH, json={**fields, "stream": True, "response_format": "pcm"}, timeout=300)
    name, done = sse.parse(r.content)[-1]
    assert name == sse.DONE and done["finish_reason"] == "stop", done
    assert done["usage"]["output_tokens"] < budget(stack, done["usage"]["input_token_details"]["text_tokens"])
    r = httpx.post(url + SPEECH, json=fields, timeout=300)
    assert r.status_code == 200 and r.headers["x-finish-reason"] == "stop"
    config = {k: v for k, v in fields.items() if k != "input"}
    assert audio_done(ws_utterance(url, {**config, "stream_audio": True}, STOP_TEXT))["finish_reason"] == "stop"


def test_a_cancelled_websocket_utterance_says_cancelled(stack):
    config = {k: v for k, v in body(stack).items() if k != "input"}
    messages = ws_utterance(stack["url"], {**config, "stream_audio": True, "response_format": "pcm"},
                            "A long answer the caller interrupts. " * 4, cancel_after_audio=True)
    done = audio_done(messages)
    assert done["cancelled"] is True and done["finish_reason"] == "cancelled"
    assert messages[-1]["cancelled"] is True


# --- admission control --------------------------------------------------------------------------------


async def _post_timed(http: httpx.AsyncClient, json_body: dict, **kw) -> tuple[httpx.Response, float]:
    t0 = time.monotonic()
    r = await http.post(SPEECH, json=json_body, **kw)
    return r, time.monotonic() - t0


def test_a_burst_above_the_limits_is_refused_at_once_and_the_server_serves_right_after(stack):
    url = stack["tight"]  # one running and one queued generation per model; streams do not queue (the default)
    streams, files = 4, 4

    async def scenario():
        async with httpx.AsyncClient(base_url=url, timeout=300) as http:
            return await asyncio.gather(*(
                [_post_timed(http, body(stack, stream_format="audio", response_format="pcm")) for _ in range(streams)]
                + [_post_timed(http, body(stack)) for _ in range(files)]))

    results = asyncio.run(scenario())
    served = [(r, t) for r, t in results if r.status_code == 200]
    refused = [(r, t) for r, t in results if r.status_code != 200]
    # Whatever the order they were read in: the first runs, the first whole-file request after it queues, and the
    # rest are refused (streams because none may queue, whole-file requests because the queue is full).
    assert len(served) == 2 and len(refused) == streams + files - 2, [r.status_code for r, _ in results]
    messages = {"The request queue is full; retry later.",
                f"Every generation slot of model '{stack['greedy']}' is busy and a stream is not queued (it would "
                "wait for a whole generation to end); retry later or elsewhere."}
    for r, _ in refused:
        assert r.status_code == 503 and r.headers["retry-after"] == "5"
        error = r.json()["error"]
        assert error["message"] in messages and error["type"] == "ServiceUnavailableError" and error["code"] == 503
    slowest_refusal = max(t for _, t in refused)
    quickest_served = min(t for _, t in served)
    print(f"\nrefused in at most {slowest_refusal * 1000:.1f} ms; the served ones took {quickest_served:.2f} s or more")
    assert slowest_refusal < quickest_served  # refused before any admitted one had its audio
    assert all(len(r.content) > 0 for r, _ in served)
    ready = httpx.get(url + "/ready", timeout=10).json()
    assert ready["status"] == "ready" and ready["admission"]["refused"] == len(refused)
    assert ready["admission"]["running"] == 0 and ready["admission"]["queued"] == 0
    metrics = parse(httpx.get(url + "/metrics", timeout=10).text)
    reasons = {reason: sample(metrics, "tts_admission_refused_total", model=stack["greedy"], reason=reason)
               for reason in ("queue_full", "no_slot")}
    assert sum(reasons.values()) == len(refused) and reasons["no_slot"] >= streams - 1
    after = httpx.post(url + SPEECH, json=body(stack, max_new_tokens=8), timeout=60)
    assert after.status_code == 200 and after.headers["x-finish-reason"] == "length"


def test_a_websocket_sentence_that_cannot_be_admitted_gets_the_in_band_error_and_the_session_goes_on(stack):
    from websockets.sync.client import connect

    url = stack["tight"]
    config = {k: v for k, v in body(stack, max_new_tokens=8).items() if k != "input"}
    release = threading.Event()
    with connect(url.replace("http://", "ws://") + "/v1/audio/speech/stream") as ws, ThreadPoolExecutor(1) as pool:
        ws.send(json.dumps({"type": "session.config", **config}))
        held = pool.submit(hold_a_slot, url, stack, release)  # the model's one slot
        deadline = time.monotonic() + 60
        while httpx.get(url + "/ready", timeout=10).json()["admission"]["running"] < 1:
            assert time.monotonic() < deadline, "the held request never ran"
            if held.done():
                held.result()  # its failure, if it failed
            time.sleep(0.02)
        refused = ws_next_utterance(ws, "Hello.")  # a stream: not queued
        release.set()  # its client goes away
        held.result(120)
        served = ws_next_utterance(ws, "Hello.")
    error = [m for m in refused if isinstance(m, dict) and m["type"] == "error"]
    assert len(error) == 1 and "is busy and a stream is not queued" in error[0]["message"], refused[:3]
    assert audio_done(refused)["error"] is True and audio_done(refused)["finish_reason"] == "error"
    done = audio_done(served)
    assert done["error"] is False and done["finish_reason"] == "length" and done["total_bytes"] > 0


def hold_a_slot(url: str, stack, release: threading.Event, headers: dict | None = None) -> None:
    """A long raw stream whose client reads its first audio, then waits for `release` and goes away."""
    with httpx.stream("POST", url + SPEECH, json=body(stack, text=HOLD_TEXT, stream_format="audio", response_format="pcm"),
                      headers=headers, timeout=300) as s:
        assert s.status_code == 200
        chunks = s.iter_raw()  # (kept: a dropped iterator closes the response)
        next(chunks)
        release.wait(120)


def ws_next_utterance(ws, text: str) -> list:
    ws.send(json.dumps({"type": "input.text", "text": text}))
    ws.send(json.dumps({"type": "input.done"}))
    out: list = []
    while True:
        m = ws.recv(timeout=120)
        m = json.loads(m) if isinstance(m, str) else m
        out.append(m)
        if isinstance(m, dict) and m["type"] == "session.done":
            return out


def test_an_api_key_over_its_limit_gets_429_while_another_key_is_served(stack):
    url = stack["keys"]  # one generation per key at a time
    release = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(hold_a_slot, url, stack, release, {"Authorization": "Bearer key-a"})
        deadline = time.monotonic() + 60
        while httpx.get(url + "/ready", timeout=10).json()["admission"]["running"] < 1:
            assert time.monotonic() < deadline, "key-a's generation never started"
            if held.done():
                held.result()
            time.sleep(0.02)
        limited = httpx.post(url + SPEECH, json=body(stack, max_new_tokens=8),
                             headers={"Authorization": "Bearer key-a"}, timeout=60)
        other = httpx.post(url + SPEECH, json=body(stack, max_new_tokens=8),
                           headers={"Authorization": "Bearer key-b"}, timeout=60)
        release.set()
        held.result(120)
    assert limited.status_code == 429 and limited.headers["retry-after"] == "5"
    assert limited.json()["error"]["type"] == "RateLimitError" and limited.json()["error"]["code"] == 429
    assert other.status_code == 200
    assert np.frombuffer(other.content[44:], "<i2").size == 8 * SAMPLES_PER_FRAME
