"""word_timestamps through the REAL tritonserver and gateway (issue 40), for every family that takes them: one
stack for the module, rendered as `triton-tts serve --aligner` renders it, of each family's tiny checkpoint (a
greedy Qwen3-TTS CustomVoice, VoxCPM2 at 48 kHz, Breeze-TTS-2, OmniVoice, Voxtral TTS, CosyVoice3 cloned, Fish
Speech at 44.1 kHz, MOSS-TTS-Nano cloned at 48 kHz; Gepard-1.0, which refuses them) and the tiny forced aligner
(make-tiny --aligner), a few frames a generation.

For each family, on SSE (a two-sentence input: one generation a sentence with word timestamps), the whole-file JSON
and the WebSocket (sentence mode), every sentence's words equal what the offline ForcedAligner gives on the audio
the client received at the family's rate and the sentence's text (its times clamped into the sentence's audio:
random weights time words past the end), shifted by the audio before the sentence, with char offsets indexing the
original input (the WebSocket: the sentence's text); on SSE the first sentence's words come before any audio of
the second sentence. `word_timestamps` on Gepard, on a deployment without an aligner, as a non-boolean or with raw
audio bytes is a 400 naming the field and the server keeps serving; the aligner's stub killed while a request
generates ends that request with an error, not a hang. Runs last: the kill."""

from __future__ import annotations

import base64
import json
import os
import signal
import threading
import time
from contextlib import contextmanager
from typing import Any

import e2e_speech as e2e
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
# Over MOSS-TTS-Nano's 50 text tokens a chunk (tiny tokenizer: 73): the model generates it in two chunks with a
# pause between them, one generation whose words are aligned together.
SECOND = "Then it rests, happily, under a tree, while the wind moves the leaves and the birds sing!"
INPUT = f"  {FIRST}\n\n{SECOND} "
REF_TEXT = "A reference clip."

# Each family served: its checkpoint and export fixtures (a Qwen3-TTS fixture gives both), and the request fields
# that make a short clip a sentence (few frames; a seed or greedy decoding, so that a request's audio repeats).
FAMILIES: dict[str, tuple[str, str | None, dict[str, Any]]] = {
    "qwen3_tts": ("tiny_custom_voice_greedy", None, {"voice": "vivian", "max_new_tokens": 12, "seed": 3}),
    "voxcpm2": ("voxcpm2_tiny", "voxcpm2_artifacts", {"max_new_tokens": 6, "seed": 5}),
    "breeze_tts_2": ("breeze_tiny", "breeze_export", {"voice": "S3", "max_new_tokens": 6}),
    "omnivoice": ("omnivoice_tiny", "omnivoice_artifacts",
                  {"extra_params": {"num_step": 4, "position_temperature": 0.0, "class_temperature": 0.0}}),
    "voxtral_tts": ("voxtral_tiny", "voxtral_artifacts", {"voice": "casual_male", "max_new_tokens": 8, "seed": 7}),
    "cosyvoice3": ("cosyvoice3_tiny", "cosyvoice3_artifacts",
                   {"ref_audio": "ref24k", "ref_text": REF_TEXT, "max_new_tokens": 30, "seed": 7}),
    "fish_speech": ("fish_tiny", "fish_artifacts", {"max_new_tokens": 8, "seed": 7}),
    "moss_tts_nano": ("moss_tiny", "moss_artifacts", {"ref_audio": "ref48k", "max_new_tokens": 10}),
}
REFUSING = {"gepard": ("gepard_tiny", "gepard_artifacts")}  # word_timestamps is a 400 (the spec's Gepard table)


