"""word_timestamps through the REAL tritonserver and gateway (issue 40): a tiny greedy Qwen3-TTS CustomVoice and the
tiny forced aligner (make-tiny --aligner) (and a tiny Fish Speech for SSE: another family, at 44.1 kHz), rendered as `triton-tts serve --aligner` renders them, one stack for the
module. On SSE (a two-sentence input: one generation a sentence with word timestamps), the whole-file JSON and the WebSocket (sentence mode), every sentence's words
equal what the offline ForcedAligner gives on the audio the client received and the sentence's text (its times
clamped into the sentence's audio: random weights time words past the end), shifted by the audio before the
sentence, with char offsets indexing the original input; the first words come before any audio of the second
sentence. Bad input is a 400 naming the field and the server keeps serving; the aligner's stub killed while a request
generates ends that request with an error, not a hang. Runs last: the kill."""

from __future__ import annotations

import base64
import json
import os
import signal
import threading
import time
from typing import Any

import httpx
import numpy as np
import pytest
from aligner_fixtures import *  # noqa: F403  (aligner_tiny, aligner_artifacts)
from gateway_fixtures import render_stack_repository, start_gateway
from procs import child_with
from websockets.sync.client import connect

from gateway import encoding, sse
from gateway.settings import Settings
from ttscore.backend.triton_server import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SPEECH = "/v1/audio/speech"
FIRST = "The quick brown fox jumps over the lazy dog today."
SECOND = "Then it rests, happily, under a tree!"
INPUT = f"  {FIRST}\n\n{SECOND} "
FRAMES = 12  # per generation: about a second of audio
RATE = 24000


@pytest.fixture(scope="module")
def stack(triton_server, tiny_custom_voice_greedy, fish_tiny, fish_artifacts, aligner_artifacts, tmp_path_factory):
    ckpt, art, _ = tiny_custom_voice_greedy
    work = tmp_path_factory.mktemp("word-timestamps")
    repo, cfg = render_stack_repository(work, [(ckpt, art), (fish_tiny, fish_artifacts)], max_active=2,
                                        aligner=aligner_artifacts)
    server = triton_server(repo, ready_timeout_s=180)
    # health_interval_s 0: the kill stays visible (the aligner is not reloaded behind the test's back).
    cfg = {**cfg, "triton_url": server.grpc_url, "speaker_samples_dir": str(work / "speakers"), "health_interval_s": 0}
    port = free_port()
    gw, thread = start_gateway(Settings.from_dict(cfg), port)
    from ttscore.runtime.qwen3_forced_aligner.model import ForcedAligner

    yield {"url": f"http://127.0.0.1:{port}", "port": port, "server": server, "model": cfg["models"][0]["name"],
           "fish": cfg["models"][1]["name"], "aligner": ForcedAligner(aligner_artifacts)}
    gw.should_exit = True
    thread.join(15)


