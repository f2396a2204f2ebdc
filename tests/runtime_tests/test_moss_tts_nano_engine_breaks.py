"""The engine's `Sequence.breaks` (what MOSS-TTS-Nano's text chunks use), with a fake family and vocoder: after the
n-th frame the vocoder stream ends, the pause's silence follows and a new stream starts at position 0, wherever
the break falls (inside a chunk of audio, at its start, twice at one frame), whatever the chunk schedule; the
audio equals each part decoded alone with the pauses between."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from ttscore.runtime.engine import Generator
from ttscore.runtime.family import Sequence

pytestmark = pytest.mark.unit
SPF = 3


class Stream:
    def __init__(self) -> None:
        self.position = 0


class FakeVocoder:
    """pcm of a frame: SPF samples of (frame value * 10 + its position on its stream)."""

    def new_stream(self) -> Stream:
        return Stream()

    def decode(self, items: list[tuple[Stream, np.ndarray]]) -> list[np.ndarray]:
        out = []
        for stream, frames in items:
            pos = stream.position + np.arange(len(frames))
            out.append(np.repeat(frames[:, 0] * 10.0 + pos, SPF).astype(np.float32))
            stream.position += len(frames)
        return out


class FakeFamily:
    """Makes `frames` frames (value: the frame's index) and declares `breaks` up front."""

    vocoder = FakeVocoder()
    num_codebooks = 1
    frame_seconds = 0.08

    def admit(self, request: tuple[int, dict[int, int], int]) -> Sequence:
        frames, breaks, initial = request
        seq = Sequence(initial_chunk_frames=initial, chunk_frames=3, text_tokens=1, prompt_tokens=1)
        seq.breaks = dict(breaks)
        seq.limit = frames  # type: ignore[attr-defined]
        return seq

    def _frame(self, seq: Sequence) -> None:
        seq.pending.append(np.array([seq.frames_out], np.int64))
        seq.frames_out += 1
        if seq.frames_out >= seq.limit:  # type: ignore[attr-defined]
            seq.finished = "stop"

    def prefill(self, work: list[tuple[Sequence, int]]) -> None:
        for seq, n in work:
            seq.prefilled += n
            self._frame(seq)

    def step(self, batch: list[Sequence]) -> None:
        for seq in batch:
            self._frame(seq)

    def release(self, seq: Sequence) -> None:
        pass


def alone(frames: range) -> np.ndarray:
    return np.repeat(np.array(list(frames)) * 10.0 + np.arange(len(frames)), SPF).astype(np.float32)


@pytest.mark.parametrize("policy", ["fixed", "ramp", "adaptive"])
@pytest.mark.parametrize(("frames", "breaks", "initial"), [
    (7, {3: 5}, 1),  # inside a chunk
    (7, {1: 2, 4: 4}, 1),  # at the first chunk's end, then inside
    (6, {2: 1}, 2),  # exactly where the first chunk ends
    (5, {0: 2}, 1),  # before any frame
    (8, {3: 1, 6: 2}, 3),
])
def test_breaks_end_the_stream_add_the_pause_and_start_anew(policy: str, frames: int, breaks: dict[int, int],
                                                            initial: int) -> None:
    model: Any = FakeFamily()
    events = list(Generator(model, max_batch=1, chunk_policy=policy).synthesize((frames, breaks, initial)))
    pcm = np.concatenate([e.pcm for e in events])
    want, start = [], 0
    for at in sorted(breaks):
        want += [alone(range(start, at)), np.zeros(breaks[at], np.float32)]
        start = at
    want.append(alone(range(start, frames)))
    np.testing.assert_array_equal(pcm, np.concatenate(want))
    assert sum(e.frames for e in events) == frames and events[-1].final
