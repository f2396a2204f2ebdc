"""OmniVoice's export entry (export/families.py), a declaration from the kit of export/family.py: each
checkpoint's speech_generation decodes inline (the codec decoder: a non-autoregressive chunk is decoded whole)
and gets its own `codec_encoder` (voice features: reference audio -> codes); an export without the encoder
side still serves, its codec_encoder then refusing reference audio (400 naming `ref_audio`).
"""

from __future__ import annotations

from export.family import inline_family
from ttscore.contract import omnivoice as contract

FAMILY = inline_family(
    contract.FAMILY, display=contract.RULES.name, hub_org="k2-fsa",
    signature=f"config.json with model_type {contract.FAMILY}",
    detect="is_omnivoice", export="export_omnivoice", make_tiny="make_tiny_omnivoice", encoder=contract.ENCODER_MODEL,
)
