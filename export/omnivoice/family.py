"""OmniVoice's export entry (export/families.py): detect, check, export, make-tiny.

Served (demo: a tiny checkpoint): each checkpoint's speech_generation decodes inline (the codec
decoder of its own export, a whole utterance or sentence chunk at a time); reference audio (cloning)
is not served yet. Light to import (no torch).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from export.family import Deployment, ExportFamily, ExportProgress, ServedCheckpoint
from ttscore.contract import omnivoice as contract
from ttscore.contract.errors import InvalidRequest

SIZES = ("tiny", "real")  # export.omnivoice.tiny.SIZES


def detect(checkpoint: Path) -> bool:
    from ttscore.runtime.families.omnivoice.checkpoint import is_omnivoice

    return is_omnivoice(checkpoint)


def check(checkpoint: Path) -> object:
    from ttscore.runtime.families.omnivoice.checkpoint import read_checkpoint

    return read_checkpoint(checkpoint)


def export(src: Path, tmp: Path, precision: str, progress: ExportProgress | None,
           source: dict[str, Any]) -> dict[str, Any]:
    from export.omnivoice.exporter import export_omnivoice

    return export_omnivoice(src, tmp, precision, progress, source)


def make_tiny(out: Path, seed: int = 0, size: str = "tiny") -> Path:
    from export.omnivoice.tiny import make_tiny_omnivoice

    if size not in SIZES:
        raise InvalidRequest(f"--family {contract.FAMILY} takes --size {' or '.join(SIZES)}", "size")
    return make_tiny_omnivoice(Path(out), seed=seed, size=size)


def deploy(served: Sequence[ServedCheckpoint]) -> Deployment:
    """No Triton model besides each checkpoint's speech_generation: the codec decoder runs inline
    (not a streaming vocoder: a non-autoregressive chunk is decoded whole) and no voice-features model
    is rendered (the gateway refuses `ref_audio` for this family for now)."""
    plan = Deployment()
    for s in served:
        plan.vocoder[s.name] = "inline"
        plan.voice_features[s.name] = None
    return plan


FAMILY = ExportFamily(
    name=contract.FAMILY, display=contract.RULES.name, hub_org="k2-fsa",
    signature=f"config.json with model_type {contract.FAMILY}", detect=detect, check=check, export=export,
    make_tiny=make_tiny, sizes=SIZES, deploy=deploy, demo=(("OmniVoice-tiny", {}),),
)
