"""The model families export knows: the one registration point of a family's export entry.

`export`, `make-tiny`, `prepare` and `serve` reach a family only through `FAMILIES` (an
export.family.ExportFamily each): a checkpoint directory's family is the one whose `detect` takes it.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

from export.family import ExportFamily
from ttscore.contract import plugins
from ttscore.contract.errors import ArtifactError, CheckpointError


def _external() -> list[ExportFamily]:
    found = plugins.layer_families("export")
    for entry in found:
        if not isinstance(entry, ExportFamily):
            raise TypeError(f"an export FAMILY must be an export.family.ExportFamily, not {type(entry).__name__}")
    return [entry for entry in found if isinstance(entry, ExportFamily)]


FAMILIES: dict[str, ExportFamily] = plugins.registry(
    cast("list[ExportFamily]", [*plugins.builtin_parts("export.{}.family", "FAMILY"), *_external()]),
    lambda f: f.name, "export family")
DEFAULT = plugins.BUILTIN[0]  # make-tiny's --family when none is given
# The forced aligner's entry (word timestamps): exported like a family's checkpoint, but no speech family (not in
# FAMILIES: it serves no speech_generation model).
ALIGNER = cast("ExportFamily", plugins.aligner_part("export.{}.component", "ENTRY"))


def family_of(checkpoint: Path) -> ExportFamily:
    """The family whose checkpoint `checkpoint` is (its config.json decides); CheckpointError when
    the directory does not exist or no family recognises it."""
    root = Path(checkpoint)
    if not root.is_dir():
        raise CheckpointError(f"checkpoint directory {root} does not exist")
    found = [f for f in FAMILIES.values() if f.detect(root)]
    if not found:
        known = "; ".join(f"{f.name}: {f.signature}" for f in FAMILIES.values())
        raise CheckpointError(f"{root} is not a checkpoint of a known model family ({known})")
    return found[0]


def export_entry(checkpoint: Path) -> ExportFamily:
    """What exports `checkpoint`: the forced aligner's entry when it is an aligner checkpoint, else its family's
    (family_of)."""
    root = Path(checkpoint)
    return ALIGNER if root.is_dir() and ALIGNER.detect(root) else family_of(root)


def family(name: str) -> ExportFamily:
    """The entry of the family a manifest names; ArtifactError for one this build does not know."""
    entry = FAMILIES.get(name)
    if entry is None:
        raise ArtifactError(f"unknown model family {name!r} (known: {', '.join(FAMILIES)})")
    return entry
