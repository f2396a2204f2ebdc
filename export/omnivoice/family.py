"""OmniVoice's export entry (export/families.py): detect, check, export, make-tiny.

Served (demo: a tiny checkpoint): each checkpoint's speech_generation decodes inline (the codec
decoder of its own export, a whole utterance or sentence chunk at a time) and its codec_encoder
turns reference audio into codes (cloning). Light to import (no torch).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from export.family import Deployment, ExportFamily, ExportProgress, ServedCheckpoint, model_name
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
    """Each checkpoint's speech_generation decodes inline (the codec decoder: a non-autoregressive
    chunk is decoded whole) and gets its own `codec_encoder` (voice features: reference audio ->
    codes), suffixed with its name when several are served. An export without the encoder side still
    serves; its codec_encoder then refuses reference audio (400 naming `ref_audio`)."""
    plan = Deployment()
    alone = len(served) == 1
    for s in served:
        encoder = model_name(contract.ENCODER_MODEL, s, alone)
        plan.vocoder[s.name] = "inline"
        plan.voice_features[s.name] = encoder
        plan.models.append((encoder, contract.ENCODER_MODEL, {"artifacts_dir": str(s.artifacts)}))
    return plan


FAMILY = ExportFamily(
    name=contract.FAMILY, display=contract.RULES.name, hub_org="k2-fsa",
    signature=f"config.json with model_type {contract.FAMILY}", detect=detect, check=check, export=export,
    make_tiny=make_tiny, sizes=SIZES, deploy=deploy, demo=(("OmniVoice-tiny", {}),),
)
