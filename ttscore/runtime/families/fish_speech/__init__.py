"""Fish Speech S2 Pro (fishaudio/s2-pro): a dual-AR model (Slow AR over frames, Fast AR over each frame's
residual codes) with per-request seeded sampling noise over exported graphs, the DAC decoder as an exact
streaming vocoder; cloning from a reference clip's DAC codes (export/fish_speech/README.md)."""

from __future__ import annotations

from ttscore.contract import fish_speech as contract
from ttscore.runtime.family import DeclaredFamily

FAMILY = DeclaredFamily.of(
    contract, "FishModel", "FishRequest", takes=("encoders",), renames={"ref_dac_codes": "ref_codes"}
)
