"""One decoder step of a batch of sequences with pasts of different lengths, over a graph with an explicit past
(ttscore.contract.kv names): the ragged rows' K/V, mask and positions as feeds, and each sequence's K/V after
the step. Every K/V family but Qwen3-TTS (its preallocated KVArena) and VoxCPM2 (ragged new positions too)
steps through these."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ttscore.contract.kv import new_key, new_value, past_key, past_value

F32 = npt.NDArray[np.float32]


def ragged_step_feeds(kvs: Sequence[Sequence[F32]], t: int, layers: int, kv_heads: int, head_dim: int, *,
                      left: bool = True) -> dict[str, npt.NDArray[Any]]:
    """The K/V inputs of a step that adds `t` positions to every row. `kvs[r]`: row r's past, per layer its key
    and value [kv_heads, length, head_dim] (empty: no past). Returns past_key_<i>/past_value_<i> [B, kv_heads,
    pmax, head_dim] (each row's past at the right end, `left` padded, else at the left), attention_mask
    [B, pmax + t] (1 on the valid past slots and the new positions) and position_ids [B, t] (each row's new
    positions after its own past)."""
    b = len(kvs)
    past_len = [kv[0].shape[1] if kv else 0 for kv in kvs]
    pmax = max(past_len)
    mask = np.zeros((b, pmax + t), np.int64)
    mask[:, pmax:] = 1
    for r, n in enumerate(past_len):
        if left:
            mask[r, pmax - n:pmax] = 1
        else:
            mask[r, :n] = 1
    feeds: dict[str, npt.NDArray[Any]] = {
        "attention_mask": mask,
        "position_ids": (np.array(past_len, np.int64)[:, None] + np.arange(t)[None]).astype(np.int64),
    }
    for i in range(layers):
        for j, name in ((0, past_key(i)), (1, past_value(i))):
            buf = np.zeros((b, kv_heads, pmax, head_dim), np.float32)
            for r, kv in enumerate(kvs):
                if kv:
                    if left:
                        buf[r, :, pmax - past_len[r]:] = kv[2 * i + j]
                    else:
                        buf[r, :, :past_len[r]] = kv[2 * i + j]
            feeds[name] = buf
    return feeds


def appended(kv: Sequence[F32], out: Mapping[str, npt.NDArray[Any]], row: int, layers: int) -> list[F32]:
    """A sequence's K/V after a step: its past (empty: none) with row `row` of the step's new_key_<i> /
    new_value_<i> appended on the length axis."""
    new = [out[new_key(i) if j == 0 else new_value(i)][row] for i in range(layers) for j in (0, 1)]
    return [np.concatenate([a, n], axis=1) for a, n in zip(kv, new, strict=True)] if kv else new