def payload(stack: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return {"model": stack["model"], "input": INPUT, "voice": "vivian", "max_new_tokens": FRAMES, "seed": 3,
            "word_timestamps": True, **kw}


def offline(stack: dict[str, Any], pcm16: np.ndarray, text: str, offset_s: float, char_offset: int,
            rate: int = RATE) -> list[tuple]:
    """ForcedAligner's words of `text` in the client's audio of its sentence, each time clamped into that audio
    and after the previous word's end, shifted by `offset_s`; char offsets shifted by `char_offset`."""
    audio = pcm16.astype(np.float32) / 32768.0
    duration = audio.size / rate
    out, floor = [], 0.0
    for w in stack["aligner"].align(audio, text, "English", sample_rate=rate):
        start = min(max(w.start, floor), duration)
        end = min(max(w.end, start), duration)
        floor = end
        out.append((w.text, offset_s + start, offset_s + end, char_offset + w.char_start, char_offset + w.char_end))
    return out


def check(got: list[dict], want: list[tuple], text: str, total_s: float) -> None:
    assert [(w["word"], w["char_start"], w["char_end"]) for w in got] == [(w[0], w[3], w[4]) for w in want]
    np.testing.assert_allclose([(w["start"], w["end"]) for w in got], [w[1:3] for w in want], atol=2e-6)
    times = [t for w in got for t in (w["start"], w["end"])]
    assert times == sorted(times) and times[0] >= 0 and times[-1] <= total_s + 1e-6
    # The characters of each word (its punctuation included) are the input's words, in order.
    assert " ".join(INPUT[w["char_start"]:w["char_end"]] for w in got).split() == text.split()


# (the served model's key in `stack`, its fields, its output rate): Fish Speech's 44.1 kHz reaches the aligner as is.
FAMILIES = {"qwen3_tts": ("model", {}, RATE), "fish_speech": ("fish", {"voice": None}, 44100)}


@pytest.mark.parametrize("family", FAMILIES)
def test_sse_words_per_sentence_equal_the_offline_aligners_on_the_received_audio(stack, family):
    key, fields, rate = FAMILIES[family]
    body = {k: v for k, v in payload(stack, model=stack[key], stream=True, response_format="pcm", **fields).items()
            if v is not None}
    arrivals: list[tuple[float, str, dict]] = []
    buf = ""
    with httpx.Client(timeout=300) as c, c.stream("POST", stack["url"] + SPEECH, json=body) as r:
        assert r.status_code == 200
        for text in r.iter_text():
            buf += text
            *blocks, buf = buf.split("\n\n")
            for name, data in sse.parse("\n\n".join(blocks) + "\n\n") if blocks else []:
                arrivals.append((time.monotonic(), name, data))
    kinds = [name for _, name, _ in arrivals]
    assert kinds.count(sse.TIMESTAMPS) == 2 and kinds[-1] == sse.DONE, kinds
    first = kinds.index(sse.TIMESTAMPS)
    second = kinds.index(sse.TIMESTAMPS, first + 1)
    deltas = [(i, base64.b64decode(d["audio"])) for i, (_, n, d) in enumerate(arrivals) if n == sse.DELTA]
    one = np.frombuffer(b"".join(a for i, a in deltas if i < first), "<i2")
    two = np.frombuffer(b"".join(a for i, a in deltas if first < i < second), "<i2")
    assert one.size and two.size  # the first words came before any audio of the second sentence
    assert not [i for i, _ in deltas if i > second]
    words_one, words_two = arrivals[first][2]["timestamps"], arrivals[second][2]["timestamps"]
    total = (one.size + two.size) / rate
    want = [*offline(stack, one, FIRST, 0.0, INPUT.index(FIRST), rate),
            *offline(stack, two, SECOND, one.size / rate, INPUT.index(SECOND), rate)]
    check([*words_one, *words_two], want, f"{FIRST} {SECOND}", total)
    assert words_one[-1]["end"] <= one.size / rate + 1e-6  # the first sentence's words lie in its audio


def test_whole_file_json_carries_the_audio_and_the_same_words(stack):
    r = httpx.post(stack["url"] + SPEECH, json=payload(stack), timeout=300)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json", r.text
    body = r.json()
    rate, pcm = encoding.parse_wav(base64.b64decode(body["audio"]))
    assert rate == RATE and body["media_type"] == "audio/wav"
    words = body["timestamps"]
    # Where the first sentence's audio ends: the first word of the second sentence cannot start before it; the
    # SSE test pins it exactly, here the split comes from the words' char offsets and the audio of each generation.
    split = INPUT.index(SECOND)
    one_n = len([w for w in words if w["char_start"] < split])
    sse_r = httpx.post(stack["url"] + SPEECH, json=payload(stack, stream=True, response_format="pcm"), timeout=300)
    events = sse.parse(sse_r.content)
    cut = [n for n, _ in events].index(sse.TIMESTAMPS)
    first_samples = sum(len(base64.b64decode(d["audio"])) // 2 for n, d in events[:cut] if n == sse.DELTA)
    want = [*offline(stack, pcm[:first_samples], FIRST, 0.0, INPUT.index(FIRST)),
            *offline(stack, pcm[first_samples:], SECOND, first_samples / RATE, split)]
    assert one_n == len([w for w in want if w[3] < split])
    check(words, want, f"{FIRST} {SECOND}", pcm.size / RATE)


def test_websocket_sentences_carry_their_words(stack):
    messages: list[Any] = []
    with connect(f"ws://127.0.0.1:{stack['port']}/v1/audio/speech/stream", open_timeout=30) as ws:
        ws.send(json.dumps({"type": "session.config", "model": stack["model"], "voice": "vivian",
                            "max_new_tokens": FRAMES, "seed": 3, "split_granularity": "sentence",
                            "stream_audio": True, "response_format": "pcm", "word_timestamps": True}))
        ws.send(json.dumps({"type": "input.text", "text": f"{FIRST} {SECOND}"}))
        ws.send(json.dumps({"type": "input.done"}))
        while True:
            m = ws.recv(timeout=300)
            messages.append(json.loads(m) if isinstance(m, str) else m)
            if isinstance(messages[-1], dict) and messages[-1]["type"] == "session.done":
                break
    assert not [m for m in messages if isinstance(m, dict) and m["type"] == "error"], messages
    offset = 0.0
    audio = b""
    for sentence in (FIRST, SECOND):
        start = next(i for i, m in enumerate(messages) if isinstance(m, dict) and m["type"] == "audio.start"
                     and m["sentence_text"] == sentence)
        chunk = next(i for i, m in enumerate(messages) if i > start and isinstance(m, dict)
                     and m["type"] == "audio.chunk")
        pcm = np.frombuffer(b"".join(m for m in messages[start:chunk] if isinstance(m, bytes)), "<i2")
        assert messages[chunk + 1]["type"] == "audio.done"
        want = offline(stack, pcm, sentence, offset, 0)
        got = messages[chunk]["timestamps"]
        assert [(w["word"], w["char_start"], w["char_end"]) for w in got] == [(w[0], w[3], w[4]) for w in want]
        np.testing.assert_allclose([(w["start"], w["end"]) for w in got], [w[1:3] for w in want], atol=2e-6)
        offset += pcm.size / RATE
        audio += pcm.tobytes()


def test_bad_word_timestamps_is_a_400_naming_it_and_the_server_keeps_serving(stack):
    url = stack["url"] + SPEECH
    for body in (payload(stack, word_timestamps="yes"),
                 payload(stack, stream_format="audio", response_format="pcm")):
        r = httpx.post(url, json=body, timeout=60)
        assert r.status_code == 400 and r.json()["error"]["param"] == "word_timestamps", r.text
    ok = httpx.post(url, json=payload(stack, input="Still here.", max_new_tokens=4), timeout=300)
    assert ok.status_code == 200 and ok.json()["timestamps"]


def test_the_aligners_stub_killed_mid_request_ends_it_with_an_error(stack):
    """Runs last in the module (it leaves the aligner broken: the health monitor is off here)."""
    events: list[tuple[str, dict]] = []
    first_audio = threading.Event()

    def client() -> None:
        with httpx.Client(timeout=120) as c, c.stream(
                "POST", stack["url"] + SPEECH, json=payload(stack, input=FIRST, max_new_tokens=200, stream=True,
                                                            response_format="pcm")) as r:
            buf = ""
            for text in r.iter_text():
                buf += text
                *blocks, buf = buf.split("\n\n")
                if blocks:
                    events.extend(sse.parse("\n\n".join(blocks) + "\n\n"))
                    first_audio.set()

    thread = threading.Thread(target=client, daemon=True)
    thread.start()
    assert first_audio.wait(120), "no audio before the fault"
    os.kill(child_with(stack["server"].pid, "/forced_aligner/1/model.py"), signal.SIGKILL)
    killed = time.monotonic()
    thread.join(60)
    assert not thread.is_alive(), "the request still hangs 60 s after the aligner's stub was killed"
    print(f"\naligner stub killed: the request ended {time.monotonic() - killed:.2f} s later")
    names = [n for n, _ in events]
    assert sse.DELTA in names and names[-1] == sse.ERROR and sse.TIMESTAMPS not in names, names[-3:]
