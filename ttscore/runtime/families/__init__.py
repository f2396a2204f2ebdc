"""The model families this runtime serves: the one registration point of a new family.

Every family folder here has the same files: `__init__.py` (FAMILY, the ttscore.runtime.family.Family),
`checkpoint.py` (the checkpoint's facts: `<Family>Info`, read_checkpoint), `request.py` (the request
dataclass `admit` takes), `model.py` (the loaded FamilyModel), `tokenizer.py` (text -> ids), and what
else only that family needs. A family outside the project registers through ttscore.contract.plugins.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

from ttscore.contract import plugins
from ttscore.contract.errors import ArtifactError
from ttscore.contract.manifest import read_manifest
from ttscore.runtime.families import (
    breeze_tts_2,
    cosyvoice3,
    fish_speech,
    gepard,
    omnivoice,
    qwen3_tts,
    voxcpm2,
    voxtral_tts,
)
from ttscore.runtime.family import Family, FamilyModel

_FAMILIES: list[Family] = [
    qwen3_tts.FAMILY,
    voxcpm2.FAMILY,
    breeze_tts_2.FAMILY,
    omnivoice.FAMILY,
    gepard.FAMILY,
    voxtral_tts.FAMILY,
    fish_speech.FAMILY,
    cosyvoice3.FAMILY,
    *cast("list[Family]", plugins.layer_families("runtime")),
]
FAMILIES: dict[str, Family] = {f.name: f for f in _FAMILIES}


def load_model(
    artifacts: str | Path, *, threads: int | None = None, vocoder: bool = True, encoders: bool = True
) -> FamilyModel:
    """The exported checkpoint in `artifacts`, loaded by the family its manifest names."""
    manifest = read_manifest(artifacts)
    family = FAMILIES.get(manifest.family)
    if family is None:
        raise ArtifactError(f"{artifacts}: unknown model family {manifest.family!r} (known: {', '.join(FAMILIES)})")
    return family.load(Path(artifacts), manifest, threads=threads, vocoder=vocoder, encoders=encoders)
