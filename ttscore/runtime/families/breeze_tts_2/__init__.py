"""Breeze-TTS-2 (BreezeBlue/Breeze-TTS-2): prompt, greedy per-frame decode over exported graphs,
the Qwen3-TTS 12 Hz codec as its exact streaming vocoder (export/breeze_tts_2/README.md)."""

from __future__ import annotations

from ttscore.contract import breeze_tts_2 as contract
from ttscore.runtime.family import DeclaredFamily

FAMILY = DeclaredFamily.of(
    contract, "BreezeModel", "BreezeRequest", takes=("manifest", "vocoder", "encoders"), renames={"speaker": "voice"}
)
