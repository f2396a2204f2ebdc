"""The model families the Triton side serves: the one registration point of a new family's glue.

`ttscore.backend.<name>.FAMILY` of every built-in family (ttscore.contract.plugins.BUILTIN), then the families
of external packages.
The renderer (ttscore.backend.repository) and the deployment planners ask this, never a family by name.
"""

from __future__ import annotations

from typing import cast

from ttscore.backend.family import BackendFamily, TritonModel
from ttscore.contract import aligner, plugins

FAMILIES: dict[str, BackendFamily] = plugins.registry(
    cast("list[BackendFamily]", [*plugins.builtin_parts("ttscore.backend.{}", "FAMILY"),
                                 *plugins.layer_families("backend")]),
    lambda f: f.name, "backend family")

# Triton models served beside the families that belong to none of them: the forced aligner (word timestamps), in a
# deployment that serves an aligner export.
COMPONENT_MODELS: tuple[str, ...] = (aligner.MODEL,)


def family_of_model(model: str) -> BackendFamily | None:
    """The family a (committed) Triton model belongs to; None for the shared ones (speech_generation)."""
    return next((f for f in FAMILIES.values() if f.model(model) is not None), None)


def triton_model(model: str) -> TritonModel | None:
    """What a family declares of a committed Triton model; None for the shared ones."""
    family = family_of_model(model)
    return family.model(model) if family is not None else None
