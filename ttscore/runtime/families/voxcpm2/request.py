"""VoxCPM2's synthesis request: what `VoxCPM2Model.admit` takes (fields resolved against the family's rules)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]


@dataclass
class VoxCPM2Request:
    """One synthesis request. Reference patches [T, P, D] come from `encode_reference`."""

    text: str
    ref_patches: F32 | None = None  # voice cloning: isolated reference (the reference's "reference" mode)
    prompt_patches: F32 | None = None  # continuation: the prompt audio ...
    prompt_text: str | None = None  # ... and its transcript
    max_new_tokens: int | None = None  # patches; None: the reference's length cap
    seed: int | None = None
    inference_timesteps: int | None = None
    cfg_value: float | None = None
    initial_chunk_frames: int | None = None
    chunk_frames: int | None = None
