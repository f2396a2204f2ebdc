"""The runaway guard in the engine (ttscore.runtime.engine.RunawayGuard, ttscore.contract.rules.runaway_frames),
with a fake family whose model never stops unless told: a generation ends with "length" at its budget from the
text, a model that stops first says "stop", max_new_tokens still caps it, an open text's budget grows with its text,
factor 0 or a family without a rate turns it off."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ttscore.contract import families
from ttscore.contract.rules import DEFAULT_RUNAWAY_FACTOR, DEFAULT_RUNAWAY_MIN_S, runaway_frames
from ttscore.runtime.engine import Generator, RunawayGuard
from ttscore.runtime.family import Sequence

FRAME_S = 0.08


@dataclass
class Req:
    tokens: int  # text tokens
    stop_at: int | None = None  # the model's own stop (None: never)
    max_new_tokens: int = 100_000
    open: bool = False


class NeverStops:
    """One frame per step; it ends only at its stop (if any) or max_new_tokens."""

    vocoder = None
    num_codebooks = 1
    frame_seconds = FRAME_S

    def __init__(self) -> None:
        self.released = 0

    def _seq(self, r: Req) -> Sequence:
        seq = Sequence(initial_chunk_frames=1, chunk_frames=50, text_tokens=r.tokens, prompt_tokens=1)
        seq.req = r  # type: ignore[attr-defined]
        return seq

    def admit(self, r: Req) -> Sequence:
        return self._seq(r)

    def admit_open(self, r: Req) -> Sequence:
        return self._seq(r)

    def extend_text(self, seq: Sequence, text: str, done: bool) -> None:
        seq.text_tokens += len(text.split())

    def _frame(self, seq: Sequence) -> None:
        r: Req = seq.req  # type: ignore[attr-defined]
        seq.pending.append(np.zeros(1, np.int64))
        seq.frames_out += 1
        if r.stop_at is not None and seq.frames_out >= r.stop_at:
            seq.finished = "stop"
        elif seq.frames_out >= r.max_new_tokens:
            seq.finished = "length"

    def prefill(self, work: list[tuple[Sequence, int]]) -> None:
        for seq, n in work:
            seq.prefilled += n
            self._frame(seq)

    def step(self, batch: list[Sequence]) -> None:
        for seq in batch:
            self._frame(seq)

    def release(self, seq: Sequence) -> None:
        self.released += 1


class Silent:
    def new_stream(self) -> None:
        return None

    def decode(self, items):  # type: ignore[no-untyped-def]
        return [np.zeros(len(frames), np.float32) for _, frames in items]


RATE = 0.3


def run(req: Req, guard: RunawayGuard | None) -> tuple[str | None, int]:
    model = NeverStops()
    gen = Generator(model, vocoder=Silent(), runaway=guard, chunk_policy="fixed")  # type: ignore[arg-type]
    events = list(gen.synthesize(req))
    assert model.released == 1 and gen.num_active == 0
    return events[-1].finish_reason, events[-1].usage.output_tokens


def test_the_budget_rule():
    assert runaway_frames(RATE, 10, FRAME_S, 4, 10) == math.ceil((10 + 4 * 0.3 * 10) / FRAME_S)
    assert runaway_frames(None, 10, FRAME_S) is None  # a family that decides its length first
    assert runaway_frames(RATE, 10, FRAME_S, factor=0) is None  # off
    assert runaway_frames(RATE, 0, FRAME_S, 4, 0) == 1


def test_a_never_stopping_generation_ends_at_its_budget_as_length():
    guard = RunawayGuard(RATE, factor=2, min_s=1)
    budget = runaway_frames(RATE, 5, FRAME_S, 2, 1)
    assert budget is not None and budget < 100
    assert run(Req(5), guard) == ("length", budget)
    assert run(Req(50), guard)[1] > budget  # more text, more room


def test_a_model_that_stops_first_says_stop_and_max_new_tokens_still_caps():
    guard = RunawayGuard(RATE, factor=2, min_s=1)
    assert run(Req(5, stop_at=7), guard) == ("stop", 7)
    assert run(Req(5, max_new_tokens=9), guard) == ("length", 9)


def test_off_the_generation_runs_to_max_new_tokens():
    assert run(Req(5, max_new_tokens=500), RunawayGuard(RATE, factor=0)) == ("length", 500)
    assert run(Req(5, max_new_tokens=500), RunawayGuard(None)) == ("length", 500)
    assert run(Req(5, max_new_tokens=500), None) == ("length", 500)


def test_an_open_texts_budget_grows_with_its_text():
    model = NeverStops()
    guard = RunawayGuard(RATE, factor=1, min_s=0.5)
    gen = Generator(model, vocoder=Silent(), runaway=guard, chunk_policy="fixed")  # type: ignore[arg-type]
    gen.submit("r", Req(1, open=True), text_open=True)
    frames = 0
    for _ in range(runaway_frames(RATE, 1, FRAME_S, 1, 0.5) - 2):  # type: ignore[operator]
        frames += sum(e.frames for e in gen.step())
    more = "ten more words of text come in while it speaks"
    gen.extend("r", more, done=True)
    events = []
    while gen.num_active:
        events += gen.step()
    assert events[-1].finish_reason == "length"
    assert events[-1].usage.output_tokens == runaway_frames(RATE, 1 + len(more.split()), FRAME_S, 1, 0.5) > frames


def test_every_autoregressive_family_has_a_rate_and_the_defaults_are_generous():
    rates = {name: rules.seconds_per_text_token for name, rules in families.RULES.items()}
    assert rates.pop("omnivoice") is None  # its duration estimate fixes the length before it runs
    assert all(r is not None and r > 0 for r in rates.values()), rates
    # ten English words (about 13 tokens) may run for at least 20 s before the guard ends them
    assert DEFAULT_RUNAWAY_MIN_S + DEFAULT_RUNAWAY_FACTOR * min(rates.values()) * 13 >= 20  # type: ignore[type-var]

