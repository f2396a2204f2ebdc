"""Checks of words sent per chunk (gateway.word_timing.ChunkRule), shared by the gateway tests (fake aligner) and
the e2e tests (the real Triton's tiny aligner against the offline one).

A stream's word messages are `Sent(samples, words, final)`: how many samples of the generation the client had
received when the message came, the words (wire dicts, times from the generation's start), and whether it was the
generation's last (after all its audio). `reference(samples)` is the aligner's answers on those first samples of
the received audio and the text (tuples (word, start, end, char_start, char_end), times clamped into the clip and
monotonic, as gateway.word_timing.sentence_words places them): one answer, or one per text the generation may
have had by then (incremental text: its prefixes at the client's input.text boundaries), the first that matches
counting; the final message's is the last answer's (the whole text)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

Ref = tuple[str, float, float, int, int]


@dataclass(frozen=True)
class Sent:
    samples: int
    words: list[dict[str, Any]]
    final: bool


def _placed(message: Sent, answer: list[Ref], done: list[dict[str, Any]]) -> list[Ref]:
    after = done[-1]["char_end"] if done else -1
    floor = done[-1]["end"] if done else 0.0
    want: list[Ref] = []
    for w in [r for r in answer if r[3] >= after][:len(message.words)]:
        start = max(w[1], floor)
        end = max(w[2], start)
        want.append((w[0], start, end, w[3], w[4]))
        floor = end
    return want


def _same(got: list[dict[str, Any]], want: list[Ref], atol: float) -> bool:
    return ([(w["word"], w["char_start"], w["char_end"]) for w in got] == [(w[0], w[3], w[4]) for w in want]
            and np.allclose([(w["start"], w["end"]) for w in got], [w[1:3] for w in want], atol=atol, rtol=0))


def check_chunked_words(sent: list[Sent], reference: Callable[[int], list[list[Ref]]], rate: int, margin_s: float,
                        atol: float = 2e-6) -> None:
    """Every message's words are those of the reference alignment of the audio received before it that were not
    sent yet, in text order (each start raised to the last sent word's end); an early message's words all end at
    least `margin_s` before that audio's end; together they are the reference's words of the whole audio, each
    once, and times never go back."""
    assert sent and sent[-1].final and not [s for s in sent[:-1] if s.final]
    done: list[dict[str, Any]] = []
    for message in sent:
        got = message.words
        answers = reference(message.samples)
        candidates = [_placed(message, a, done) for a in (answers[-1:] if message.final else answers)]
        assert any(_same(got, want, atol) for want in candidates), (message, candidates)
        if not message.final:
            assert got and all(w["end"] <= message.samples / rate - margin_s + atol for w in got)
        done += got
    final = reference(sent[-1].samples)[-1]
    assert [(w["word"], w["char_start"], w["char_end"]) for w in done] == [(w[0], w[3], w[4]) for w in final]
    times = [t for w in done for t in (w["start"], w["end"])]
    assert times == sorted(times) and times[0] >= 0 and times[-1] <= sent[-1].samples / rate + atol


__all__ = ["Ref", "Sent", "check_chunked_words"]
