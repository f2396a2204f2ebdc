"""MOSS-TTS-Nano's samplers over the graphs' logits, in the reference's order and float32 arithmetic (mlx-audio
0.6.2's moss_tts_nano sampling, the official runtime's): one draw each from a fed uniform `u`, so a request's
seed (its own generator) reproduces it whatever it is batched with.

- stop/continue: the two candidate logits (audio_assistant_slot, audio_end), sampled as a code is with top-k
  capped at 2; greedy: argmax (the slot on a tie);
- a code: the repetition penalty over the codes this codebook drew earlier in the text chunk (each distinct code
  once; x < 0 ? x * p : x / p; greedy too), then for sampling temperature, top-k (the k largest kept), top-p (kept
  where the ascending cumulative probability exceeds 1 - p), and one draw.

A draw (`inverse_cdf`): the kept logits' softmax in index order, the first index whose cumulative probability
exceeds `u` times the total. The reference's parity test samples mlx-audio with this same function.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from ttscore.runtime.sampling import log_softmax

F32 = NDArray[np.float32]


def repetition_penalty(logits: NDArray[Any], previous: NDArray[Any], penalty: float) -> F32:
    scores: F32 = np.array(logits, np.float32)
    if penalty == 1.0 or previous.size == 0:
        return scores
    idx = np.unique(np.clip(previous.astype(np.int64), 0, scores.shape[-1] - 1))
    x = scores[idx]
    scores[idx] = np.where(x < 0, x * np.float32(penalty), x / np.float32(penalty))
    return scores


def top_k(scores: F32, k: int) -> F32:
    if k <= 0 or k >= scores.shape[-1]:
        return scores
    keep = np.argsort(-scores, kind="stable")[:k]
    out = np.full_like(scores, -np.inf)
    out[keep] = scores[keep]
    return out


def top_p(scores: F32, p: float) -> F32:
    if p <= 0.0 or p >= 1.0:
        return scores
    probs = np.exp(log_softmax(scores))
    order = np.argsort(scores, kind="stable")  # ascending
    cumulative = np.empty_like(probs)
    cumulative[order] = np.cumsum(probs[order])
    out: F32 = np.where(cumulative > np.float32(1.0 - p), scores, np.float32(-np.inf)).astype(np.float32)
    return out


def inverse_cdf(scores: NDArray[Any], u: float) -> int:
    """One draw from softmax(scores) with the uniform `u` in [0, 1) (index order; -inf never drawn)."""
    s = np.asarray(scores, np.float64)
    p = np.exp(s - np.max(s))
    cdf = np.cumsum(p)
    i = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
    last = int(np.flatnonzero(p > 0)[-1])
    return min(i, last)


def sample_code(logits: NDArray[Any], previous: NDArray[Any], *, do_sample: bool, temperature: float, k: int,
                p: float, penalty: float, u: float) -> int:
    scores = repetition_penalty(logits, previous, penalty)
    if not do_sample:
        return int(np.argmax(scores))
    scores = (scores / np.float32(temperature)).astype(np.float32)
    return inverse_cdf(top_p(top_k(scores, k), p), u)


def continues(text_logits: NDArray[Any], *, do_sample: bool, temperature: float, k: int, p: float, u: float) -> bool:
    """The stop/continue decision over (slot, end) logits: True to make a frame."""
    none = np.zeros(0, np.int64)
    return sample_code(text_logits, none, do_sample=do_sample, temperature=temperature, k=min(k, 2), p=p,
                       penalty=1.0, u=u) == 0


def sample_codes(logits: NDArray[Any], seen: NDArray[Any], *, do_sample: NDArray[Any], temperature: NDArray[Any],
                 k: NDArray[Any], p: NDArray[Any], penalty: NDArray[Any], u: NDArray[Any]) -> NDArray[np.int64]:
    """`sample_code` for a batch of rows at once, row for row the same float32 arithmetic: logits [B, C], `seen`
    [B, C] marks each row's earlier codes, the knobs and uniforms [B] (a greedy row's u unused)."""
    b, c = logits.shape
    scores: F32 = np.array(logits, np.float32)
    pen = np.asarray(penalty, np.float32)
    # (flat indices: numpy's 2-D nonzero costs ~8x a flat one at [8, 1024])
    hits = np.flatnonzero(np.asarray(seen, np.bool_) & (pen != 1.0)[:, None])
    if hits.size:  # only the penalised entries change (elementwise: the same values as over the whole row)
        flat = scores.reshape(-1)
        x, hp = flat[hits], pen[hits // c]
        flat[hits] = np.where(x < 0, x * hp, x / hp)
    sampled = np.asarray(do_sample, np.bool_)
    rows = np.flatnonzero(sampled)
    out: NDArray[np.int64] = (np.zeros(b, np.int64) if rows.size == b
                              else np.argmax(scores, axis=1).astype(np.int64))
    if rows.size == 0:
        return out
    every = rows.size == b
    s: F32 = scores / np.asarray(temperature, np.float32)[:, None] if every else (
        scores[rows] / np.asarray(temperature, np.float32)[rows, None])
    kk = np.asarray(k, np.int64)[rows]
    pp = np.asarray(p, np.float64)[rows]
    uu = np.asarray(u, np.float64)[rows]
    cut = (kk > 0) & (kk < c)
    nucleus = (pp > 0.0) & (pp < 1.0)
    if cut.any():  # top-k (then top-p) on the k kept scores only: the served default (k 25 of 1024)
        at = np.flatnonzero(cut)
        whole = at.size == rows.size
        cols, kept = _top_k_top_p(s if whole else s[at], kk if whole else kk[at], pp if whole else pp[at],
                                  nucleus if whole else nucleus[at])
        out[rows[at]] = np.take_along_axis(cols, _draw(kept, uu if whole else uu[at])[:, None], 1)[:, 0]
    rest = np.flatnonzero(~cut)
    if rest.size:
        part = s[rest]
        if nucleus[rest].any():
            top = np.flatnonzero(nucleus[rest])
            part[top] = _top_p_sorted(part[top], pp[rest][top])
        out[rows[rest]] = _draw(part, uu[rest])
    return out


def _draw(s: F32, u: NDArray[np.float64]) -> NDArray[np.int64]:
    """`inverse_cdf` for rows at once: each row's draw (a column of `s`) with its uniform; -inf never drawn. Columns
    at -inf anywhere in a row add exact zeros to its cumulative sum, so a row cut to its kept scores (in column
    order) draws the same one as the whole row."""
    s64 = s.astype(np.float64)
    weights = np.exp(s64 - np.max(s64, axis=1, keepdims=True))
    cdf = np.cumsum(weights, axis=1)
    idx = np.sum(cdf <= u[:, None] * cdf[:, -1:], axis=1)
    last = s.shape[1] - 1 - np.argmax(weights[:, ::-1] > 0, axis=1)
    drawn: NDArray[np.int64] = np.minimum(idx, last).astype(np.int64)
    return drawn


def _softmax_f32(s: F32) -> F32:
    """The float32 probabilities of rows of scores, as `top_p` computes them (the same operations, whole rows)."""
    shifted = s - np.max(s, axis=1, keepdims=True)
    logp = (shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))).astype(np.float32)
    probs: F32 = np.exp(logp)
    return probs


def _top_p_sorted(s: F32, pp: NDArray[Any]) -> F32:
    """Top-p over whole rows (k off): the ascending cumulative probability by a stable sort of each row."""
    probs = _softmax_f32(s)
    order = np.argsort(s, axis=1, kind="stable")
    cumulative = np.empty_like(probs)
    np.put_along_axis(cumulative, order, np.cumsum(np.take_along_axis(probs, order, 1), axis=1), 1)
    floor = (1.0 - pp).astype(np.float32)[:, None]
    out: F32 = np.where(~(cumulative > floor), np.float32(-np.inf), s).astype(np.float32)
    return out


def _top_k_top_p(s: F32, kk: NDArray[np.int64], pp: NDArray[Any], nucleus: NDArray[np.bool_]
                 ) -> tuple[NDArray[np.int64], F32]:
    """Top-k (0 < k < C) and, where `nucleus`, top-p, as `top_k` then `top_p` decide, sorting only the k kept
    scores of a row: the k largest are those above the k-th largest value and, among those equal to it, the first
    by index (a stable descending sort's); top-p's ascending cumulative sum over a row whose other scores are -inf
    adds their zero probabilities first, so it equals the cumulative sum over the kept ones in ascending (stable)
    order, their probabilities computed over the whole row as `top_p` does. Returns each row's kept columns in
    column order and their scores (-inf where top-p drops one), padded to the widest k with -inf."""
    n, c = s.shape
    kth = np.sort(s, axis=1)[np.arange(n), c - kk]  # the k-th largest score (a whole sort beats a partition here)
    above = s > kth[:, None]
    tie = s == kth[:, None]
    n_above = above.sum(axis=1)
    kept = above | tie
    if np.any(n_above + tie.sum(axis=1) > kk):  # more ties at the k-th value than places: the first by index
        kept = above | (tie & (np.cumsum(tie, axis=1) <= (kk - n_above)[:, None]))
    width = int(kk.max())
    r, col = np.divmod(np.flatnonzero(kept), c)  # row-major: each row's kept columns in column order
    starts = np.repeat(np.cumsum(kk) - kk, kk)
    slot = np.arange(r.size) - starts  # each kept column's place among its row's
    cols = np.zeros((n, width), np.int64)
    vals = np.full((n, width), -np.inf, np.float32)
    cols[r, slot], vals[r, slot] = col, s[r, col]
    if not nucleus.any():
        return cols, vals
    # `_softmax_f32` of the row with every other score -inf, computed where it is not 0: the maximum is the kept
    # one's, the sum is over the whole row (the same values in the same places: the same pairwise sum)
    top = np.max(vals, axis=1, keepdims=True)
    shifted = s[r, col] - top[r, 0]
    spread = np.zeros((n, c), np.float32)
    spread[r, col] = np.exp(shifted)
    logp = (shifted - np.log(np.sum(spread, axis=1))[r]).astype(np.float32)
    mine = np.zeros((n, width), np.float32)  # the kept ones' probabilities in their places, padding 0
    mine[r, slot] = np.exp(logp)
    pad = np.ones((n, width), np.bool_)
    pad[r, slot] = False
    order = np.argsort(np.where(pad, np.float32(np.inf), vals), axis=1, kind="stable")  # padding sorts last
    cumulative = np.empty((n, width), np.float32)
    np.put_along_axis(cumulative, order, np.cumsum(np.take_along_axis(mine, order, 1), axis=1, dtype=np.float32), 1)
    floor = (1.0 - pp).astype(np.float32)[:, None]
    drop = nucleus[:, None] & ~(cumulative > floor)
    return cols, np.where(drop, np.float32(-np.inf), vals).astype(np.float32)
