"""Words per chunk (issue 40; gateway.word_timing.ChunkRule, `settled`): the rule, and over a fake Triton backend
the SSE events between a sentence's deltas and the WebSocket's incremental mode, each word equal to the fake
aligner's answer on the audio received before it. The real aligner through the real Triton:
tests/e2e_tests/test_e2e_word_timestamps_chunks.py."""

from __future__ import annotations

import base64
import json
from itertools import pairwise

import numpy as np
import pytest
from chunk_words import Sent, check_chunked_words
from gateway_fixtures import (
    ALIGNER_MODEL,
    SAMPLE_RATE,
    SAMPLES_PER_FRAME,
    FakeBackend,
    fake_app_client,
    fake_words,
)

from gateway import sse, word_timing
from gateway.settings import Settings, SettingsError
from gateway.word_timing import ChunkRule, Word

pytestmark = pytest.mark.gateway

SPEECH = "/v1/audio/speech"
WS = "/v1/audio/speech/stream"
CHUNKS = {"aligner_model": ALIGNER_MODEL, "word_timestamps_chunk_s": 0.3, "word_timestamps_margin_s": 0.1}


def words(*spans: tuple[str, float, float]) -> tuple[Word, ...]:
    """Words of one text "a b c ..." (each one character and a space)."""
    return tuple(Word(w, s, e, 2 * i, 2 * i + 1) for i, (w, s, e) in enumerate(spans))


# --- the rule -----------------------------------------------------------------------------------------


def test_a_partial_alignment_sends_the_unsent_words_that_end_a_margin_before_the_audio_in_order():
    aligned = words(("a", 0.0, 0.4), ("b", 0.5, 0.9), ("c", 0.9, 1.6), ("d", 1.0, 1.1), ("e", 1.3, 2.0))
    # d would be final, but c is not: nothing after the first word that is not final goes.
    assert [w.word for w in word_timing.settled(aligned, (), 2.0, 0.5, complete=False)] == ["a", "b"]
    sent = word_timing.settled(aligned, (), 2.0, 0.5, complete=False)
    assert word_timing.settled(aligned, sent, 2.0, 0.5, complete=False) == ()  # never twice
    assert [w.word for w in word_timing.settled(aligned, sent, 2.0, 0.5, complete=True)] == ["c", "d", "e"]
    # The text may grow: its last word is never final before the end.
    assert [w.word for w in word_timing.settled(aligned[:2], (), 2.0, 0.5, complete=False, open_text=True)] == ["a"]
    assert [w.word for w in word_timing.settled(aligned[:2], (), 2.0, 0.5, complete=True, open_text=True)] == ["a", "b"]


def test_later_words_never_go_back_before_the_words_already_sent():
    sent = words(("a", 0.0, 0.4), ("b", 0.5, 0.9))
    # A later (longer) alignment places b's successor earlier than b's end as sent: it starts where b ended.
    later = words(("a", 0.0, 0.3), ("b", 0.3, 0.6), ("c", 0.7, 0.8), ("d", 0.8, 1.5))
    rest = word_timing.settled(later, sent, 3.0, 0.5, complete=True)
    assert [(w.word, w.start, w.end, w.char_start) for w in rest] == [("c", 0.9, 0.9, 4), ("d", 0.9, 1.5, 6)]
    assert sent == words(("a", 0.0, 0.4), ("b", 0.5, 0.9))  # the sent ones are what they were


def test_partial_alignments_come_after_chunk_s_and_then_each_time_the_audio_doubled():
    rule = ChunkRule(chunk_s=1.0, margin_s=0.5)
    aligned_at, at = 0.0, []
    for tenth in range(1, 100):
        heard = tenth / 10
        if rule.due(heard, aligned_at):
            aligned_at = heard
            at.append(heard)
    assert at == [1.0, 2.0, 4.0, 8.0]
    assert sum(at) < 2 * 9.9  # the partial alignments cost less than two of the whole clip
    assert not ChunkRule().per_chunk and not ChunkRule().due(100.0, 0.0)  # the default: per sentence only


