"""The gateway adapters of the model families, by manifest `family` (gateway.family.FamilyAdapter).

The registry: `gateway.families.<name>.ADAPTER` of every built-in family (ttscore.contract.plugins.BUILTIN), then
the adapters of external family packages (layer "gateway").
"""

from __future__ import annotations

from typing import cast

from ttscore.contract import plugins

from ..family import FamilyAdapter

ADAPTERS: dict[str, FamilyAdapter] = plugins.registry(
    cast("list[FamilyAdapter]", [*plugins.builtin_parts("gateway.families.{}", "ADAPTER"),
                                 *plugins.layer_families("gateway")]),
    lambda a: a.family, "gateway adapter")


def adapter(family: str) -> FamilyAdapter:
    """The adapter of a manifest family; KeyError naming the known ones."""
    try:
        return ADAPTERS[family]
    except KeyError:
        raise KeyError(f"no gateway adapter for model family {family!r} (known: {', '.join(ADAPTERS)})") from None


__all__ = ["ADAPTERS", "adapter"]
