"""Voxtral TTS's acoustic codes from the flow-matching velocity: the Euler loop, clamping and
quantisation of vLLM-Omni's `FlowMatchingAudioTransformer.decode_one_frame`, in numpy.

x0 is the caller's noise (vLLM-Omni draws it from torch's global RNG: not per-request seeded); the
timesteps are torch.linspace(0, 1, n + 1)'s float32 values, computed as torch computes them (the first
half counted up from 0, the second down from 1), so the steps are bit-identical to the reference's.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from ttscore.contract import voxtral_tts as spec
from ttscore.runtime.flow import linspace_f32

# (x [B, n], t [B], hidden [B, D], cfg_alpha [B]) -> guided velocity [B, n]
F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
VelocityFn = Callable[[F32, F32, F32, F32], F32]


def acoustic_codes(velocity: VelocityFn, noise: F32, hidden: F32, cfg_alpha: F32, semantic: I64, n_steps: int,
                   levels: int) -> I64:
    """Rows' acoustic codes [B, n] with vLLM-Omni's +2 offset ([EMPTY_AUDIO] where the semantic code is
    [END_AUDIO])."""
    ts = linspace_f32(0.0, 1.0, n_steps + 1)
    dts = ts[1:] - ts[:-1]
    x = noise.astype(np.float32, copy=True)
    b = x.shape[0]
    for i in range(n_steps):
        v = velocity(x, np.full(b, ts[i], np.float32), hidden, cfg_alpha.astype(np.float32))
        x = x + v * dts[i]
    x = np.clip(x, -1.0, 1.0)
    codes: I64 = np.round((x + 1) / 2 * np.float32(levels - 1)).astype(np.int64)
    codes[semantic == spec.END_AUDIO] = spec.EMPTY_AUDIO
    out: I64 = codes + spec.NUM_AUDIO_SPECIAL
    return out


def frame_noise(seed: int, frames: int, n_acoustic: int) -> F32:
    """The flow-matching x0 of a request's first `frames` frames, [frames, n_acoustic], from its seed
    (numpy's PCG64: the project's choice; vLLM-Omni's x0 comes from torch's unseeded global RNG)."""
    rng = np.random.Generator(np.random.PCG64(seed))
    out: F32 = rng.standard_normal((frames, n_acoustic), dtype=np.float32)
    return out
