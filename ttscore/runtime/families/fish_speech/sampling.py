"""Fish Speech's two samplers, with their randomness given as Exp(1) noise (`q`, one value per candidate): a draw
is argmax(probs / q), an exact sample of `probs` (vLLM's random_sample), so feeding the same q reproduces a
request whatever the batching.

- Slow AR (vLLM's sampler over the masked logits): temperature, then vLLM's apply_top_k_top_p (ascending sort;
  top-k keeps logits >= the k-th largest; top-p drops the ascending cumulative mass <= 1 - p, the largest
  always kept), softmax. Temperature 0 is greedy.
- Fast AR (vLLM-Omni's FishSpeechFastAR.forward): logits * (1 / temperature), top-k (values below the k-th
  dropped), top-p (descending; dropped where the exclusive cumulative mass >= p), softmax.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray


def _softmax(x: NDArray[Any]) -> NDArray[Any]:
    e = np.exp(x - np.max(x))
    out: NDArray[Any] = e / e.sum()
    return out


def sample_slow(logits: NDArray[Any], temperature: float, top_k: int, top_p: float, q: NDArray[Any]) -> int:
    if temperature <= 0:
        return int(np.argmax(logits))
    x = np.asarray(logits, np.float32) / np.float32(temperature)
    order = np.argsort(x, kind="stable")  # ascending
    s = x[order]
    if top_k > 0:
        s = np.where(s < s[max(len(s) - top_k, 0)], -np.inf, s)
    if top_p < 1.0:
        csum = np.cumsum(_softmax(s))
        drop = csum <= 1 - top_p
        drop[-1] = False
        s = np.where(drop, -np.inf, s)
    probs = np.empty_like(s)
    probs[order] = _softmax(s)
    return int(np.argmax(probs / q))


def sample_fast(logits: NDArray[Any], temperature: float, top_k: int, top_p: float, q: NDArray[Any]) -> int:
    if temperature <= 0:
        return int(np.argmax(logits))
    s = np.asarray(logits, np.float32) * np.float32(1.0 / max(temperature, 1e-6))
    if top_k > 0:
        kth = np.sort(s)[::-1][min(top_k, len(s)) - 1]
        s = np.where(s < kth, -np.inf, s)
    if top_p < 1.0:
        order = np.argsort(-s, kind="stable")
        p = _softmax(s[order])
        drop = np.cumsum(p) - p >= top_p
        s = s.copy()
        s[order[drop]] = -np.inf
    return int(np.argmax(_softmax(s) / q))
