"""code0 sampling, matching the reference talker's Hugging Face logits processors.

Order (transformers `_get_logits_processor`): repetition penalty over the code0 history, min-new-tokens
(EOS forbidden for the first 2 codes), suppression of every special codec id except EOS (the reference
suppresses ids [vocab - 1024, vocab) minus EOS), then for sampling temperature, top-k, top-p.
Randomness comes from one uniform draw per code (inverse-CDF sampling), so a seed reproduces a request
exactly, independently of batching. The same rules run inside the code-predictor graph.

`log_softmax` over the last axis in float32 is the families' (OmniVoice's unmasking, MOSS-TTS-Nano's top-p).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

MIN_NEW_TOKENS = 2


def log_softmax(x: NDArray[np.float32]) -> NDArray[np.float32]:
    """log(softmax(x)) over the last axis: x - max, minus the log of the sum of its exponentials."""
    m = x.max(axis=-1, keepdims=True)
    shifted = x - m
    out: NDArray[np.float32] = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return out


def suppress_mask(vocab_size: int, eos_id: int) -> NDArray[Any]:
    mask = np.zeros(vocab_size, dtype=bool)
    mask[max(0, vocab_size - 1024) :] = True
    mask[eos_id] = False
    return mask


def process_logits(
    logits: NDArray[Any],
    history: NDArray[Any],
    penalty: float,
    suppressed: NDArray[Any],
    eos_id: int,
    n_generated: int,
) -> NDArray[Any]:
    """Apply the talker's logits processors to one row of logits (returns a float32 copy)."""
    scores = np.array(logits, dtype=np.float32, copy=True)
    if penalty != 1.0 and history.size:
        idx = np.unique(history)
        s = scores[idx]
        scores[idx] = np.where(s < 0, s * penalty, s / penalty)
    if n_generated < MIN_NEW_TOKENS:
        scores[eos_id] = -np.inf
    scores[suppressed] = -np.inf
    return scores


def process_logits_batch(
    logits: NDArray[Any],
    seen: NDArray[Any],
    penalty: NDArray[Any],
    suppressed: NDArray[Any],
    eos_id: int,
    n_generated: NDArray[Any],
) -> NDArray[Any]:
    """`process_logits` for a whole batch at once: logits [B, V]; seen [B, V] marks the codes in each
    row's history; penalty and n_generated [B]. Same float32 arithmetic, row for row."""
    scores = np.array(logits, dtype=np.float32, copy=True)
    pen = np.asarray(penalty, np.float32)[:, None]
    hit = seen & (pen != 1.0)
    scores = np.where(hit, np.where(scores < 0, scores * pen, scores / pen), scores).astype(np.float32, copy=False)
    scores[np.asarray(n_generated) < MIN_NEW_TOKENS, eos_id] = -np.inf
    scores[:, suppressed] = -np.inf
    return scores


def sample(
    scores: NDArray[Any], do_sample: bool, temperature: float, top_k: int, top_p: float, u: float
) -> int:
    """Greedy argmax, or temperature/top-k/top-p then inverse-CDF with the uniform draw `u`."""
    if not do_sample:
        return int(np.argmax(scores))
    s = scores.astype(np.float64) / float(temperature)
    vocab = s.shape[0]
    order = np.argsort(-s, kind="stable")
    sorted_s = s[order]
    keep = np.isfinite(sorted_s)
    if 0 < top_k < vocab:
        kth = sorted_s[top_k - 1]
        keep &= sorted_s >= kth
    sorted_s = np.where(keep, sorted_s, -np.inf)
    if top_p < 1.0:
        probs = np.exp(sorted_s - sorted_s[0])
        probs /= probs.sum()
        exclusive = np.cumsum(probs) - probs
        keep &= exclusive < top_p
        keep[0] = True
        sorted_s = np.where(keep, sorted_s, -np.inf)
    probs = np.exp(sorted_s - sorted_s[0])
    cdf = np.cumsum(probs)
    pos = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
    pos = min(pos, int(np.count_nonzero(keep)) - 1)
    return int(order[pos])
