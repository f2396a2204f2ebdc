"""Qwen3-TTS 12 Hz (CustomVoice, VoiceDesign, Base): request resolution, prompt, per-frame decode."""

from __future__ import annotations

from ttscore.contract import qwen3_tts as contract
from ttscore.runtime.family import DeclaredFamily

FAMILY = DeclaredFamily(
    name=contract.FAMILY,
    rules=contract.RULES,
    model="ttscore.runtime.families.qwen3_tts.model:Qwen3TTSPipeline",
    request="ttscore.runtime.families.qwen3_tts.request:Qwen3TTSRequest",
    offline_tools="ttscore.runtime.families.qwen3_tts.offline:OFFLINE",
    takes=("manifest", "vocoder", "encoders"),
)
