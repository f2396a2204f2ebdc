"""The reference's iterative unmasking (`_generate_iterative`), one step at a time, in numpy.

Per step every masked (codebook, frame) slot gets a prediction: log-probs with classifier-free
guidance (log_softmax(c + g (c - u)) over log-softmaxed conditional / unconditional logits), the mask
id banned, the argmax (or a Gumbel sample among the top 10 % at `class_temperature`); its confidence
is its log-prob minus `layer_penalty` x codebook index, plus Gumbel noise at `position_temperature`;
the scheduled number of most confident masked slots are unmasked. The uniforms of both noises come
from the request's own generator (class noise first, then position noise, each step), so requests
at different steps batch freely and a seed repeats.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ttscore.runtime.flow import linspace_f32
from ttscore.runtime.sampling import log_softmax

EPS = np.float32(1e-10)


def time_steps(num_step: int, t_shift: float) -> NDArray[np.float32]:
    """num_step + 1 shifted times from 0 to 1, in float32 as the reference computes them
    (torch.linspace's two-sided rule, then t_shift t / (1 + (t_shift - 1) t))."""
    t = linspace_f32(0.0, 1.0, num_step + 1)
    shifted = np.float32(t_shift) * t / (np.float32(1.0) + np.float32(t_shift - 1) * t)
    return shifted.astype(np.float32)


def schedule(total: int, num_step: int, t_shift: float) -> list[int]:
    """Slots unmasked at each step: ceil(total x the step's share of time), the last step the rest."""
    ts = [float(x) for x in time_steps(num_step, t_shift)]
    left, out = total, []
    for s in range(num_step):
        k = left if s == num_step - 1 else min(math.ceil(total * (ts[s + 1] - ts[s])), left)
        out.append(int(k))
        left -= int(k)
    return out


def gumbel(scaled: NDArray[np.float32], u: NDArray[np.float32]) -> NDArray[np.float32]:
    out: NDArray[np.float32] = scaled + (-np.log(-np.log(u + EPS) + EPS))
    return out


@dataclass(frozen=True)
class Knobs:
    num_step: int
    guidance_scale: float
    t_shift: float
    layer_penalty: float
    position_temperature: float
    class_temperature: float
    class_top_k_ratio: float = 0.1


def predict(cond: NDArray[np.float32], uncond: NDArray[np.float32] | None, knobs: Knobs, mask_id: int,
            rng: np.random.Generator) -> tuple[NDArray[np.int64], NDArray[np.float32]]:
    """(tokens [C, T], confidence [C, T]) from the logits [C, T, V] of one request."""
    if knobs.guidance_scale != 0 and uncond is not None:
        c, u = log_softmax(cond), log_softmax(uncond)
        lp = log_softmax(c + np.float32(knobs.guidance_scale) * (c - u))
    else:
        lp = log_softmax(cond)
    lp[..., mask_id] = -np.inf
    if knobs.class_temperature > 0.0:
        k = math.ceil(knobs.class_top_k_ratio * lp.shape[-1])
        kth = np.partition(lp, lp.shape[-1] - k, axis=-1)[..., lp.shape[-1] - k : lp.shape[-1] - k + 1]
        filtered = np.where(lp >= kth, lp, -np.inf).astype(np.float32)
        u = rng.random(filtered.shape, dtype=np.float32)
        tokens = gumbel(filtered / np.float32(knobs.class_temperature), u).argmax(axis=-1)
    else:
        tokens = lp.argmax(axis=-1)
    return tokens.astype(np.int64), lp.max(axis=-1)


def unmask_step(tokens: NDArray[np.int64], cond: NDArray[np.float32], uncond: NDArray[np.float32] | None, k: int,
                knobs: Knobs, mask_id: int, rng: np.random.Generator) -> None:
    """One step on `tokens` [C, T] (in place): the `k` most confident masked slots take their prediction."""
    if k <= 0:
        return
    pred, conf = predict(cond, uncond, knobs, mask_id, rng)
    layers = np.arange(tokens.shape[0], dtype=np.float32)[:, None]
    scores = (conf - layers * np.float32(knobs.layer_penalty)).astype(np.float32)
    if knobs.position_temperature > 0.0:
        u = rng.random(scores.shape, dtype=np.float32)
        scores = gumbel(scores / np.float32(knobs.position_temperature), u)
    scores = np.where(tokens != mask_id, -np.inf, scores)
    flat = scores.reshape(-1)
    top = np.argpartition(-flat, k - 1)[:k] if k < flat.size else np.arange(flat.size)
    t = tokens.reshape(-1)
    t[top] = pred.reshape(-1)[top]