@pytest.fixture(scope="module")
def stack(request, triton_server, aligner_artifacts, tmp_path_factory):
    pairs = []
    for ckpt_name, art_name, _ in FAMILIES.values():
        got = request.getfixturevalue(ckpt_name)
        pairs.append(got[:2] if art_name is None else (got, request.getfixturevalue(art_name)))
    pairs += [(request.getfixturevalue(c), request.getfixturevalue(a)) for c, a in REFUSING.values()]
    work = tmp_path_factory.mktemp("word-timestamps")
    refs = {"ref24k": e2e.write_tone(work / "ref24k.wav", 24000, 1.5), "ref48k": e2e.write_tone(work / "ref48k.wav",
                                                                                              48000, 1.2)}
    repo, cfg = render_stack_repository(work, pairs, max_active=2, aligner=aligner_artifacts)
    server = triton_server(repo, ready_timeout_s=180)
    # health_interval_s 0: the kill stays visible (the aligner is not reloaded behind the test's back).
    cfg = {**cfg, "triton_url": server.grpc_url, "speaker_samples_dir": str(work / "speakers"), "health_interval_s": 0}
    port = free_port()
    gw, thread = start_gateway(Settings.from_dict(cfg), port)
    from ttscore.runtime.qwen3_forced_aligner.model import ForcedAligner

    names = dict(zip([*FAMILIES, *REFUSING], (m["name"] for m in cfg["models"]), strict=True))
    url = f"http://127.0.0.1:{port}"
    with httpx.Client(base_url=url, timeout=60) as http:
        cards = e2e.model_cards(http)
    yield {"url": url, "port": port, "server": server, "config": cfg, "work": work, "names": names,
           "rates": {f: cards[n]["sample_rate"] for f, n in names.items()},
           "refs": {k: e2e.data_url(work / f"{k}.wav") for k in refs},
           "aligner": ForcedAligner(aligner_artifacts), "sse": {}}
    gw.should_exit = True
    thread.join(15)


def fields(stack: dict[str, Any], family: str) -> dict[str, Any]:
    """The family's request fields (its reference clip as a data URL), `word_timestamps` on."""
    out = {"model": stack["names"][family], **FAMILIES[family][2], "word_timestamps": True}
    if "ref_audio" in out:
        out["ref_audio"] = stack["refs"][out["ref_audio"]]
    return out


def payload(stack: dict[str, Any], family: str = "qwen3_tts", **kw: Any) -> dict[str, Any]:
    return {**fields(stack, family), "input": INPUT, **kw}


def offline(stack: dict[str, Any], pcm16: np.ndarray, text: str, offset_s: float, char_offset: int,
            rate: int) -> list[tuple]:
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


def check(got: list[dict], want: list[tuple], text: str, source: str, total_s: float) -> None:
    """`got` (wire words) are `want` (offline's), monotonic inside the audio, and their characters in `source`
    are the words of `text`, in order."""
    assert [(w["word"], w["char_start"], w["char_end"]) for w in got] == [(w[0], w[3], w[4]) for w in want]
    np.testing.assert_allclose([(w["start"], w["end"]) for w in got], [w[1:3] for w in want], atol=2e-6)
    times = [t for w in got for t in (w["start"], w["end"])]
    assert times == sorted(times) and times[0] >= 0 and times[-1] <= total_s + 1e-6
    assert " ".join(source[w["char_start"]:w["char_end"]] for w in got).split() == text.split()


def sse_run(stack: dict[str, Any], family: str) -> tuple[np.ndarray, np.ndarray, list[dict], list[dict]]:
    """One SSE request of the two sentences (made once per family): the PCM sent before the first words, the
    PCM between them and the second words, and the two sentences' words; nothing comes after the second words
    but the end of the stream."""
    if family in stack["sse"]:
        return stack["sse"][family]
    events: list[tuple[str, dict]] = []
    buf = ""
    body = payload(stack, family, stream=True, response_format="pcm")
    with httpx.Client(timeout=300) as c, c.stream("POST", stack["url"] + SPEECH, json=body) as r:
        assert r.status_code == 200, r.read()
        for text in r.iter_text():  # in the order they arrive
            buf += text
            *blocks, buf = buf.split("\n\n")
            if blocks:
                events.extend(sse.parse("\n\n".join(blocks) + "\n\n"))
    kinds = [name for name, _ in events]
    assert kinds.count(sse.TIMESTAMPS) == 2 and kinds[-1] == sse.DONE, kinds
    first = kinds.index(sse.TIMESTAMPS)
    second = kinds.index(sse.TIMESTAMPS, first + 1)
    deltas = [(i, base64.b64decode(d["audio"])) for i, (n, d) in enumerate(events) if n == sse.DELTA]
    assert not [i for i, _ in deltas if i > second]
    one = np.frombuffer(b"".join(a for i, a in deltas if i < first), "<i2")
    two = np.frombuffer(b"".join(a for i, a in deltas if first < i < second), "<i2")
    stack["sse"][family] = one, two, events[first][1]["timestamps"], events[second][1]["timestamps"]
    return stack["sse"][family]


