"""MOSS-TTS-Nano's export entry (export/families.py), a declaration from the kit of export/family.py: each
checkpoint's speech_generation decodes inline (its export's moss_codec_decoder) and gets its own voice-features
model (moss_codec_encoder: a reference clip -> its codec codes). `make-tiny --weights bin` writes the weights as
pytorch_model.bin (what the published repository is reported to ship) instead of model.safetensors.
"""

from __future__ import annotations

import dataclasses

from export.family import TinyOption, inline_family
from ttscore.contract.moss_tts_nano import graphs as lm
from ttscore.contract.moss_tts_nano import rules

FAMILY = dataclasses.replace(
    inline_family(
        rules.FAMILY, display=rules.DISPLAY, hub_org="OpenMOSS-Team",
        signature=f"config.json with model_type {lm.MODEL_TYPE}",
        detect="is_moss_tts_nano", export="export_moss", make_tiny="make_tiny_moss", encoder=rules.ENCODER_MODEL,
    ),
    tiny_options=(TinyOption("weights", "the weights file: model.safetensors (safetensors) or pytorch_model.bin (bin)",
                             choices=("safetensors", "bin")),),
    revision=rules.EXPORT_REVISION,
)
