"""Fish Speech S2 Pro (fishaudio/s2-pro): a dual-AR model (Slow AR over frames, Fast AR over each frame's
residual codes) with per-request seeded sampling noise over exported graphs, the DAC decoder as an exact
streaming vocoder; cloning from a reference clip's DAC codes (export/fish_speech/README.md)."""

from __future__ import annotations

from ttscore.contract import fish_speech as contract
from ttscore.runtime.family import DeclaredFamily

FAMILY = DeclaredFamily(
    name=contract.FAMILY,
    rules=contract.RULES,
    model="ttscore.runtime.families.fish_speech.model:FishModel",
    request="ttscore.runtime.families.fish_speech.request:FishRequest",
    offline_tools="ttscore.runtime.families.fish_speech.offline:OFFLINE",
    takes=("encoders",),
    renames={"ref_dac_codes": "ref_codes"},
)
