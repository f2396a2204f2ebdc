"""Where exported artifacts live and when a checkpoint needs (re-)exporting: shared by the CLI commands."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from ttscore.contract.errors import ArtifactError
from ttscore.tools.checkpoints import Checkpoint, resolve_checkpoint

logger = logging.getLogger(__name__)


def cache_root() -> Path:
    return Path(os.environ.get("TRITON_TTS_CACHE", Path.home() / ".cache" / "triton-tts"))


def cached_export(fingerprint: str, precision: str) -> Path:
    """Where the cache keeps the export of the checkpoint with this content fingerprint: keyed by
    content, not path, so two paths to the same files share one export."""
    return cache_root() / "artifacts" / f"{fingerprint}-{precision}"


def _digests() -> Path:
    return cache_root() / "digests.json"


def checkpoint_fingerprint(src: Path) -> str:
    """export.exporter.fingerprint of `src`, with the file hashes remembered across runs in the
    cache (by real path, size and modification time): a large checkpoint is read once."""
    from export.exporter import fingerprint

    try:
        memo = json.loads(_digests().read_text(encoding="utf-8"))
        memo = memo if isinstance(memo, dict) else {}
    except (OSError, ValueError):
        memo = {}
    before = len(memo)
    fp = fingerprint(src, memo)
    if len(memo) != before:
        try:
            _digests().parent.mkdir(parents=True, exist_ok=True)
            tmp = _digests().with_name(f".digests.{os.getpid()}")
            tmp.write_text(json.dumps(memo), encoding="utf-8")
            os.replace(tmp, _digests())
        except OSError as exc:  # a read-only cache only costs hashing again
            logger.warning("cannot remember checkpoint file hashes in %s: %s", _digests(), exc)
    return fp


def ensure_artifacts(checkpoint: str | Path | Checkpoint, precision: str = "fp32", out: Path | None = None, *,
                     quiet: bool = False) -> Path:
    """Artifacts for a checkpoint (a directory, cache snapshot or repo id: ttscore.tools.checkpoints),
    exported into the cache (or `out`) unless an up-to-date export exists; an export shows its
    stages (ttscore.tools.progress) unless `quiet`."""
    from export.exporter import export_checkpoint
    from export.families import family_of
    from ttscore.contract.manifest import read_manifest
    from ttscore.tools.progress import Stages

    ckpt = resolve_checkpoint(checkpoint)
    src = ckpt.path.resolve()
    family_of(src).check(src)  # fail fast, before any heavy import
    fp = checkpoint_fingerprint(src)
    target = out or cached_export(fp, precision)
    try:
        manifest = read_manifest(target)
        if manifest.fingerprint == fp and manifest.precision == precision:
            return target
    except ArtifactError:
        pass
    logger.info("exporting %s -> %s (%s)", src, target, precision)
    with Stages(f"export {ckpt.name}", quiet=quiet) as stages:
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
