"""The gateway adapters of the model families, by manifest `family` (gateway.family.FamilyAdapter).

The registry: one line per built-in family, then the adapters of external family packages
(ttscore.contract.plugins, layer "gateway").
"""

from __future__ import annotations

from typing import cast

from ttscore.contract import plugins

from ..family import FamilyAdapter
from . import breeze_tts_2, cosyvoice3, fish_speech, gepard, omnivoice, qwen3_tts, voxcpm2, voxtral_tts

ADAPTERS: dict[str, FamilyAdapter] = {a.family: a for a in (
    cast(FamilyAdapter, qwen3_tts.ADAPTER),
    cast(FamilyAdapter, voxcpm2.ADAPTER),
    cast(FamilyAdapter, breeze_tts_2.ADAPTER),
    cast(FamilyAdapter, omnivoice.ADAPTER),
    cast(FamilyAdapter, gepard.ADAPTER),
    cast(FamilyAdapter, voxtral_tts.ADAPTER),
    cast(FamilyAdapter, fish_speech.ADAPTER),
    cast(FamilyAdapter, cosyvoice3.ADAPTER),
    *(cast(FamilyAdapter, a) for a in plugins.layer_families("gateway")),
)}


def adapter(family: str) -> FamilyAdapter:
    """The adapter of a manifest family; KeyError naming the known ones."""
    try:
        return ADAPTERS[family]
    except KeyError:
        raise KeyError(f"no gateway adapter for model family {family!r} (known: {', '.join(ADAPTERS)})") from None


__all__ = ["ADAPTERS", "adapter"]
