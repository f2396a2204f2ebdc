"""The model families this runtime serves: the one registration point of a new family."""

from __future__ import annotations

from pathlib import Path

from ttscore.contract.errors import ArtifactError
from ttscore.contract.manifest import read_manifest
from ttscore.runtime.families import qwen3_tts, voxcpm2
from ttscore.runtime.family import Family, FamilyModel

FAMILIES: dict[str, Family] = {f.name: f for f in (qwen3_tts.FAMILY, voxcpm2.FAMILY)}


def load_model(
    artifacts: str | Path, *, threads: int | None = None, vocoder: bool = True, encoders: bool = True
) -> FamilyModel:
    """The exported checkpoint in `artifacts`, loaded by the family its manifest names."""
    manifest = read_manifest(artifacts)
    family = FAMILIES.get(manifest.family)
    if family is None:
        raise ArtifactError(f"{artifacts}: unknown model family {manifest.family!r} (known: {', '.join(FAMILIES)})")
    return family.load(Path(artifacts), manifest, threads=threads, vocoder=vocoder, encoders=encoders)
