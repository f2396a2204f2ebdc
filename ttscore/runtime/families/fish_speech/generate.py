"""Fish Speech's frame loop's tables and embeddings (the loop: model.py under the shared engine; the checks run it
over the graphs or the torch modules one request at a time, tests/fish_speech_loop.py).

Per frame (vLLM-Omni's order): the Slow AR's hidden state h of the last position gives the masked logits and
the semantic token y (`<|im_end|>` ends the utterance, no frame); the Fast AR runs [project(h),
fast_embedding(y - semantic_start)] and then each sampled residual code's embedding, 9 codes in turn; the frame
is (y - semantic_start, the 9 codes) and the Slow AR's next input is (embedding(y) + sum_i
codebook_embedding(code_i + 4096 i)) / sqrt(11). At most `max_new_tokens` frames.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

F32 = NDArray[np.float32]


@dataclass(frozen=True)
class Tables:
    embeddings: F32  # the text embedding [V, D]
    codebook_embeddings: F32  # [codebook_size * num_codebooks, D]
    fast_embeddings: F32  # [fast vocab, Df]
    project_in: tuple[F32, F32] | None  # fast_project_in (weight [Df, D], bias [Df]) when the widths differ
    semantic_start: int
    codebook_size: int
    num_codebooks: int


def frame_embedding(t: Tables, codes: NDArray[np.int64]) -> F32:
    """The Slow AR input of a frame whose semantic code is codes[0]: token embedding plus the codebook rows,
    over sqrt(num_codebooks + 1)."""
    clamped = np.clip(codes, 0, t.codebook_size - 1) + np.arange(t.num_codebooks) * t.codebook_size
    row = t.embeddings[t.semantic_start + int(codes[0])] + t.codebook_embeddings[clamped].sum(0)
    out: F32 = (row / np.float32(math.sqrt(t.num_codebooks + 1))).astype(np.float32)
    return out


def prompt_embeddings(t: Tables, ids: list[int], ref_codes: NDArray[np.int64] | None, ref_at: int) -> F32:
    """The prompt's rows; with reference codes [frames, 10], the rows from `ref_at` on (the reference's
    semantic tokens) get their codebook rows added, over sqrt(11) (vLLM-Omni's _apply_codebook_embeddings)."""
    x: F32 = t.embeddings[np.asarray(ids)].astype(np.float32)
    if ref_codes is not None and len(ref_codes):
        n = len(ref_codes)
        off = np.clip(ref_codes, 0, None) + np.arange(t.num_codebooks) * t.codebook_size
        x[ref_at:ref_at + n] = (x[ref_at:ref_at + n] + t.codebook_embeddings[off].sum(1)) / np.float32(
            math.sqrt(t.num_codebooks + 1))
    return x
