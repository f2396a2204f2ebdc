"""Gepard-1.0's export entry (export/families.py), a declaration from the kit of export/family.py: each
checkpoint's speech_generation decodes inline (the export's NanoCodec `codec_stream` graph, exact streaming);
there are no voice features (one voice, `default`).
"""

from __future__ import annotations

from export.family import ExportFamily, inline_deploy, lazy, sized_make_tiny
from ttscore.contract import gepard as contract

SIZES = ("tiny", "real")  # export.gepard.tiny.SIZES

FAMILY = ExportFamily(
    name=contract.FAMILY, display=contract.RULES.name, hub_org="nineninesix",
    signature="config.json with model_type qwen3_5_text beside a gepard_config.json", demo=(("Gepard-1.0-tiny", {}),),
    detect=lazy("ttscore.runtime.families.gepard.checkpoint:is_gepard"),
    check=lazy("ttscore.runtime.families.gepard.checkpoint:read_checkpoint"),
    export=lazy("export.gepard.exporter:export_gepard"),
    make_tiny=sized_make_tiny("export.gepard.tiny:make_tiny_gepard", contract.FAMILY, SIZES),
    sizes=SIZES,
    deploy=inline_deploy(),
)
