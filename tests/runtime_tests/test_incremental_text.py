"""Incremental text (ttscore.runtime.engine: submit(text_open=True) / extend): a greedy Qwen3-TTS
utterance fed word by word while it generates equals the same text given at once in the
streaming prompt mode; a sequence that has used its text waits (kept, not stepped) until more comes."""

from __future__ import annotations

import numpy as np
import pytest

from gateway import encoding
from ttscore.contract.errors import InvalidRequest
from ttscore.runtime.engine import Generator
from ttscore.runtime.families.qwen3_tts.request import Qwen3TTSRequest

TEXT = "Hello there, this sentence arrives one word at a time from a language model."
FRAMES = 60


def request(text: str, **kw) -> Qwen3TTSRequest:
    return Qwen3TTSRequest(text=text, speaker="vivian", language="English", seed=7, max_new_tokens=FRAMES,
                           non_streaming_mode=False, **kw)


def whole(pipeline) -> np.ndarray:
    gen = Generator(pipeline, max_batch=2)
    return np.concatenate([ev.pcm for ev in gen.synthesize(request(TEXT))])


def test_word_by_word_equals_the_whole_text_and_waits_between_words(tiny_custom_voice_greedy):
    _, _, pipeline = tiny_custom_voice_greedy
    want = whole(pipeline)
    words = TEXT.split(" ")
    pieces = [words[0]] + [" " + w for w in words[1:]]
    gen = Generator(pipeline, max_batch=2, chunk_policy="fixed")
    gen.submit("r", request(pieces[0]), text_open=True)
    sent = 1
    audio: list[np.ndarray] = []
    frames_before_last_word = 0
    waited_steps = 0
    final = None
    while final is None:
        for ev in gen.step():
            audio.append(ev.pcm)
            if sent < len(pieces):
                frames_before_last_word += ev.frames
            if ev.final:
                final = ev
        if gen.num_waiting:
            waited_steps += 1
            assert gen.num_active == 1  # kept in the batch while it waits
            if sent < len(pieces):
                gen.extend("r", pieces[sent], done=False)
                sent += 1
            else:
                gen.extend("r", "", done=True)
        assert waited_steps < 10_000
    got = np.concatenate(audio)
    assert frames_before_last_word > 0  # audio came before the text was complete
    assert waited_steps >= len(pieces) - 2  # it waited for (nearly) every word
    waits = gen.drain_text_waits()
    assert len(waits) >= len(pieces) - 2 and all(w >= 0 for w in waits)
    assert got.shape == want.shape
    assert np.max(np.abs(encoding.to_int16(got).astype(np.int32) - encoding.to_int16(want).astype(np.int32))) <= 1
    assert final.usage.text_tokens > 0


def test_the_whole_text_at_once_in_an_open_request_is_the_same(tiny_custom_voice_greedy):
    _, _, pipeline = tiny_custom_voice_greedy
    want = whole(pipeline)
    gen = Generator(pipeline, max_batch=2)
    gen.submit("r", request(TEXT), text_open=True)
    audio = []
    done = False
    while True:
        events = gen.step()
        audio += [ev.pcm for ev in events]
        if any(ev.final for ev in events):
            break
        if gen.num_waiting and not done:
            gen.extend("r", "", done=True)
            done = True
    got = np.concatenate(audio)
    assert np.max(np.abs(encoding.to_int16(got).astype(np.int32) - encoding.to_int16(want).astype(np.int32))) <= 1


def test_open_requests_are_refused_where_they_cannot_work(tiny_custom_voice_greedy):
    _, _, pipeline = tiny_custom_voice_greedy
    gen = Generator(pipeline, max_batch=2)
    with pytest.raises(InvalidRequest) as exc:
        gen.submit("a", request("Hi", ).__class__(text="Hi", speaker="vivian", non_streaming_mode=True),
                   text_open=True)
    assert exc.value.param == "non_streaming_mode"
    gen.submit("b", request("Hello"))  # a closed request cannot take more text
    with pytest.raises(InvalidRequest):
        gen.extend("b", " more", done=False)
    assert gen.extend("nobody", " more", done=True) is False
