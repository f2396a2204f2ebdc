"""Where exported artifacts live and when a checkpoint needs (re-)exporting: shared by the CLI commands."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from ttscore.contract.errors import ArtifactError

logger = logging.getLogger(__name__)


def cache_root() -> Path:
    return Path(os.environ.get("TRITON_TTS_CACHE", Path.home() / ".cache" / "triton-tts"))


def ensure_artifacts(checkpoint: Path, precision: str = "fp32", out: Path | None = None, *, quiet: bool = False
                     ) -> Path:
    """Artifacts for a checkpoint, exported into the cache (or `out`) unless an up-to-date export
    exists; an export shows its stages (ttscore.tools.progress) unless `quiet`."""
    from export.exporter import export_checkpoint, fingerprint
    from export.families import family_of
    from ttscore.contract.manifest import read_manifest
    from ttscore.tools.progress import Stages

    src = checkpoint.resolve()
    family_of(src).check(src)  # fail fast, before any heavy import
    fp = fingerprint(src)
    target = out or cache_root() / "artifacts" / f"{src.name}-{fp}-{precision}"
    try:
        manifest = read_manifest(target)
        if manifest.fingerprint == fp and manifest.precision == precision:
            return target
    except ArtifactError:
        pass
    logger.info("exporting %s -> %s (%s)", src, target, precision)
    with Stages(f"export {checkpoint.name}", quiet=quiet) as stages:
        export_checkpoint(src, target, precision=precision, progress=stages.hook)
    return target


def demo_checkpoints(root: Path) -> list[Path]:
    """The tiny random-weight demo checkpoints of `serve` and `prepare --demo` (built once under
    `root`): every registered family's (export.family.ExportFamily.demo), in registry order."""
    from export.families import FAMILIES

    out = []
    for family in FAMILIES.values():
        for name, options in family.demo:
            path = root / name
            if not family.detect(path):
                family.make_tiny(path, seed=0, **options)
            out.append(path)
    return out
