"""What OmniVoice's `admit` takes (fields named as the speech_generation inputs)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from numpy.typing import NDArray


@dataclass
class OmniVoiceRequest:
    text: str
    language: str | None = None  # a language id or name; "Auto" or None: none
    instructions: str | None = None  # voice design items
    max_new_tokens: int | None = None  # the most frames the duration estimate may give
    seed: int | None = None
    num_step: int | None = None
    guidance_scale: float | None = None
    t_shift: float | None = None
    position_temperature: float | None = None
    class_temperature: float | None = None
    speed: float | None = None  # the reference's speed: the estimate divided by it
    # Streamed requests: short chunks at sentence marks (the reference's rule), each sent as it completes.
    sentence_chunks: bool | None = None
    # Cloning from precomputed codes (not on the wire yet): the reference clip's codes [8, T_ref] and transcript.
    ref_codes: NDArray[Any] | None = None
    ref_text: str | None = None
