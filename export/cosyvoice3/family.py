"""CosyVoice3's export entry (export/families.py), a declaration from the kit of export/family.py: each
checkpoint's speech_generation runs the hop-stream vocoder inline (the flow + HiFT re-run per hop, under the
chunk mask for streamed and whole requests alike) and gets its own `prompt_encoder` (voice features: reference
audio -> speech tokens, prompt mel, speaker embedding).
"""

from __future__ import annotations

from export.family import ExportFamily, inline_deploy, lazy, sized_make_tiny
from ttscore.contract import cosyvoice3 as contract

SIZES = ("tiny", "real")  # export.cosyvoice3.tiny.SIZES

FAMILY = ExportFamily(
    name=contract.FAMILY, display=contract.DISPLAY, hub_org=contract.HUB_ORG,
    signature="cosyvoice3.yaml beside llm.pt, flow.pt, hift.pt and CosyVoice-BlankEN/",
    demo=(("CosyVoice3-tiny", {}),),
    detect=lazy("ttscore.runtime.families.cosyvoice3.checkpoint:is_cosyvoice3"),
    check=lazy("ttscore.runtime.families.cosyvoice3.checkpoint:read_checkpoint"),
    export=lazy("export.cosyvoice3.exporter:export_cosyvoice3"),
    make_tiny=sized_make_tiny("export.cosyvoice3.tiny:make_tiny_cosyvoice3", contract.FAMILY, SIZES),
    sizes=SIZES,
    deploy=inline_deploy(contract.ENCODER_MODEL),
)
