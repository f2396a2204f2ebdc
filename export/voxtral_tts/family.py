"""Voxtral TTS's export entry (export/families.py), a declaration from the kit of export/family.py: each
checkpoint decodes inline (its own export's codec_stream graph) and has no voice-features model (preset voices
only).
"""

from __future__ import annotations

from export.family import ExportFamily, inline_deploy, lazy, sized_make_tiny
from ttscore.contract import voxtral_tts as contract

SIZES = ("tiny", "real")  # export.voxtral_tts.tiny.SIZES

FAMILY = ExportFamily(
    name=contract.FAMILY, display=contract.DISPLAY, hub_org=contract.HUB_ORG,
    signature="Mistral-format params.json with multimodal.audio_model_args.acoustic_transformer_args",
    demo=(("Voxtral-TTS-tiny", {}),),
    detect=lazy("ttscore.runtime.families.voxtral_tts.checkpoint:is_voxtral_tts"),
    check=lazy("ttscore.runtime.families.voxtral_tts.checkpoint:read_checkpoint"),
    export=lazy("export.voxtral_tts.exporter:export_voxtral"),
    make_tiny=sized_make_tiny("export.voxtral_tts.tiny:make_tiny_voxtral", contract.FAMILY, SIZES),
    sizes=SIZES,
    deploy=inline_deploy(),
)
