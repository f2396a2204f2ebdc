"""The model families this runtime serves, by name: `ttscore.runtime.families.<name>.FAMILY` of every name in
ttscore.contract.plugins.BUILTIN, then the families of external packages.

Every family folder here has the same files: `__init__.py` (FAMILY, the ttscore.runtime.family.Family),
`checkpoint.py` (the checkpoint's facts: `<Family>Info`, read_checkpoint), `request.py` (the request
dataclass `admit` takes), `model.py` (the loaded FamilyModel), `tokenizer.py` (text -> ids), and what
else only that family needs.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

from ttscore.contract import plugins
from ttscore.contract.errors import ArtifactError
from ttscore.contract.manifest import read_manifest
from ttscore.runtime.family import Family, FamilyModel

FAMILIES: dict[str, Family] = plugins.registry(
    cast("list[Family]", [*plugins.builtin_parts("ttscore.runtime.families.{}", "FAMILY"),
                          *plugins.layer_families("runtime")]),
    lambda f: f.name, "runtime family")


def load_model(
    artifacts: str | Path, *, threads: int | None = None, vocoder: bool = True, encoders: bool = True
) -> FamilyModel:
    """The exported checkpoint in `artifacts`, loaded by the family its manifest names."""
    manifest = read_manifest(artifacts)
    family = FAMILIES.get(manifest.family)
    if family is None:
        raise ArtifactError(f"{artifacts}: unknown model family {manifest.family!r} (known: {', '.join(FAMILIES)})")
    # An export of another format fails at load (the model is not ready: 503), not request by request.
    reads = getattr(family, "export_revision", 1)
    if manifest.export_revision != reads:
        raise ArtifactError(f"{artifacts}: exported at {manifest.family} export revision {manifest.export_revision}, "
                            f"this runtime reads revision {reads}: re-export it (triton-tts serve and prepare do)")
    return family.load(Path(artifacts), manifest, threads=threads, vocoder=vocoder, encoders=encoders)
