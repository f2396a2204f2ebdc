"""The family-agnostic engine's schedule, with a fake family (no model): batched prefill under a
token budget, first chunk straight out of prefill, the chunk policies (no underrun after the first
chunk for a stream produced faster than real time), KV slots released on every exit."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from ttscore.runtime.engine import Generator
from ttscore.runtime.family import Sequence

SPF = 4  # samples per frame of the fake vocoder
FRAME_S = 0.08


@dataclass
class Req:
    prompt: int  # prompt positions
    frames: int  # frames to generate
    initial: int = 1
    chunk: int = 25


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeFamily:
    """Every step costs `step_s` of fake time; prefill `prefill_s`."""

    def __init__(self, clock: FakeClock, step_s: float = 0.01, prefill_s: float = 0.01) -> None:
        self.clock, self.step_s, self.prefill_s = clock, step_s, prefill_s
        self.prefill_calls: list[list[tuple[int, int]]] = []
        self.step_batches: list[int] = []
        self.released: list[int] = []
        self.slots: set[int] = set()
        self._ids = 0

    vocoder = None
    num_codebooks = 2
    frame_seconds = FRAME_S

    def admit(self, request: Req) -> Sequence:
        seq = Sequence(initial_chunk_frames=request.initial, chunk_frames=request.chunk, text_tokens=1,
                       prompt_tokens=request.prompt)
        self._ids += 1
        seq.ident = self._ids  # type: ignore[attr-defined]
        seq.limit = request.frames  # type: ignore[attr-defined]
        return seq

    def _frame(self, seq: Sequence) -> None:
        seq.pending.append(np.full(2, seq.frames_out, np.int64))
        seq.frames_out += 1
        if seq.frames_out >= seq.limit:  # type: ignore[attr-defined]
            seq.finished = "length"

    def prefill(self, work: list[tuple[Sequence, int]]) -> None:
        self.clock.now += self.prefill_s
        self.prefill_calls.append([(s.ident, n) for s, n in work])  # type: ignore[attr-defined]
        for seq, n in work:
            self.slots.add(seq.ident)  # type: ignore[attr-defined]
            seq.prefilled += n
            if seq.prefilled == seq.prompt_tokens:
                self._frame(seq)

    def step(self, batch: list[Sequence]) -> None:
        self.clock.now += self.step_s
        self.step_batches.append(len(batch))
        for seq in batch:
            self._frame(seq)

    def release(self, seq: Sequence) -> None:
        self.released.append(seq.ident)  # type: ignore[attr-defined]
        self.slots.discard(seq.ident)  # type: ignore[attr-defined]

    def memory(self) -> dict[str, int]:
        return {}


class FakeVocoder:
    def __init__(self) -> None:
        self.calls: list[list[int]] = []

    def new_stream(self) -> Any:
        return {"frames": 0}

    def decode(self, items: list[tuple[Any, np.ndarray]]) -> list[np.ndarray]:
        self.calls.append([int(c.shape[0]) for _, c in items])
        out = []
        for stream, codes in items:
            # The sample values carry the frame index, so the test can check the concatenation.
            out.append(np.repeat(codes[:, 0].astype(np.float32), SPF))
            stream["frames"] += codes.shape[0]
        return out


def make(policy: str = "adaptive", budget: int = 256, step_s: float = 0.01, overlap: bool = False,
         vocoder: Any = None) -> tuple[Generator, FakeFamily, FakeClock]:
    clock = FakeClock()
    fam = FakeFamily(clock, step_s=step_s)
    gen = Generator(fam, max_batch=8, vocoder=vocoder or FakeVocoder(), chunk_policy=policy,  # type: ignore[arg-type]
                    prefill_budget=budget, clock=clock, overlap_vocoder=overlap)
    return gen, fam, clock


def run(gen: Generator, clock: FakeClock) -> dict[str, list[tuple[float, int, bool, np.ndarray]]]:
    got: dict[str, list[tuple[float, int, bool, np.ndarray]]] = {}
    while gen.num_active:
        for ev in gen.step():
            got.setdefault(ev.req_id, []).append((clock.now, ev.frames, ev.final, ev.pcm))
    return got


def test_burst_of_joins_is_one_prefill_call_then_one_batched_step() -> None:
    gen, fam, clock = make()
    for i in range(5):
        gen.submit(f"r{i}", Req(prompt=10, frames=3))
    assert fam.prefill_calls == []  # submit only validates: no model call
    events = gen.step()
    assert fam.prefill_calls == [[(i + 1, 10) for i in range(5)]]
    assert fam.step_batches == [5]
    # Every first chunk came out of this one step: made by the prefill, vocoded before the decode.
    firsts = [ev for ev in events if ev.frames == 1 and ev.pcm[0] == 0]
    assert len(firsts) == 5
    run(gen, clock)
    assert sorted(fam.released) == [1, 2, 3, 4, 5] and not fam.slots


def test_budget_splits_long_prompts_fifo_and_bounds_each_step() -> None:
    gen, fam, clock = make(budget=8)
    gen.submit("long", Req(prompt=20, frames=2))
    gen.submit("short", Req(prompt=3, frames=2))
    run(gen, clock)
    assert fam.prefill_calls == [[(1, 8)], [(1, 8)], [(1, 4), (2, 3)]]
    assert all(sum(n for _, n in call) <= 8 for call in fam.prefill_calls)


def test_running_streams_keep_stepping_while_others_prefill() -> None:
    gen, fam, clock = make(budget=4)
    gen.submit("a", Req(prompt=2, frames=10))
    gen.step()
    gen.submit("b", Req(prompt=12, frames=2))
    gen.step()
    gen.step()
    assert fam.step_batches[:3] == [1, 1, 1]  # a advanced in every step while b prefilled in chunks
    assert fam.prefill_calls[1:3] == [[(2, 4)], [(2, 4)]]


@pytest.mark.parametrize(
    ("policy", "sizes"),
    [("fixed", [1, 5, 5, 5, 4]), ("ramp", [1, 2, 4, 5, 5, 3])],
)
@pytest.mark.parametrize("overlap", [False, True])
def test_fixed_and_ramp_chunk_sizes(policy: str, sizes: list[int], overlap: bool) -> None:
    gen, fam, clock = make(policy, overlap=overlap)
    gen.submit("a", Req(prompt=3, frames=20, chunk=5))
    got = run(gen, clock)["a"]
    assert [n for _, n, _, _ in got] == sizes
    assert [f for _, _, f, _ in got] == [False] * (len(sizes) - 1) + [True]


def underruns(chunks: list[tuple[float, int, bool, np.ndarray]]) -> int:
    """perf_analyzer summary's rule: a chunk arriving after everything before it has played."""
    t0, played, late = chunks[0][0], 0.0, 0
    for i in range(1, len(chunks)):
        played += chunks[i - 1][1] * FRAME_S
        late += chunks[i][0] - t0 > played + 1e-9
    return late


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("rtf", [0.3, 0.7, 0.95])
def test_adaptive_never_underruns_faster_than_real_time(rtf: float, overlap: bool) -> None:
    gen, fam, clock = make("adaptive", step_s=rtf * FRAME_S, overlap=overlap)
    gen.submit("a", Req(prompt=3, frames=120, chunk=25))
    got = run(gen, clock)["a"]
    assert underruns(got) == 0
    assert sum(n for _, n, _, _ in got) == 120
    # The audio is the frames in order whatever the schedule (the fake vocoder writes frame indices).
    pcm = np.concatenate([c[3] for c in got])
    np.testing.assert_array_equal(pcm, np.repeat(np.arange(120, dtype=np.float32), SPF))
    if rtf <= 0.7:  # chunks grow with the playback buffer
        assert max(n for _, n, _, _ in got) > 1


