"""CosyVoice3 (FunAudioLLM/Fun-CosyVoice3-0.5B-2512): checkpoint reader, front-end, sampling, the offline
route over the exported graphs and the FamilyModel for the shared engine (export/cosyvoice3/README.md)."""

from __future__ import annotations

from ttscore.contract import cosyvoice3 as contract
from ttscore.runtime.family import DeclaredFamily

FAMILY = DeclaredFamily.of(contract, "CosyVoice3Model", "from_wire", takes=("manifest", "encoders"))