def both_sentences(stack: dict[str, Any], family: str, one: np.ndarray, two: np.ndarray) -> list[tuple]:
    rate = stack["rates"][family]
    return [*offline(stack, one, FIRST, 0.0, INPUT.index(FIRST), rate),
            *offline(stack, two, SECOND, one.size / rate, INPUT.index(SECOND), rate)]


@pytest.mark.parametrize("family", FAMILIES)
def test_sse_words_per_sentence_equal_the_offline_aligners_on_the_received_audio(stack, family):
    one, two, words_one, words_two = sse_run(stack, family)
    rate = stack["rates"][family]
    # Each sentence made audio, and the first one's words came before any audio of the second.
    assert one.size and two.size and words_one and words_two
    check([*words_one, *words_two], both_sentences(stack, family, one, two), f"{FIRST} {SECOND}", INPUT,
          (one.size + two.size) / rate)
    assert words_one[-1]["end"] <= one.size / rate + 1e-6  # the first sentence's words lie in its audio


@pytest.mark.parametrize("family", FAMILIES)
def test_whole_file_json_carries_the_audio_and_the_same_words(stack, family):
    r = httpx.post(stack["url"] + SPEECH, json=payload(stack, family), timeout=300)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json", r.text
    body = r.json()
    rate, pcm = encoding.parse_wav(base64.b64decode(body["audio"]))
    assert rate == stack["rates"][family] and body["media_type"] == "audio/wav"
    # Where the first sentence's audio ends: the first sentence alone (a generation with the same text and seed)
    # makes it, and the file begins with it. (Not the SSE's: OmniVoice streams a sentence in smaller chunks.)
    alone = httpx.post(stack["url"] + SPEECH, json=payload(stack, family, input=FIRST, word_timestamps=False),
                       timeout=300)
    assert alone.status_code == 200, alone.text
    first = encoding.parse_wav(alone.content)[1]
    cut = first.size
    assert 0 < cut < pcm.size and np.max(np.abs(pcm[:cut].astype(np.int32) - first)) <= 1
    check(body["timestamps"], both_sentences(stack, family, pcm[:cut], pcm[cut:]), f"{FIRST} {SECOND}", INPUT,
          pcm.size / rate)


def ws_messages(stack: dict[str, Any], config: dict[str, Any], text: str | list[str]) -> list[Any]:
    """Every message of one WebSocket utterance (its text in one input.text, or in the given pieces) up to
    session.done (or the first error)."""
    messages: list[Any] = []
    with connect(f"ws://127.0.0.1:{stack['port']}/v1/audio/speech/stream", open_timeout=30, max_size=None) as ws:
        ws.send(json.dumps({"type": "session.config", **config}))
        for piece in [text] if isinstance(text, str) else text:
            ws.send(json.dumps({"type": "input.text", "text": piece}))
        ws.send(json.dumps({"type": "input.done"}))
        while True:
            m = ws.recv(timeout=300)
            messages.append(json.loads(m) if isinstance(m, str) else m)
            if isinstance(messages[-1], dict) and messages[-1]["type"] in ("session.done", "error"):
                return messages


# Incremental text: the families whose generation cannot take text while it runs fall back to sentences (their
# words as in sentence mode); Qwen3-TTS's one incremental generation is checked in test_e2e_word_timestamps_chunks.
WS_CASES = [(f, "sentence") for f in FAMILIES] + [(f, "incremental") for f in FAMILIES if f != "qwen3_tts"]


