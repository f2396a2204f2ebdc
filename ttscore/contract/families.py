"""The model families' request rules by manifest `family` (what the gateway may know of each family).

The registry: `ttscore.contract.<name>.RULES` (and `.WIRE`) of every built-in family
(ttscore.contract.plugins.BUILTIN), then the families of external packages. Everything else asks it, never a family by name.
"""

from __future__ import annotations

from functools import reduce
from typing import cast

from ttscore.contract import plugins
from ttscore.contract.rules import FamilyRules, RefAudioBounds
from ttscore.contract.wire import FamilyWire

__all__ = ["DISPLAY_NAMES", "RULES", "UNSUPPORTED_FIELDS", "VARIANTS", "FamilyRules", "display_name", "field_range",
           "ref_audio_bounds", "rules_of"]


def _external() -> list[FamilyRules]:
    found = plugins.layer_families("contract")
    for rules in found:
        if not isinstance(rules, FamilyRules):
            raise TypeError(f"a contract family must be a FamilyRules, got {rules!r}")
    return [r for r in found if isinstance(r, FamilyRules)]


RULES: dict[str, FamilyRules] = plugins.registry(
    cast("list[FamilyRules]", [*plugins.builtin_parts("ttscore.contract.{}", "RULES"), *_external()]),
    lambda r: r.family, "contract family")
# Speech API fields a family does not take: a request giving one is refused (400 naming it).
UNSUPPORTED_FIELDS: dict[str, tuple[str, ...]] = {f: r.unsupported for f, r in RULES.items()}
DISPLAY_NAMES: dict[str, str] = {f: r.name for f, r in RULES.items()}
# Each family's wire rows: its speech_generation inputs and public Triton models (ttscore.contract.tensors).
WIRES: tuple[FamilyWire, ...] = tuple(cast("list[FamilyWire]", plugins.builtin_parts("ttscore.contract.{}", "WIRE")))
# Every checkpoint variant some family has (a deployment names one per served checkpoint).
VARIANTS: tuple[str, ...] = tuple(dict.fromkeys(v for r in RULES.values() for v in r.variants))


def rules_of(family: str) -> FamilyRules:
    try:
        return RULES[family]
    except KeyError:
        raise KeyError(f"unknown model family {family!r} (known: {', '.join(RULES)})") from None


def display_name(family: str | None) -> str:
    return DISPLAY_NAMES.get(family or "", family or "")


def field_range(name: str, families: list[str] | None = None) -> tuple[int, int]:
    """(lowest lo, highest hi) of an integer field over the families (default: all) that take it:
    what a request schema shared by those families accepts before the family's own rules."""
    rules = [r.field(name) for f, r in RULES.items() if (families is None or f in families) and r.has_field(name)]
    if not rules:
        raise KeyError(name)
    return min(r.lo for r in rules), max(r.hi for r in rules)


def ref_audio_bounds(families: list[str] | None = None) -> RefAudioBounds:
    """The widest reference-clip bounds of the families (default: all)."""
    chosen = [r.ref_audio for f, r in RULES.items() if families is None or f in families]
    return reduce(RefAudioBounds.widest, chosen) if chosen else RefAudioBounds()
