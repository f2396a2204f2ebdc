"""Gepard-1.0's synthesis request: what `GepardModel.admit` takes (fields resolved against the rules)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class GepardRequest:
    """One request: text in the default voice. `seed` seeds the request's own Gumbel noise."""

    text: str
    voice: str | None = None  # omitted or "default"
    max_new_tokens: int | None = None  # frames
    seed: int | None = None  # None: DEFAULT_SEED (42)
    initial_chunk_frames: int | None = None  # the chunk schedule (not a Speech API field for Gepard)
    chunk_frames: int | None = None
