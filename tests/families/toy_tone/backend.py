"""toy_tone on the Triton side (ttscore.backend.family): speech_generation alone; its vocoder runs
inside it (no BLS vocoder model, no voice-features model)."""

from __future__ import annotations

from ttscore.backend.family import BackendFamily

from . import contract

FAMILY = BackendFamily(name=contract.NAME, models=())
