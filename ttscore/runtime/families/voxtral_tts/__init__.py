"""Voxtral TTS (mistralai/Voxtral-4B-TTS-2603): preset voices, semantic argmax and
flow-matching acoustic codes with per-request seeded noise over exported graphs, Mistral's codec as an
exact streaming vocoder (export/voxtral_tts/README.md)."""

from __future__ import annotations

from ttscore.contract import voxtral_tts as contract
from ttscore.runtime.family import DeclaredFamily

FAMILY = DeclaredFamily.of(contract, "VoxtralModel", "VoxtralRequest")
