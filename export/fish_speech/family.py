"""Fish Speech S2 Pro's export entry (export/families.py), a declaration from the kit of export/family.py: each
checkpoint's speech_generation decodes inline (its export's dac_stream) and gets its own `dac_encoder` (voice
features: reference audio -> DAC codes).
"""

from __future__ import annotations

from export.family import inline_family
from ttscore.contract import fish_speech as contract

FAMILY = inline_family(
    contract.FAMILY, display=contract.DISPLAY, hub_org=contract.HUB_ORG,
    signature=f"config.json with model_type {contract.MODEL_TYPE}",
    detect="is_fish_speech", export="export_fish", make_tiny="make_tiny_fish", encoder=contract.ENCODER_MODEL,
)