@pytest.mark.parametrize(("family", "granularity"), WS_CASES)
def test_websocket_sentences_carry_their_words(stack, family, granularity):
    rate = stack["rates"][family]
    config = {**fields(stack, family), "split_granularity": granularity, "stream_audio": True,
              "response_format": "pcm"}
    text = f"{FIRST} {SECOND}"
    pieces = [text] if granularity == "sentence" else [w + " " for w in text.split(" ")]  # as an LLM streams it
    messages = ws_messages(stack, config, pieces)
    assert messages[-1]["type"] == "session.done", messages[-1]
    offset = 0.0
    places = []
    for sentence in (FIRST, SECOND):
        start = next(i for i, m in enumerate(messages) if isinstance(m, dict) and m["type"] == "audio.start"
                     and m["sentence_text"] == sentence)
        assert messages[start]["sample_rate"] == rate
        chunk = next(i for i, m in enumerate(messages) if i > start and isinstance(m, dict)
                     and m["type"] == "audio.chunk")
        pcm = np.frombuffer(b"".join(m for m in messages[start:chunk] if isinstance(m, bytes)), "<i2")
        assert pcm.size and messages[chunk + 1]["type"] == "audio.done"
        check(messages[chunk]["timestamps"], offline(stack, pcm, sentence, offset, 0, rate), sentence, sentence,
              offset + pcm.size / rate)
        offset += pcm.size / rate
        places.append((start, chunk))
    assert places[0][1] < places[1][0]  # the first sentence's words came before the second's audio


@contextmanager
def gateway_without_aligner(stack: dict[str, Any]):
    """A second gateway over the module's Triton whose config names no aligner (`serve` without --aligner)."""
    cfg = {k: v for k, v in stack["config"].items() if k != "aligner_model"}
    port = free_port()
    gw, thread = start_gateway(Settings.from_dict({**cfg, "speaker_samples_dir": str(stack["work"] / "speakers2")}),
                               port)
    try:
        yield port
    finally:
        gw.should_exit = True
        thread.join(15)


def refused_everywhere(port: int, body: dict[str, Any]) -> list[str]:
    """`body` (word_timestamps on) as a whole file and as SSE, each a 400 naming word_timestamps, and as a
    WebSocket session.config, an error saying so: the messages of the two 400s."""
    url = f"http://127.0.0.1:{port}{SPEECH}"
    said = []
    for extra in ({}, {"stream": True, "response_format": "pcm"}):
        r = httpx.post(url, json={**body, **extra}, timeout=60)
        e2e.assert_refused(r, "word_timestamps")
        said.append(r.json()["error"]["message"])
    config = {k: v for k, v in body.items() if k != "input"}
    with connect(f"ws://127.0.0.1:{port}/v1/audio/speech/stream", open_timeout=30) as ws:
        ws.send(json.dumps({"type": "session.config", **config, "split_granularity": "sentence"}))
        m = json.loads(ws.recv(timeout=60))
    assert m["type"] == "error" and "word_timestamps" in m["message"], m
    return said


def test_gepard_and_a_deployment_without_an_aligner_refuse_word_timestamps_naming_it(stack):
    gepard = {"model": stack["names"]["gepard"], "input": FIRST, "max_new_tokens": 4, "seed": 1,
              "word_timestamps": True}
    refused_everywhere(stack["port"], gepard)  # the aligner is deployed: Gepard's own rule
    with gateway_without_aligner(stack) as port:
        for said in refused_everywhere(port, payload(stack)):
            assert "--aligner" in said, said
        # The same request without word_timestamps is served there.
        r = httpx.post(f"http://127.0.0.1:{port}{SPEECH}", json=payload(stack, word_timestamps=False, input=FIRST,
                                                                           max_new_tokens=4), timeout=300)
        assert r.status_code == 200 and r.headers["content-type"] == "audio/wav", r.text
    ok = httpx.post(stack["url"] + SPEECH, json={**gepard, "word_timestamps": False}, timeout=300)
    assert ok.status_code == 200 and ok.headers["content-type"] == "audio/wav", ok.text


def test_bad_word_timestamps_is_a_400_naming_it_and_the_server_keeps_serving(stack):
    url = stack["url"] + SPEECH
    for body in (payload(stack, word_timestamps="yes"),
                 payload(stack, stream_format="audio", response_format="pcm")):
        e2e.assert_refused(httpx.post(url, json=body, timeout=60), "word_timestamps")
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
