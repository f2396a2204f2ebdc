"""Fish Speech's frame loop, over any Slow AR / Fast AR step (the exported graphs, or their torch modules in
the export's checks), with the sampling noise given.

Per frame (vLLM-Omni's order): the Slow AR's hidden state h of the last position gives the masked logits and
the semantic token y (`<|im_end|>` ends the utterance, no frame); the Fast AR runs [project(h),
fast_embedding(y - semantic_start)] and then each sampled residual code's embedding, 9 codes in turn; the frame
is (y - semantic_start, the 9 codes) and the Slow AR's next input is (embedding(y) + sum_i
codebook_embedding(code_i + 4096 i)) / sqrt(11). At most `max_new_tokens` frames.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ttscore.contract import fish_speech as spec
from ttscore.runtime.families.fish_speech.sampling import sample_fast, sample_slow

F32 = NDArray[np.float32]
# (inputs_embeds [1, T, D], position of its first row, past) -> (hidden [D], logits [codebook_size + 1], past)
SlowFn = Callable[[F32, int, Any], tuple[F32, F32, Any]]
# (inputs_embeds [1, T, Df], position of its first row, past) -> (logits [1024], past); past None starts a frame
FastFn = Callable[[F32, int, Any], tuple[F32, Any]]


@dataclass(frozen=True)
class Tables:
    embeddings: F32  # the text embedding [V, D]
    codebook_embeddings: F32  # [codebook_size * num_codebooks, D]
    fast_embeddings: F32  # [fast vocab, Df]
    project_in: tuple[F32, F32] | None  # fast_project_in (weight [Df, D], bias [Df]) when the widths differ
    semantic_start: int
    codebook_size: int
    num_codebooks: int


@dataclass(frozen=True)
class Knobs:
    temperature: float
    top_k: int
    top_p: float


@dataclass
class Result:
    codes: NDArray[np.int64]  # [frames, num_codebooks]
    stopped: bool
    hidden: F32  # [frames, D]: the Slow AR state each frame's token was sampled from


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


def fast_codes(t: Tables, fast: FastFn, h: F32, code0: int, q: F32) -> NDArray[np.int64]:
    """The frame's 10 codes: code0 and 9 residual codes sampled in turn (q [9, 1024]) at the Fast AR's fixed
    sampling (vLLM-Omni's)."""
    first = h if t.project_in is None else (t.project_in[0] @ h + t.project_in[1]).astype(np.float32)
    x = np.stack([first, t.fast_embeddings[code0]])[None].astype(np.float32)
    codes = [code0]
    past, pos = None, 0
    for j in range(t.num_codebooks - 1):
        logits, past = fast(x, pos, past)
        pos += x.shape[1]
        c = sample_fast(logits, *spec.FAST_AR_SAMPLING, q[j])  # extra_params reach the Slow AR only
        codes.append(c)
        x = t.fast_embeddings[c][None, None].astype(np.float32)
    return np.array(codes, np.int64)


def generate(t: Tables, slow: SlowFn, fast: FastFn, prompt: F32, max_new_tokens: int, knobs: Knobs,
             q_slow: F32, q_fast: F32) -> Result:
    """q_slow [max_new_tokens, codebook_size + 1], q_fast [max_new_tokens, 9, 1024]."""
    frames, hiddens = [], []
    x, pos, past = prompt[None], 0, None
    stopped = False
    for step in range(max_new_tokens):
        h, logits, past = slow(x, pos, past)
        pos += x.shape[1]
        y = sample_slow(logits, knobs.temperature, knobs.top_k, knobs.top_p, q_slow[step])
        if y == t.codebook_size:  # the last candidate: <|im_end|>
            stopped = True
            break
        codes = fast_codes(t, fast, h, y, q_fast[step])
        frames.append(codes)
        hiddens.append(h)
        x = frame_embedding(t, codes)[None, None]
    d = t.embeddings.shape[1]
    return Result(np.array(frames, np.int64).reshape(-1, t.num_codebooks), stopped,
                  np.array(hiddens, np.float32).reshape(-1, d))
