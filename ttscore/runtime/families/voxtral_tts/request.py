"""Voxtral TTS's synthesis request: what `VoxtralModel.admit` takes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class VoxtralRequest:
    """One request in a preset voice. `seed` seeds the request's own flow-matching noise."""

    text: str
    voice: str | None = None  # required: one of the checkpoint's presets (lower-case accepted)
    max_new_tokens: int | None = None  # frames
    seed: int | None = None  # None: a random one (vLLM-Omni draws x0 unseeded)
    cfg_alpha: float | None = None  # None: 1.2 (vLLM-Omni's default)
    initial_chunk_frames: int | None = None
    chunk_frames: int | None = None
