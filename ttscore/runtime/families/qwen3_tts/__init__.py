"""Qwen3-TTS 12 Hz (CustomVoice, VoiceDesign, Base): request resolution, prompt, per-frame decode."""

from __future__ import annotations

from ttscore.contract import qwen3_tts as contract
from ttscore.runtime.family import DeclaredFamily

FAMILY = DeclaredFamily.of(contract, "Qwen3TTSPipeline", "Qwen3TTSRequest", takes=("manifest", "vocoder", "encoders"))
