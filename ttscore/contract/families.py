"""The model families' request rules by manifest `family` (what the gateway may know of each family)."""

from __future__ import annotations

from ttscore.contract import qwen3_tts, voxcpm2
from ttscore.contract.rules import FamilyRules

__all__ = ["DISPLAY_NAMES", "RULES", "UNSUPPORTED_FIELDS", "FamilyRules"]

RULES: dict[str, FamilyRules] = {r.family: r for r in (qwen3_tts.RULES, voxcpm2.RULES)}
# Speech API fields a family does not take: a request giving one is refused (400 naming it).
UNSUPPORTED_FIELDS: dict[str, tuple[str, ...]] = {qwen3_tts.FAMILY: (), voxcpm2.FAMILY: voxcpm2.UNSUPPORTED_FIELDS}
DISPLAY_NAMES: dict[str, str] = {qwen3_tts.FAMILY: "Qwen3-TTS", voxcpm2.FAMILY: "VoxCPM2"}
# Each family's wire rows: its speech_generation inputs and public Triton models (ttscore.contract.tensors).
WIRES = (qwen3_tts.WIRE, voxcpm2.WIRE)
