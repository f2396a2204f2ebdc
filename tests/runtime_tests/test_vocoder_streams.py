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


# --- ArenaVocoder: the state stays in this process, updated in place --------------------------------------------


class _ArenaGraph:
    """An arena vocoder graph (ttscore.contract.graphs.arena_vocoder_spec) over 2-float blocks: each call adds
    its frames' sum + 1 to block `position % blocks` of each row it decodes and returns the row's first float per
    frame as pcm, so a stream's audio depends on everything written to its own row."""

    def __init__(self, outputs: tuple[str, ...] = ("pcm", "state_index", "state_values")) -> None:
        self.output_names = list(outputs)
        self.path = "fake.onnx"
        self.calls: list[np.ndarray] = []

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        arena, rows, position, frames = feeds["state"], feeds["row"], feeds["position"], feeds["codes"]
        self.calls.append(rows.copy())
        blocks = arena.shape[1] // 2
        index = (position % blocks)[:, None]
        old = arena.reshape(arena.shape[0], blocks, 2)[rows[:, None], index]  # [B, 1, 2]
        values = old + frames.reshape(len(rows), -1).sum(axis=1)[:, None, None] + 1
        pcm = np.repeat(arena[rows, :1], frames.shape[1], axis=1)
        return {"pcm": pcm.astype(np.float32), "state_index": index, "state_values": values.astype(np.float32)}


def _arena_vocoder(graph: Any, rows: int = 2) -> Any:
    from ttscore.runtime.vocoder import ArenaVocoder

    return ArenaVocoder(graph, 6, lambda f, a, r, p: {"codes": f, "state": a, "row": r, "position": p}, rows=rows)


def test_arena_streams_match_streams_decoded_alone() -> None:
    """Streams decoded together (rows in any order, grouped by chunk length, the arena growing past its first
    rows) equal each decoded alone; a call reads the arena in place and writes only its own rows."""
    chunks = {0: [1, 2, 1, 1], 1: [2, 1, 1, 1], 2: [1, 1, 2, 1], 3: [1, 1, 1, 2]}  # frames per round

    def alone(i: int) -> list[np.ndarray]:
        voc = _arena_vocoder(_ArenaGraph())
        s = voc.new_stream()
        return [voc.decode([(s, np.full((n, 1), i + r, np.int64))])[0] for r, n in enumerate(chunks[i])]

    graph = _ArenaGraph()
    voc = _arena_vocoder(graph)
    streams = [voc.new_stream() for _ in range(4)]  # 4 rows: the arena doubled from 2
    assert sorted(s.row for s in streams) == [0, 1, 2, 3] and voc.arena.rows == 4
    got: list[list[np.ndarray]] = [[] for _ in streams]
    for r in range(4):
        order = [3, 1, 0, 2] if r % 2 else [0, 1, 2, 3]
        pcm = voc.decode([(streams[i], np.full((chunks[i][r], 1), i + r, np.int64)) for i in order])
        for i, p in zip(order, pcm, strict=True):
            got[i].append(p)
    for i in range(4):
        for a, b in zip(got[i], alone(i), strict=True):
            assert np.array_equal(a, b)
    assert all(s.position == 5 for s in streams)
    assert any(len(c) > 1 for c in graph.calls)  # equal chunk lengths went through one call


def test_a_dropped_stream_gives_its_row_back_zeroed() -> None:
    voc = _arena_vocoder(_ArenaGraph(), rows=1)
    s = voc.new_stream()
    voc.decode([(s, np.ones((1, 1), np.int64))])
    row = s.row
    assert voc.arena.data[row].any()
    del s  # the engine drops a finished or cancelled stream
    assert voc.arena.taken == 0
    t = voc.new_stream()
    assert t.row == row and not voc.arena.data[row].any() and t.position == 0


def test_an_arena_vocoder_refuses_a_graph_that_returns_its_whole_state() -> None:
    import pytest

    from ttscore.contract.errors import ArtifactError

    with pytest.raises(ArtifactError, match="re-export"):
        _arena_vocoder(_ArenaGraph(("pcm", "new_state")))
