"""The time grid of the flow-matching families' Euler solvers, computed as the references compute it in torch, so
every step is bit-identical to theirs."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]


def linspace_f32(start: float, end: float, steps: int) -> F32:
    """torch.linspace(start, end, steps) in float32, bit for bit: the first half counted up from `start`, the
    second down from `end`."""
    out = np.empty(steps, np.float32)
    if steps == 1:
        out[0] = start
        return out
    s, e = np.float32(start), np.float32(end)
    step = np.float32((e - s) / np.float32(steps - 1))
    half = steps // 2
    for i in range(steps):
        out[i] = s + step * np.float32(i) if i < half else e - step * np.float32(steps - i - 1)
    return out
