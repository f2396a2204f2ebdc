"""Gepard-1.0's export entry (export/families.py), a declaration from the kit of export/family.py: each
checkpoint's speech_generation decodes inline (the export's NanoCodec `codec_stream` graph, exact streaming);
there are no voice features (one voice, `default`).
"""

from __future__ import annotations

from export.family import inline_family
from ttscore.contract import gepard as contract

FAMILY = inline_family(
    contract.FAMILY, display=contract.RULES.name, hub_org="nineninesix",
    signature="config.json with model_type qwen3_5_text beside a gepard_config.json",
    detect="is_gepard", export="export_gepard", make_tiny="make_tiny_gepard",
)