def test_the_settings_take_the_rule_and_refuse_negative_values(tmp_path):
    base = {"triton_url": "x:1", "models": [{"name": "m", "variant": "custom_voice", "triton_model": "t",
                                             "artifacts_dir": str(tmp_path)}]}
    s = Settings.from_dict({**base, "word_timestamps_chunk_s": 2, "word_timestamps_margin_s": 0.25})
    assert (s.word_timestamps_chunk_s, s.word_timestamps_margin_s) == (2.0, 0.25)
    for key in ("word_timestamps_chunk_s", "word_timestamps_margin_s"):
        with pytest.raises(SettingsError, match=key):
            Settings.from_dict({**base, key: -1})
    path = tmp_path / "gateway.json"
    path.write_text(json.dumps(base))
    loaded = Settings.load(path, environ={"TTS_WORD_TIMESTAMPS_CHUNK_S": "1.5", "TTS_WORD_TIMESTAMPS_MARGIN_S": "0.3"})
    assert (loaded.word_timestamps_chunk_s, loaded.word_timestamps_margin_s) == (1.5, 0.3)


# --- over the fake backend --------------------------------------------------------------------------------


def fake_reference(text: str, char_offset: int):
    """The fake aligner's words of `text` in the first `samples` of the audio, placed as the gateway places them."""
    def answer(samples: int) -> list[tuple]:
        seconds = samples / SAMPLE_RATE
        placed = word_timing.sentence_words(fake_words(text, seconds), seconds, char_offset)
        return [(w.word, w.start, w.end, w.char_start, w.char_end) for w in placed]
    return answer


def test_sse_sends_words_per_chunk_between_the_deltas_each_the_aligners_on_the_audio_before_it(tmp_path):
    fake = FakeBackend()
    text = "one two three four five six seven eight nine ten."
    original = f"  {text}  "
    with fake_app_client(tmp_path, fake, **CHUNKS) as c:
        r = c.post(SPEECH, json={"input": original, "voice": "vivian", "max_new_tokens": 24, "stream": True,
                                 "response_format": "pcm", "word_timestamps": True})
    events = sse.parse(r.content)
    kinds = [n for n, _ in events]
    assert kinds[-1] == sse.DONE and kinds.count(sse.TIMESTAMPS) >= 3, kinds
    sent, samples = [], 0
    for i, (name, data) in enumerate(events):
        if name == sse.DELTA:
            samples += len(base64.b64decode(data["audio"])) // 2
        elif name == sse.TIMESTAMPS:
            sent.append(Sent(samples, data["timestamps"], final=sse.TIMESTAMPS not in kinds[i + 1:]))
    assert sent[0].samples < samples  # the first words came while the sentence still generated
    check_chunked_words(sent, lambda n: [fake_reference(text, 2)(n)], SAMPLE_RATE, 0.1)
    assert [original[w["char_start"]:w["char_end"]] for s in sent for w in s.words] == text.split()
    # The aligner saw the audio so far each time: partial alignments after 0.3 s, then each time it doubled.
    seconds = [call[1].size / SAMPLE_RATE for call in fake.aligner_calls]
    assert all(b >= 2 * a for a, b in pairwise(seconds[:-1])) and seconds[0] >= 0.3


def test_without_the_setting_words_come_once_per_sentence(tmp_path):
    fake = FakeBackend()
    with fake_app_client(tmp_path, fake, aligner_model=ALIGNER_MODEL) as c:
        r = c.post(SPEECH, json={"input": "one two three four five six.", "voice": "vivian", "max_new_tokens": 24,
                                 "stream": True, "response_format": "pcm", "word_timestamps": True})
    kinds = [n for n, _ in sse.parse(r.content)]
    assert kinds.count(sse.TIMESTAMPS) == 1 and kinds[-2:] == [sse.TIMESTAMPS, sse.DONE]
    assert len(fake.aligner_calls) == 1


