"""The exact streaming vocoder's per-stream state and its batched decode (any family with a
`(codes, state, position) -> (pcm, new_state)` vocoder graph)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ttscore.runtime.onnx import OnnxGraph


@dataclass
class VocoderStream:
    """Per-stream state of the exact streaming vocoder."""

    state: NDArray[Any]
    position: int = 0


def decode_streams(
    items: list[tuple[VocoderStream, NDArray[Any]]],
    run: Any,
    max_rows: int | None = None,
) -> list[NDArray[Any]]:
    """Decode each (stream, codes [T, G]) pair and advance its stream. Streams whose chunks have the
    same length go through one batched call (at most `max_rows` rows) `run(codes [B,T,G],
    state [B,S], position [B]) -> (pcm [B, T*spf], new_state [B, S])`; returns the PCM per item."""
    out: list[NDArray[Any]] = [np.zeros(0, np.float32)] * len(items)
    by_len: dict[int, list[int]] = {}
    for i, (_, codes) in enumerate(items):
        by_len.setdefault(int(codes.shape[0]), []).append(i)
    groups = [g[k : k + (max_rows or len(g))] for g in by_len.values() for k in range(0, len(g), max_rows or len(g))]
    for idx in groups:
        pcm, state = run(
            np.stack([items[i][1] for i in idx]).astype(np.int64),
            np.stack([items[i][0].state for i in idx]).astype(np.float32),
            np.array([items[i][0].position for i in idx], dtype=np.int64),
        )
        for row, i in enumerate(idx):
            stream, codes = items[i]
            stream.state = np.array(state[row], dtype=np.float32)
            stream.position += int(codes.shape[0])
            out[i] = np.array(pcm[row], dtype=np.float32)
    return out


class OrtVocoder:
    """code2wav_stream run in-process; requests with equal chunk lengths are batched."""

    def __init__(self, graph: OnnxGraph, state_size: int, samples_per_frame: int) -> None:
        self.graph = graph
        self.state_size = state_size
        self.samples_per_frame = samples_per_frame

    def new_stream(self) -> VocoderStream:
        return VocoderStream(np.zeros(self.state_size, dtype=np.float32))

    def _run(self, codes: NDArray[Any], state: NDArray[Any], position: NDArray[Any]) -> tuple[NDArray[Any], NDArray[Any]]:
        res = self.graph.run({"codes": codes, "state": state, "position": position})
        return res["pcm"], res["new_state"]

    def decode(self, items: list[tuple[VocoderStream, NDArray[Any]]]) -> list[NDArray[Any]]:
        return decode_streams(items, self._run)