@pytest.mark.parametrize("overlap", [False, True])
def test_adaptive_behind_real_time_grows_chunks_as_ramp(overlap: bool) -> None:
    """Slower than real time (overload), no schedule avoids underruns: adaptive then sends ramp's sizes, not a chunk
    per frame (each vocoder call has a fixed cost that would slow the whole batch further)."""
    gen, fam, clock = make("adaptive", step_s=1.5 * FRAME_S, overlap=overlap)
    gen.submit("a", Req(prompt=3, frames=40, initial=2, chunk=12))
    got = run(gen, clock)["a"]
    assert [n for _, n, _, _ in got] == [2, 1, 8, 12, 12, 5]  # (1: the first chunk still playing)
    pcm = np.concatenate([c[3] for c in got])
    np.testing.assert_array_equal(pcm, np.repeat(np.arange(40, dtype=np.float32), SPF))


def test_fixed_policy_underruns_where_adaptive_does_not() -> None:
    gen, fam, clock = make("fixed", step_s=0.7 * FRAME_S)
    gen.submit("a", Req(prompt=3, frames=60, chunk=25))
    assert underruns(run(gen, clock)["a"]) > 0


def test_cancel_and_finish_release_the_slot() -> None:
    gen, fam, clock = make()
    gen.submit("a", Req(prompt=3, frames=50))
    gen.submit("b", Req(prompt=3, frames=1))
    gen.step()
    assert gen.cancel("a")
    assert sorted(fam.released) == [1, 2] and not fam.slots  # b finished inside its prefill step
    assert not gen.cancel("a")


