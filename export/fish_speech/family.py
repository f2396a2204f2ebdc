"""Fish Speech S2 Pro's export entry (export/families.py), a declaration from the kit of export/family.py: each
checkpoint's speech_generation decodes inline (its export's dac_stream) and gets its own `dac_encoder` (voice
features: reference audio -> DAC codes).
"""

from __future__ import annotations

from export.family import ExportFamily, inline_deploy, lazy, sized_make_tiny
from ttscore.contract import fish_speech as contract

SIZES = ("tiny", "real")  # export.fish_speech.tiny.SIZES

FAMILY = ExportFamily(
    name=contract.FAMILY, display=contract.DISPLAY, hub_org=contract.HUB_ORG,
    signature=f"config.json with model_type {contract.MODEL_TYPE}",
    demo=(("Fish-Speech-S2-Pro-tiny", {}),),
    detect=lazy("ttscore.runtime.families.fish_speech.checkpoint:is_fish_speech"),
    check=lazy("ttscore.runtime.families.fish_speech.checkpoint:read_checkpoint"),
    export=lazy("export.fish_speech.exporter:export_fish"),
    make_tiny=sized_make_tiny("export.fish_speech.tiny:make_tiny_fish", contract.FAMILY, SIZES),
    sizes=SIZES,
    deploy=inline_deploy(contract.ENCODER_MODEL),
)
