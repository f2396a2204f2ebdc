"""Breeze-TTS-2's synthesis request: what `BreezeModel.admit` takes (fields resolved against the rules)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


@dataclass
class BreezeRequest:
    """One request. The mode follows the fields: plain (text + voice tag), design (+ instructions),
    clone (+ ref_codes and ref_text), direction (clone + instructions). Decoding is greedy."""

    text: str
    voice: str | None = None  # S0..S9 (default S0)
    instructions: str | None = None
    ref_codes: npt.NDArray[np.int64] | None = None  # [T, 16] from the speech encoder
    ref_text: str | None = None
    max_new_tokens: int | None = None  # frames
    seed: int | None = None  # accepted; greedy decoding does not use it
    initial_chunk_frames: int | None = None
    chunk_frames: int | None = None
