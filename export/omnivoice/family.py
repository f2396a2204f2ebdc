"""OmniVoice's export entry (export/families.py), a declaration from the kit of export/family.py: each
checkpoint's speech_generation decodes inline (the codec decoder: a non-autoregressive chunk is decoded whole)
and gets its own `codec_encoder` (voice features: reference audio -> codes); an export without the encoder
side still serves, its codec_encoder then refusing reference audio (400 naming `ref_audio`).
"""

from __future__ import annotations

from export.family import ExportFamily, inline_deploy, lazy, sized_make_tiny
from ttscore.contract import omnivoice as contract

SIZES = ("tiny", "real")  # export.omnivoice.tiny.SIZES

FAMILY = ExportFamily(
    name=contract.FAMILY, display=contract.RULES.name, hub_org="k2-fsa",
    signature=f"config.json with model_type {contract.FAMILY}", demo=(("OmniVoice-tiny", {}),),
    detect=lazy("ttscore.runtime.families.omnivoice.checkpoint:is_omnivoice"),
    check=lazy("ttscore.runtime.families.omnivoice.checkpoint:read_checkpoint"),
    export=lazy("export.omnivoice.exporter:export_omnivoice"),
    make_tiny=sized_make_tiny("export.omnivoice.tiny:make_tiny_omnivoice", contract.FAMILY, SIZES),
    sizes=SIZES,
    deploy=inline_deploy(contract.ENCODER_MODEL),
)
