"""The model families the Triton side serves: the one registration point of a new family's glue.

One line per built-in family, then the families of external packages (ttscore.contract.plugins).
The renderer (ttscore.backend.repository) and the deployment planners ask this, never a family by name.
"""

from __future__ import annotations

from typing import cast

from ttscore.backend import (
    breeze_tts_2,
    cosyvoice3,
    fish_speech,
    gepard,
    omnivoice,
    qwen3_tts,
    voxcpm2,
    voxtral_tts,
)
from ttscore.backend.family import BackendFamily, TritonModel
from ttscore.contract import plugins

_FAMILIES: list[BackendFamily] = [
    qwen3_tts.FAMILY,
    voxcpm2.FAMILY,
    breeze_tts_2.FAMILY,
    omnivoice.FAMILY,
    gepard.FAMILY,
    voxtral_tts.FAMILY,
    fish_speech.FAMILY,
    cosyvoice3.FAMILY,
    *cast("list[BackendFamily]", plugins.layer_families("backend")),
]
FAMILIES: dict[str, BackendFamily] = {f.name: f for f in _FAMILIES}


def family_of_model(model: str) -> BackendFamily | None:
    """The family a (committed) Triton model belongs to; None for the shared ones (speech_generation)."""
    return next((f for f in FAMILIES.values() if f.model(model) is not None), None)


def triton_model(model: str) -> TritonModel | None:
    """What a family declares of a committed Triton model; None for the shared ones."""
    family = family_of_model(model)
    return family.model(model) if family is not None else None
