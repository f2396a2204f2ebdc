"""The model families this runtime serves: the built-in ones by folder (ttscore.contract.plugins.BUILT_IN), then
the external ones.

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
from ttscore.runtime.family import Family, FamilyModel

FAMILIES = cast("dict[str, Family]", plugins.registry(__name__, "runtime"))


def load_model(
    artifacts: str | Path, *, threads: int | None = None, vocoder: bool = True, encoders: bool = True
) -> FamilyModel:
    """The exported checkpoint in `artifacts`, loaded by the family its manifest names."""
    manifest = read_manifest(artifacts)
    family = FAMILIES.get(manifest.family)
    if family is None:
        raise ArtifactError(f"{artifacts}: unknown model family {manifest.family!r} (known: {', '.join(FAMILIES)})")
    return family.load(Path(artifacts), manifest, threads=threads, vocoder=vocoder, encoders=encoders)