def test_bad_policy_and_budget_are_refused() -> None:
    with pytest.raises(ValueError, match="chunk_policy"):
        Generator(FakeFamily(FakeClock()), vocoder=FakeVocoder(), chunk_policy="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="prefill_budget"):
        Generator(FakeFamily(FakeClock()), vocoder=FakeVocoder(), prefill_budget=0)  # type: ignore[arg-type]


def test_first_chunks_are_emitted_before_the_decode_call() -> None:
    gen, fam, clock = make()
    gen.submit("a", Req(prompt=3, frames=4))
    gen.step()
    gen.submit("b", Req(prompt=3, frames=4))
    seen: list[tuple[str, int]] = []
    returned = gen.step(emit=lambda evs: seen.extend((ev.req_id, len(fam.step_batches)) for ev in evs))
    assert seen == [("b", 1)]  # b's first chunk left while only the previous step had decoded
    assert fam.step_batches == [1, 2] and all(ev.req_id != "b" or ev.frames > 1 or ev.pcm[0] != 0 for ev in returned)


class TimedVocoder(FakeVocoder):
    """Notes on which thread and when each decode runs; decodes take 50 ms of real time, the family's steps 100 ms,
    and their intervals are noted too."""

    def __init__(self, fam: FakeFamily) -> None:
        super().__init__()
        self.runs: list[tuple[str, float, float]] = []
        self.steps: list[tuple[float, float]] = []
        step = fam.step

        def slow(batch: list[Sequence]) -> None:
            t0 = time.perf_counter()
            time.sleep(0.1)
            step(batch)
            self.steps.append((t0, time.perf_counter()))
        fam.step = slow  # type: ignore[method-assign]

    def decode(self, items: list[tuple[Any, np.ndarray]]) -> list[np.ndarray]:
        t0 = time.perf_counter()
        time.sleep(0.05)
        out = super().decode(items)
        self.runs.append((threading.current_thread().name, t0, time.perf_counter()))
        return out


def test_overlap_decodes_later_chunks_beside_the_model_step_and_first_chunks_at_once() -> None:
    """vocoder_overlap: a stream's first chunk leaves in the step that made it; later ones are decoded on the worker
    thread while the next model step runs and leave at its end, the same chunks and audio as without overlap."""
    plain, _, plain_clock = make("fixed")
    plain.submit("a", Req(prompt=3, frames=12, initial=2, chunk=3))
    want = run(plain, plain_clock)["a"]
    clock = FakeClock()
    fam = FakeFamily(clock)
    voc = TimedVocoder(fam)
    gen = Generator(fam, max_batch=8, vocoder=voc, chunk_policy="fixed", clock=clock,  # type: ignore[arg-type]
                    overlap_vocoder=True)
    gen.submit("a", Req(prompt=3, frames=12, initial=2, chunk=3))
    got: list[tuple[int, int, bool, np.ndarray]] = []
    step = 0
    while gen.num_active:
        step += 1
        got += [(step, ev.frames, ev.final, ev.pcm) for ev in gen.step()]
    assert [(n, f) for _, n, f, _ in got] == [(n, f) for _, n, f, _ in want]
    np.testing.assert_array_equal(np.concatenate([c[3] for c in got]), np.concatenate([c[3] for c in want]))
    assert got[0][0] == 1  # frames 1-2: the prefill's and the first step's, out at once
    # frames 3-5 are made in steps 2-4, 6-8 in 5-7, 9-11 in 8-10: each chunk leaves one step after its last frame;
    # the final frame (step 11) leaves in a step with no model step to overlap, at once
    assert [s for s, _, _, _ in got[1:]] == [5, 8, 11, 12]
    main = threading.main_thread().name
    assert voc.runs[0][0] == main and all(name != main for name, _, _ in voc.runs[1:-1])
    for _, t0, t1 in voc.runs[1:-1]:  # each later decode ran while a model step was running
        assert any(max(a, t0) < min(b, t1) for a, b in voc.steps)
