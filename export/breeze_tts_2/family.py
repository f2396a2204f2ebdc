"""Breeze-TTS-2's export entry (export/families.py), a declaration from the kit of export/family.py: each
checkpoint decodes inline (the Qwen3-TTS code2wav of its own export) and gets its own `breeze_speech_encoder`
(voice features: reference audio -> the codes of its own audio_tokenizer).
"""

from __future__ import annotations

from export.family import inline_family
from ttscore.contract import breeze_tts_2 as contract

FAMILY = inline_family(
    contract.FAMILY, display="Breeze-TTS-2", hub_org="BreezeBlue",
    signature="config.json with model_type breeze, text_encoder_config and depth_decoder_config",
    detect="is_breeze", export="export_breeze", make_tiny="make_tiny_breeze", encoder=contract.SPEECH_ENCODER,
)
