"""The exact streaming vocoder's per-stream state and its batched decode, for any family whose
vocoder graph is a pure function `(frames, state[, position]) -> (pcm, new_state)`.

What differs between families is only how a batch of frames becomes the graph's inputs
(`FamilyModel.vocoder_feeds`: Qwen3-TTS codes + position, VoxCPM2 latent frames); the stream
state, the grouping by chunk length and the state update are the same, in-process (OrtVocoder)
and over Triton BLS (ttscore.backend.glue.BlsVocoder).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

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
    stack: a large state (MOSS-TTS-Nano's codec windows, 46 MB a stream) is then not copied twice
    more per call (BLS outputs may live in memory the response owns, so those are copied)."""
    out: list[NDArray[Any]] = [np.zeros(0, np.float32)] * len(items)
    by_len: dict[int, list[int]] = {}
    for i, (_, frames) in enumerate(items):
        by_len.setdefault(int(frames.shape[0]), []).append(i)
    groups = [g[k : k + (max_rows or len(g))] for g in by_len.values() for k in range(0, len(g), max_rows or len(g))]
    for idx in groups:
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
