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
    from ttscore.contract.manifest import read_manifest
    from ttscore.runtime.families.qwen3_tts.checkpoint import read_checkpoint
    from ttscore.tools.progress import Stages

    src = checkpoint.resolve()
    from ttscore.runtime.families.voxcpm2 import checkpoint as voxcpm2_checkpoint

    if voxcpm2_checkpoint.is_voxcpm2(src):
        voxcpm2_checkpoint.read_checkpoint(src)  # fail fast, before any heavy import
    else:
        read_checkpoint(src)
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


DEMO = (("custom_voice", "Qwen3-TTS-tiny-CustomVoice"), ("base", "Qwen3-TTS-tiny-Base"))
VOXCPM2_DEMO = "VoxCPM2-tiny"


def demo_checkpoints(root: Path) -> list[Path]:
    """The tiny random-weight demo checkpoints of `serve` and `prepare --demo` (built once under
    `root`): Qwen3-TTS CustomVoice and Base, and VoxCPM2."""
    from export.qwen3_tts.tiny import make_tiny
    from export.voxcpm2.tiny import make_tiny_voxcpm2

    out = []
    for variant, name in DEMO:
        path = root / name
        if not (path / "model.safetensors").is_file():
            make_tiny(variant, path, seed=0)
        out.append(path)
    vox = root / VOXCPM2_DEMO
    if not (vox / "model.safetensors").is_file():
        make_tiny_voxcpm2(vox, seed=0)
    out.append(vox)
    return out
