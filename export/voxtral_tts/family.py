"""Voxtral TTS's export entry (export/families.py), a declaration from the kit of export/family.py: each
checkpoint decodes inline (its own export's codec_stream graph) and has no voice-features model (preset voices
only).
"""

from __future__ import annotations

from export.family import inline_family
from ttscore.contract import voxtral_tts as contract

FAMILY = inline_family(
    contract.FAMILY, display=contract.DISPLAY, hub_org=contract.HUB_ORG,
    signature="Mistral-format params.json with multimodal.audio_model_args.acoustic_transformer_args",
    detect="is_voxtral_tts", export="export_voxtral", make_tiny="make_tiny_voxtral",
)
