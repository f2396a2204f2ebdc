"""decode_streams with `owned` states (the in-process vocoder): streams keep views of the graph's output and are fed
it again without a stack; every stream's state and position stay what a copy-everything decode gives, whatever the
grouping (all together, reordered, a subset, one alone)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ttscore.runtime.vocoder import decode_streams, new_stream


def _run(frames: np.ndarray, state: np.ndarray, position: np.ndarray) -> tuple[Any, Any]:
    return frames.reshape(frames.shape[0], -1).astype(np.float32), (state * 2 + position[:, None] + 1).astype(np.float32)


def test_owned_states_equal_copied_ones() -> None:
    got = [new_stream(3) for _ in range(3)]
    want = [new_stream(3) for _ in range(3)]
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g.state, w.state = np.full(3, float(i), np.float32), np.full(3, float(i), np.float32)
    for order in ([0, 1, 2], [0, 1, 2], [2, 0, 1], [1, 2], [0], [0, 1, 2], [1, 0, 2]):
        pcm = decode_streams([(got[i], np.full((1, 2), i)) for i in order], _run, owned=True)
        ref = decode_streams([(want[i], np.full((1, 2), i)) for i in order], _run)
        for a, b in zip(pcm, ref, strict=True):
            assert np.array_equal(a, b)
    for g, w in zip(got, want, strict=True):
        assert np.array_equal(g.state, w.state) and g.position == w.position


def test_streams_decoded_together_again_are_fed_without_a_stack() -> None:
    fed: list[np.ndarray] = []
    made: list[np.ndarray] = []

    def run(frames: np.ndarray, state: np.ndarray, position: np.ndarray) -> tuple[Any, Any]:
        fed.append(state)
        pcm, new = _run(frames, state, position)
        made.append(new)
        return pcm, new

    streams = [new_stream(4) for _ in range(3)]
    for _ in range(3):
        decode_streams([(s, np.zeros((1, 1))) for s in streams], run, owned=True)
    assert fed[1] is made[0] and fed[2] is made[1]  # the last output itself, not a stack of its rows
    decode_streams([(s, np.zeros((1, 1))) for s in streams[::-1]], run, owned=True)
    assert fed[3] is not made[2] and np.array_equal(fed[3], made[2][::-1])  # reordered: stacked
