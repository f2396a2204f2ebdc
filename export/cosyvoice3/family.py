"""CosyVoice3's export entry (export/families.py), a declaration from the kit of export/family.py: each
checkpoint's speech_generation runs the hop-stream vocoder inline (per hop the flow on the new frames over the
past frames' K/V and HiFT on a bounded window, under the chunk mask for streamed and whole requests alike) and
gets its own `prompt_encoder` (voice features: reference audio -> speech tokens, prompt mel, speaker embedding).
"""

from __future__ import annotations

import dataclasses

from export.family import inline_family
from ttscore.contract import cosyvoice3 as contract

FAMILY = dataclasses.replace(
    inline_family(
        contract.FAMILY, display=contract.DISPLAY, hub_org=contract.HUB_ORG,
        signature="cosyvoice3.yaml beside llm.pt, flow.pt, hift.pt and CosyVoice-BlankEN/",
        detect="is_cosyvoice3", export="export_cosyvoice3", make_tiny="make_tiny_cosyvoice3",
        encoder=contract.ENCODER_MODEL,
    ),
    revision=contract.EXPORT_REVISION,
)