def test_a_whole_file_is_aligned_once_per_sentence_with_the_setting(tmp_path):
    fake = FakeBackend()
    text = "one two three four five six seven eight nine ten."
    with fake_app_client(tmp_path, fake, **CHUNKS) as c:
        r = c.post(SPEECH, json={"input": text, "voice": "vivian", "max_new_tokens": 24, "word_timestamps": True})
    assert r.status_code == 200 and [call[0] for call in fake.aligner_calls] == [text]
    got = r.json()["timestamps"]
    want = fake_reference(text, 0)(24 * SAMPLES_PER_FRAME)
    assert [(w["word"], w["char_start"], w["char_end"]) for w in got] == [(w[0], w[3], w[4]) for w in want]
    np.testing.assert_allclose([(w["start"], w["end"]) for w in got], [w[1:3] for w in want], atol=2e-6)


def receive_all(ws) -> list:
    messages: list = []
    while not (messages and isinstance(messages[-1], dict) and messages[-1]["type"] == "session.done"):
        m = ws.receive()
        messages.append(json.loads(m["text"]) if m.get("text") is not None else m["bytes"])
    return messages


def test_websocket_incremental_words_per_chunk_index_the_utterances_text(tmp_path):
    fake = FakeBackend()
    pieces = ["one two three four ", "five six seven ", "eight nine ten eleven twelve."]
    with fake_app_client(tmp_path, fake, **CHUNKS) as c, c.websocket_connect(WS) as ws:
        ws.send_text(json.dumps({"type": "session.config", "voice": "vivian", "split_granularity": "incremental",
                                 "word_timestamps": True}))
        assert json.loads(ws.receive_text())["split_granularity"] == "incremental"
        for piece in pieces:
            ws.send_text(json.dumps({"type": "input.text", "text": piece}))
        ws.send_text(json.dumps({"type": "input.done"}))
        messages = receive_all(ws)
    assert not [m for m in messages if isinstance(m, dict) and m["type"] == "error"], messages
    kinds = ["bytes" if isinstance(m, bytes) else m["type"] for m in messages]
    assert kinds.count("audio.start") == 1 and kinds[-2:] == ["audio.done", "session.done"]
    sent, samples = [], 0
    for i, m in enumerate(messages):
        if isinstance(m, bytes):
            samples += len(m) // 2
        elif m["type"] == "audio.chunk":
            assert m["audio_b64"] == "" and m["sentence_index"] == 0
            sent.append(Sent(samples, m["timestamps"], final="audio.chunk" not in kinds[i + 1:]))
    assert len(sent) >= 2 and sent[0].samples < samples
    whole = "".join(pieces)
    prefixes = ["".join(pieces[:k]) for k in range(1, len(pieces) + 1)]
    check_chunked_words(sent, lambda n: [fake_reference(p, 0)(n) for p in prefixes], SAMPLE_RATE, 0.1)
    assert [whole[w["char_start"]:w["char_end"]] for s in sent for w in s.words] == whole.split()


def test_websocket_incremental_without_the_setting_sends_the_utterances_words_after_its_audio(tmp_path):
    fake = FakeBackend()
    with fake_app_client(tmp_path, fake, aligner_model=ALIGNER_MODEL) as c, c.websocket_connect(WS) as ws:
        ws.send_text(json.dumps({"type": "session.config", "voice": "vivian", "split_granularity": "incremental",
                                 "word_timestamps": True}))
        assert json.loads(ws.receive_text())["split_granularity"] == "incremental"
        for piece in ("Hello there, ", "my friend."):
            ws.send_text(json.dumps({"type": "input.text", "text": piece}))
        ws.send_text(json.dumps({"type": "input.done"}))
        messages = receive_all(ws)
    kinds = ["bytes" if isinstance(m, bytes) else m["type"] for m in messages]
    assert kinds[0] == "audio.start" and kinds[-3:] == ["audio.chunk", "audio.done", "session.done"]
    assert kinds.count("audio.chunk") == 1
    samples = sum(len(m) // 2 for m in messages if isinstance(m, bytes))
    got = messages[-3]["timestamps"]
    want = fake_reference("Hello there, my friend.", 0)(samples)
    assert [(w["word"], w["char_start"], w["char_end"]) for w in got] == [(w[0], w[3], w[4]) for w in want]
    np.testing.assert_allclose([(w["start"], w["end"]) for w in got], [w[1:3] for w in want], atol=2e-6)
    assert [call[0] for call in fake.aligner_calls] == ["Hello there, my friend."]

