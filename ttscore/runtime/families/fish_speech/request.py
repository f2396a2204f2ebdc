"""The request FishModel.admit takes (built by `request_from_tensors` from speech_generation's inputs, or by
`say` offline)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class FishRequest:
    text: str
    ref_audio: npt.NDArray[np.float32] | None = None  # 44.1 kHz mono samples (offline only: encoded in admit)
    ref_codes: npt.NDArray[np.int64] | None = None  # the clip's DAC codes [frames, 10] (served: from dac_encoder)
    ref_text: str | None = None
    max_new_tokens: int | None = None
    seed: int | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    initial_chunk_frames: int | None = None
    chunk_frames: int | None = None
