"""The exact streaming vocoder's per-stream state and its batched decode, for any family whose
vocoder graph is a pure function `(frames, state[, position]) -> (pcm, new_state)`.

What differs between families is only how a batch of frames becomes the graph's inputs
(`FamilyModel.vocoder_feeds`: Qwen3-TTS codes + position, VoxCPM2 latent frames); the stream
state, the grouping by chunk length and the state update are the same, in-process (OrtVocoder)
and over Triton BLS (ttscore.backend.glue.BlsVocoder).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ttscore.contract.errors import ArtifactError
from ttscore.contract.graphs import STATE_INDEX, STATE_VALUES
from ttscore.runtime.onnx import OnnxGraph

# frames [B, T, ...] (one chunk per stream), state [B, S], position [B] -> the vocoder's inputs
Feeds = Callable[[NDArray[Any], NDArray[np.float32], NDArray[np.int64]], dict[str, NDArray[Any]]]
# the same arguments -> (pcm [B, samples], new_state [B, S])
RunVocoder = Callable[[NDArray[Any], NDArray[np.float32], NDArray[np.int64]], tuple[NDArray[Any], NDArray[Any]]]


@dataclass
class VocoderStream:
    """Per-stream state of the exact streaming vocoder."""

    state: NDArray[Any]
    position: int = 0  # frames already decoded on this stream


def new_stream(state_size: int) -> VocoderStream:
    return VocoderStream(np.zeros(state_size, dtype=np.float32))


def _rows_of_one(states: list[NDArray[Any]]) -> NDArray[np.float32] | None:
    """The states as one [B, S] array without a copy where they already are one: a single state (as [1, S]), or
    the rows 0..B-1, in order, of one float32 array (the last call's output, when the same streams are decoded
    together again); None otherwise."""
    if len(states) == 1:
        return np.asarray(states[0][None], dtype=np.float32)
    base = states[0].base
    if not isinstance(base, np.ndarray) or base.dtype != np.float32 or base.ndim != 2 \
            or base.shape[0] != len(states) or not base.flags.c_contiguous:
        return None
    start, stride = base.ctypes.data, base.strides[0]
    if all(s.base is base and s.ctypes.data == start + r * stride for r, s in enumerate(states)):
        return base
    return None


def length_groups(items: list[tuple[Any, NDArray[Any]]], max_rows: int | None = None) -> list[list[int]]:
    """The indices of `items` ((stream, frames [T, ...]) pairs) grouped by chunk length T, in order, each group at
    most `max_rows` long: one batched vocoder call each."""
    by_len: dict[int, list[int]] = {}
    for i, (_, frames) in enumerate(items):
        by_len.setdefault(int(frames.shape[0]), []).append(i)
    return [g[k : k + (max_rows or len(g))] for g in by_len.values() for k in range(0, len(g), max_rows or len(g))]


def decode_streams(
    items: list[tuple[VocoderStream, NDArray[Any]]],
    run: RunVocoder,
    max_rows: int | None = None,
    owned: bool = False,
) -> list[NDArray[Any]]:
    """Decode each (stream, frames [T, ...]) pair and advance its stream. Streams whose chunks have
    the same length go through one batched `run` (at most `max_rows` rows); returns the PCM per item.
    `owned`: `run`'s new states are arrays of this process's own (ONNX Runtime's outputs), so each
    stream keeps its row as a view instead of a copy, and a group of one feeds its state without a
    stack: a large state is then not copied twice more per call (BLS outputs may live in memory the response
    owns, so those are copied). A state too large to pass through the graph at all: ArenaVocoder."""
    out: list[NDArray[Any]] = [np.zeros(0, np.float32)] * len(items)
    for idx in length_groups(items, max_rows):
        states = [items[i][0].state for i in idx]
        batch = _rows_of_one(states) if owned else None
        pcm, state = run(
            np.stack([items[i][1] for i in idx]),
            np.stack(states).astype(np.float32, copy=False) if batch is None else batch,
            np.array([items[i][0].position for i in idx], dtype=np.int64),
        )
        for row, i in enumerate(idx):
            stream, frames = items[i]
            stream.state = np.asarray(state[row], dtype=np.float32) if owned else np.array(state[row], dtype=np.float32)
            stream.position += int(frames.shape[0])
            out[i] = np.array(pcm[row], dtype=np.float32)
    return out


class OrtVocoder:
    """The vocoder graph run in-process; streams with equal chunk lengths are batched."""

    def __init__(self, graph: OnnxGraph, state_size: int, feeds: Feeds) -> None:
        self.graph = graph
        self.state_size = state_size
        self.feeds = feeds

    def new_stream(self) -> VocoderStream:
        return new_stream(self.state_size)

    def _run(self, frames: NDArray[Any], state: NDArray[np.float32], position: NDArray[np.int64]) -> tuple[NDArray[Any], NDArray[Any]]:
        res = self.graph.run(self.feeds(frames, state, position))
        return res["pcm"], res["new_state"]

    def decode(self, items: list[tuple[VocoderStream, NDArray[Any]]]) -> list[NDArray[Any]]:
        return decode_streams(items, self._run, owned=True)


# --- a vocoder whose state stays in this process (ttscore.contract.graphs.arena_vocoder_spec) ---------------------

# (frames [B, T, ...], the arena [R, S], rows [B], position [B]) -> the vocoder's inputs
ArenaFeeds = Callable[[NDArray[Any], NDArray[np.float32], NDArray[np.int64], NDArray[np.int64]], dict[str, NDArray[Any]]]


def write_updates(arena: NDArray[np.float32], rows: NDArray[np.int64], index: NDArray[Any], values: NDArray[Any]) -> None:
    """Write a call's `state_values` [B, U, W] at `state_index` [B, U] of the arena's `rows` [B], each row viewed as
    [S / W, W] blocks, in place (one memcpy of W floats per block)."""
    width = values.shape[2]
    blocks = arena.reshape(arena.shape[0], arena.shape[1] // width, width)
    blocks[np.asarray(rows, np.int64)[:, None], np.asarray(index, np.int64)] = values


class StateArena:
    """Every stream's state as a row of one float32 array [rows, S]: a graph takes the whole array (ONNX Runtime
    reads it in place) with the rows it decodes. Rows are taken by streams and given back when a stream is
    dropped; a row comes back zeroed (a stream starts from zeros); the array doubles when every row is taken
    (rows keep their numbers). np.zeros pages are touched only as rows are used."""

    def __init__(self, size: int, rows: int = 8) -> None:
        self.size = size
        self.data: NDArray[np.float32] = np.zeros((rows, size), np.float32)
        self._free = list(range(rows - 1, -1, -1))
        self._dirty: set[int] = set()

    @property
    def rows(self) -> int:
        return int(self.data.shape[0])

    @property
    def taken(self) -> int:
        return self.rows - len(self._free)

    def take(self) -> int:
        if not self._free:
            n = self.rows
            grown = np.zeros((2 * n, self.size), np.float32)
            grown[:n] = self.data
            self.data = grown
            self._free = list(range(2 * n - 1, n - 1, -1))
        row = self._free.pop()
        if row in self._dirty:
            self.data[row] = 0.0
            self._dirty.discard(row)
        return row

    def give(self, row: int) -> None:
        self._dirty.add(row)
        self._free.append(row)


@dataclass
class ArenaStream:
    """One stream of an ArenaVocoder: its arena row (given back when the stream is dropped)."""

    row: int
    position: int = 0  # frames already decoded on this stream


class ArenaVocoder:
    """An arena vocoder graph (ttscore.contract.graphs.arena_vocoder_spec) run in-process: streams with equal chunk
    lengths are batched; each call reads the arena in place and its updates are written back in place."""

    external = False

    def __init__(self, graph: OnnxGraph, state_size: int, feeds: ArenaFeeds, rows: int = 8) -> None:
        missing = {STATE_INDEX, STATE_VALUES} - set(graph.output_names)
        if missing:
            raise ArtifactError(f"{graph.path}: a vocoder that returns its whole state (no {sorted(missing)}), "
                                "made by an older export: re-export")
        self.graph = graph
        self.state_size = state_size
        self.feeds = feeds
        self.arena = StateArena(state_size, rows)

    def new_stream(self) -> ArenaStream:
        stream = ArenaStream(self.arena.take())
        weakref.finalize(stream, self.arena.give, stream.row)
        return stream

    def decode(self, items: list[tuple[ArenaStream, NDArray[Any]]]) -> list[NDArray[Any]]:
        out: list[NDArray[Any]] = [np.zeros(0, np.float32)] * len(items)
        for idx in length_groups(items):
            rows = np.array([items[i][0].row for i in idx], np.int64)
            res = self.graph.run(self.feeds(np.stack([items[i][1] for i in idx]), self.arena.data, rows,
                                            np.array([items[i][0].position for i in idx], np.int64)))
            write_updates(self.arena.data, rows, res[STATE_INDEX], res[STATE_VALUES])
            for r, i in enumerate(idx):
                stream, frames = items[i]
                stream.position += int(frames.shape[0])
                out[i] = np.array(res["pcm"][r], dtype=np.float32)
        return out
