"""The LocDiT flow-matching solver around the exported `locdit_step` graph (numpy, no torch).

The reference integrates `x <- x - dt * v` with an Euler solver over a "sway" time schedule,
starting from Gaussian noise; the first `zero_init_steps` steps use v = 0 (CFG-zero*), the others
the guided velocity the graph computes. Every scalar is float32 and computed in the reference's
order, so the solver adds no error of its own beyond the graph's (export validates the two together
against the reference's `UnifiedCFM.forward`). Rows may use different step counts: each solver step
is one graph call over the rows still integrating.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from ttscore.runtime.flow import linspace_f32

F32 = npt.NDArray[np.float32]
SWAY_SAMPLING_COEF = 1.0
# run(x [B, D, P], mu [B, M], cond [B, D, P], t [B], dt [B], cfg [B]) -> velocity [B, D, P]
StepFn = Callable[[F32, F32, F32, F32, F32, F32], F32]


@lru_cache(maxsize=64)
def time_span(n_steps: int) -> tuple[float, ...]:
    t = linspace_f32(1.0, 0.0, n_steps + 1)
    half_pi = np.float32(math.pi / 2)
    sway = t + np.float32(SWAY_SAMPLING_COEF) * (np.cos(half_pi * t) - np.float32(1.0) + t)
    return tuple(float(v) for v in sway.astype(np.float32))


def zero_init_steps(n_steps: int) -> int:
    return max(1, int((n_steps + 1) * 0.04))


@dataclass
class SolveRow:
    x: F32  # [D, P] the noise, integrated in place
    mu: F32  # [M]
    cond: F32  # [D, P]
    n_steps: int
    cfg_value: float


def solve(rows: list[SolveRow], run: StepFn, mean_mode: bool = False) -> list[F32]:
    """Integrate every row from its noise to a patch [D, P]."""
    spans = [np.asarray(time_span(r.n_steps), np.float32) for r in rows]
    t = [s[0] for s in spans]
    dt = [np.float32(s[0] - s[1]) for s in spans]
    x = [r.x.astype(np.float32, copy=True) for r in rows]
    for step in range(1, max((r.n_steps for r in rows), default=0) + 1):
        live = [i for i, r in enumerate(rows) if step <= r.n_steps]
        guided = [i for i in live if step > zero_init_steps(rows[i].n_steps)]
        if guided:
            v = run(
                np.stack([x[i] for i in guided]),
                np.stack([rows[i].mu for i in guided]).astype(np.float32),
                np.stack([rows[i].cond for i in guided]).astype(np.float32),
                np.array([t[i] for i in guided], np.float32),
                np.array([dt[i] if mean_mode else 0.0 for i in guided], np.float32),
                np.array([rows[i].cfg_value for i in guided], np.float32),
            )
            for j, i in enumerate(guided):
                x[i] = (x[i] - dt[i] * v[j]).astype(np.float32)
        for i in live:
            # zero-init steps: x - dt * 0 == x
            t[i] = np.float32(t[i] - dt[i])
            if step < rows[i].n_steps:
                dt[i] = np.float32(t[i] - spans[i][step + 1])
    return x
