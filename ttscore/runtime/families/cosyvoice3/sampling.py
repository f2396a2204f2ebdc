"""CosyVoice3's speech-token sampling and noise, in numpy.

RAS (repetition-aware sampling) as vLLM-Omni 0.30.0's `_ras_sample_one` does it, its two draws fed
as noise: the 200 stop logits merged by logsumexp into eos (every other stop row -inf; all of them -inf
before `min_len` tokens), log-softmax; the nucleus draw: probabilities sorted descending (stable), a
rank kept when the mass before it is < top_p and it is among the top_k, the pick = argmax(kept / q1)
over sorted ranks (vLLM's `random_sample`: probabilities over Exp(1) noise); when the pick occurs at
least win_size * tau_r times among the last win_size tokens, it is excluded and the redraw = argmax(
softmax(scores) / q2) over all ids. q1, q2 are rows of Exp(1) noise the caller draws (from the request's
seed) and the reference is fed.

The flow's x0 is position-indexed: frame i of the prompt + speech sequence takes column i of the
request's noise, so a hop re-run over the prefix sees the same x0 as the whole utterance (upstream's
fixed noise table). HiFT's sine-noise table is fixed (seed 0) and indexed by the sample position from the
utterance start, wrapping after `SINE_TABLE_SECONDS` (vLLM-Omni wraps its 300 s table the same way).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from ttscore.runtime.flow import linspace_f32

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
SINE_TABLE_SECONDS = 30


def scores(logits: F32, speech_token_size: int, allow_stop: bool) -> F32:
    """log-softmax of the logits with the stop rows merged into eos (speech_token_size + 1)."""
    x = logits.astype(np.float32, copy=True)
    stop = x[speech_token_size:]
    top = np.float32(stop.max())
    merged = np.float32(top + np.log(np.exp(stop - top, dtype=np.float32).sum(dtype=np.float32)))
    x[speech_token_size:] = -np.inf
    if allow_stop:
        x[speech_token_size + 1] = merged
    return scores_of(x)


def tempered(weighted: F32, temperature: float) -> F32:
    """The log-softmax of the merged logits over `temperature` (vLLM-Omni divides the logits, then takes
    the log-softmax; a log-softmax differs from the logits by a constant, so this is the same)."""
    if temperature == 1.0:
        return weighted
    return scores_of(weighted / np.float32(temperature))


def scores_of(x: F32) -> F32:
    """log-softmax (−inf rows stay −inf)."""
    m = np.float32(x.max())
    out: F32 = (x - m - np.log(np.exp(x - m, dtype=np.float32).sum(dtype=np.float32))).astype(np.float32)
    return out


def _softmax(x: F32) -> F32:
    m = np.float32(x.max())
    e = np.exp(x - m, dtype=np.float32)
    out: F32 = (e / e.sum(dtype=np.float32)).astype(np.float32)
    return out


def ras_pick(weighted: F32, recent: Sequence[int], q1: F32, q2: F32, top_p: float, top_k: int, win_size: int,
             tau_r: float) -> tuple[int, bool]:
    """The token and whether the repetition-aware redraw (q2) was used."""
    probs = _softmax(weighted)
    order = np.argsort(-probs, kind="stable")
    sorted_p = probs[order]
    before = np.cumsum(sorted_p, dtype=np.float32) - sorted_p
    keep = before < np.float32(top_p)
    if top_k > 0:
        keep &= np.arange(len(sorted_p)) < min(top_k, len(sorted_p))
    w = sorted_p * keep.astype(np.float32)
    pick = int(order[int(np.argmax(w / q1))])
    if win_size > 0 and recent:
        window = list(recent[-win_size:])
        if window.count(pick) >= win_size * tau_r:
            again = weighted.copy()
            again[pick] = -np.inf
            if not np.isfinite(again).any():
                again[pick] = weighted[pick]
            return int(np.argmax(_softmax(again) / q2)), True
    return pick, False


def ras_noise(seed: int, steps: int, rows: int) -> F32:
    """The request's sampling noise [steps, 2, rows] (Exp(1)): per token, the nucleus draw's and the redraw's."""
    rng = np.random.Generator(np.random.PCG64([seed, 1]))
    draws = rng.standard_exponential((steps, 2, rows), dtype=np.float32)
    out: F32 = np.maximum(draws, np.finfo(np.float32).tiny)  # Exp(1) on (0, inf), as torch's exponential_
    return out


def flow_noise(seed: int, mel: int, frames: int) -> F32:
    """The request's flow x0 [mel, frames], column i for frame i from the sequence start (prompt included)."""
    rng = np.random.Generator(np.random.PCG64([seed, 2]))
    out: F32 = rng.standard_normal((frames, mel), dtype=np.float32).T.copy()
    return out


@lru_cache(maxsize=2)
def sine_table(sample_rate: int, harmonics: int) -> F32:
    """HiFT's fixed sine-noise table [SINE_TABLE_SECONDS * rate, harmonics + 1] (uniform [0, 1), seed 0)."""
    rng = np.random.Generator(np.random.PCG64(0))
    out: F32 = rng.random((SINE_TABLE_SECONDS * sample_rate, harmonics + 1), dtype=np.float32)
    return out


def sine_rows(table: F32, start: int, count: int) -> F32:
    """`count` rows of the table from sample `start`, wrapping."""
    idx = (start + np.arange(count)) % table.shape[0]
    out: F32 = table[idx]
    return out


def timesteps(n_steps: int) -> F32:
    """The cosine schedule 1 - cos(pi / 2 * torch.linspace(0, 1, n + 1)) in float32."""
    lin = linspace_f32(0.0, 1.0, n_steps + 1)
    out: F32 = (np.float32(1.0) - np.cos(lin * np.float32(0.5) * np.float32(np.pi))).astype(np.float32)
    return out


def euler(velocity: Callable[[int, F32, F32], F32], x: F32, n_steps: int) -> F32:
    """x after `n_steps` Euler steps on the cosine schedule (`timesteps`), as upstream's solver steps in float32:
    `velocity(step, x, t)` (step 0..n_steps - 1, t [1]) is the step's velocity."""
    ts = timesteps(n_steps)
    t, dt = ts[0], ts[1] - ts[0]
    for s in range(1, len(ts)):
        x = (x + dt * velocity(s - 1, x, np.array([t], np.float32))).astype(np.float32)
        t = np.float32(t + dt)
        if s < len(ts) - 1:
            dt = np.float32(ts[s + 1] - t)
    return x
