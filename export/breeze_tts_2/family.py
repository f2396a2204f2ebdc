"""Breeze-TTS-2's export entry (export/families.py), a declaration from the kit of export/family.py: each
checkpoint decodes inline (the Qwen3-TTS code2wav of its own export) and gets its own `breeze_speech_encoder`
(voice features: reference audio -> the codes of its own audio_tokenizer).
"""

from __future__ import annotations

from export.family import ExportFamily, inline_deploy, lazy, sized_make_tiny
from ttscore.contract import breeze_tts_2 as contract

SIZES = ("tiny", "real")  # export.breeze_tts_2.tiny.SIZES

FAMILY = ExportFamily(
    name=contract.FAMILY,
    display="Breeze-TTS-2",
    hub_org="BreezeBlue",
    signature="config.json with model_type breeze, text_encoder_config and depth_decoder_config",
    demo=(("Breeze-TTS-2-tiny", {}),),
    detect=lazy("ttscore.runtime.families.breeze_tts_2.checkpoint:is_breeze"),
    check=lazy("ttscore.runtime.families.breeze_tts_2.checkpoint:read_checkpoint"),
    export=lazy("export.breeze_tts_2.exporter:export_breeze"),
    make_tiny=sized_make_tiny("export.breeze_tts_2.tiny:make_tiny_breeze", contract.FAMILY, SIZES),
    sizes=SIZES,
    deploy=inline_deploy(contract.SPEECH_ENCODER),
)
