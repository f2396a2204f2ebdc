"""Words per chunk through the REAL tritonserver and gateway (issue 40; gateway.word_timing.ChunkRule): a tiny
greedy Qwen3-TTS CustomVoice and the tiny forced aligner (make-tiny --aligner), the gateway with
`word_timestamps_chunk_s` set. On SSE (one sentence) and on the WebSocket in `incremental` mode (the utterance's
text sent in pieces), words come while the sentence's audio still streams, each equal to what the offline
ForcedAligner gives on the audio the client had received before it and the text (clamped into that audio; the
incremental generation's text: one of its prefixes at the client's input.text boundaries, the whole of it at the
end), never sent twice nor going back, together the offline aligner's words of the whole audio, with char offsets
that index the original input (the utterance's texts joined)."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import numpy as np
import pytest
from aligner_fixtures import *  # noqa: F403  (aligner_tiny, aligner_artifacts)
from chunk_words import Sent, check_chunked_words
from gateway_fixtures import render_stack_repository, start_gateway
from websockets.sync.client import connect

from gateway import sse
from gateway.settings import Settings
from ttscore.backend.triton_server import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SPEECH = "/v1/audio/speech"
TEXT = "The quick brown fox jumps over the lazy dog, then it rests under a tree until the evening comes."
INPUT = f"  {TEXT} "
FRAMES = 40  # about 3.2 s of audio
RATE = 24000
CHUNK_S, MARGIN_S = 0.5, 0.25


@pytest.fixture(scope="module")
def stack(triton_server, tiny_custom_voice_greedy, aligner_artifacts, tmp_path_factory):
    ckpt, art, _ = tiny_custom_voice_greedy
    work = tmp_path_factory.mktemp("word-timestamps-chunks")
    repo, cfg = render_stack_repository(work, [(ckpt, art)], max_active=2, aligner=aligner_artifacts)
    server = triton_server(repo, ready_timeout_s=180)
    cfg = {**cfg, "triton_url": server.grpc_url, "speaker_samples_dir": str(work / "speakers"), "health_interval_s": 0,
           "word_timestamps_chunk_s": CHUNK_S, "word_timestamps_margin_s": MARGIN_S}
    port = free_port()
    gw, thread = start_gateway(Settings.from_dict(cfg), port)
    from ttscore.runtime.qwen3_forced_aligner.model import ForcedAligner

    yield {"url": f"http://127.0.0.1:{port}", "port": port, "model": cfg["models"][0]["name"],
           "aligner": ForcedAligner(aligner_artifacts)}
    gw.should_exit = True
    thread.join(15)


def offline(stack: dict[str, Any], pcm16: np.ndarray, text: str, char_offset: int) -> list[tuple]:
    """ForcedAligner's words of `text` in `pcm16`, each time clamped into it and after the previous word's end."""
    audio = pcm16.astype(np.float32) / 32768.0
    duration = audio.size / RATE
    out, floor = [], 0.0
    for w in stack["aligner"].align(audio, text, "English", sample_rate=RATE):
        start = min(max(w.start, floor), duration)
        end = min(max(w.end, start), duration)
        floor = end
        out.append((w.text, start, end, char_offset + w.char_start, char_offset + w.char_end))
    return out


def test_sse_words_per_chunk_come_during_the_audio_and_equal_the_offline_aligners_on_the_audio_before_them(stack):
    body = {"model": stack["model"], "input": INPUT, "voice": "vivian", "max_new_tokens": FRAMES, "seed": 3,
            "word_timestamps": True, "stream": True, "response_format": "pcm"}
    r = httpx.post(stack["url"] + SPEECH, json=body, timeout=300)
    assert r.status_code == 200
    events = sse.parse(r.content)
    kinds = [n for n, _ in events]
    assert kinds[-1] == sse.DONE, kinds
    pcm, sent = b"", []
    for i, (name, data) in enumerate(events):
        if name == sse.DELTA:
            pcm += base64.b64decode(data["audio"])
        elif name == sse.TIMESTAMPS:
            sent.append(Sent(len(pcm) // 2, data["timestamps"], final=sse.TIMESTAMPS not in kinds[i + 1:]))
    audio = np.frombuffer(pcm, "<i2")
    assert len(sent) >= 2 and sent[0].samples < audio.size, [(s.samples, len(s.words)) for s in sent]
    check_chunked_words(sent, lambda n: [offline(stack, audio[:n], TEXT, INPUT.index(TEXT))], RATE, MARGIN_S)
    assert [INPUT[w["char_start"]:w["char_end"]] for s in sent for w in s.words] == TEXT.split()


def test_websocket_incremental_words_per_chunk_follow_the_text_received_so_far(stack):
    words = TEXT.split(" ")
    pieces = [" ".join(words[:4]) + " ", " ".join(words[4:9]) + " ", " ".join(words[9:])]
    messages: list[Any] = []
    with connect(f"ws://127.0.0.1:{stack['port']}/v1/audio/speech/stream", open_timeout=30) as ws:
        ws.send(json.dumps({"type": "session.config", "model": stack["model"], "voice": "vivian", "language": "English",
                            "max_new_tokens": FRAMES, "seed": 3, "split_granularity": "incremental",
                            "stream_audio": True, "response_format": "pcm", "word_timestamps": True}))
        assert json.loads(ws.recv(timeout=60))["split_granularity"] == "incremental"
        for piece in pieces:
            ws.send(json.dumps({"type": "input.text", "text": piece}))
        ws.send(json.dumps({"type": "input.done"}))
        while not (messages and isinstance(messages[-1], dict) and messages[-1]["type"] == "session.done"):
            m = ws.recv(timeout=300)
            messages.append(json.loads(m) if isinstance(m, str) else m)
    assert not [m for m in messages if isinstance(m, dict) and m["type"] == "error"], messages
    kinds = ["bytes" if isinstance(m, bytes) else m["type"] for m in messages]
    assert kinds.count("audio.start") == 1 and kinds[-2:] == ["audio.done", "session.done"]
    pcm, sent = b"", []
    for i, m in enumerate(messages):
        if isinstance(m, bytes):
            pcm += m
        elif m["type"] == "audio.chunk":
            sent.append(Sent(len(pcm) // 2, m["timestamps"], final="audio.chunk" not in kinds[i + 1:]))
    audio = np.frombuffer(pcm, "<i2")
    assert len(sent) >= 2 and sent[0].samples < audio.size, [(s.samples, len(s.words)) for s in sent]
    whole = "".join(pieces)
    prefixes = ["".join(pieces[:k]) for k in range(1, len(pieces) + 1)]
    check_chunked_words(sent, lambda n: [offline(stack, audio[:n], p, 0) for p in prefixes], RATE, MARGIN_S)
    assert [whole[w["char_start"]:w["char_end"]] for s in sent for w in s.words] == whole.split()
