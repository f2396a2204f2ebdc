"""Voxtral TTS's export entry (export/families.py): detect, check, make-tiny.

Served (demo: a tiny checkpoint): each checkpoint's speech_generation decodes inline (the export's
`codec_stream` graph, Mistral's codec as an exact streaming decoder); there are no voice features (preset
voices only: the public checkpoint has no codec encoder). Light to import (no torch).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from export.family import Deployment, ExportFamily, ExportProgress, ServedCheckpoint
from ttscore.contract import voxtral_tts as contract
from ttscore.contract.errors import InvalidRequest

SIZES = ("tiny", "real")  # export.voxtral_tts.tiny.SIZES


def detect(checkpoint: Path) -> bool:
    from ttscore.runtime.families.voxtral_tts.checkpoint import is_voxtral_tts

    return is_voxtral_tts(checkpoint)


def check(checkpoint: Path) -> object:
    from ttscore.runtime.families.voxtral_tts.checkpoint import read_checkpoint

    return read_checkpoint(checkpoint)


def export(src: Path, tmp: Path, precision: str, progress: ExportProgress | None,
           source: dict[str, Any]) -> dict[str, Any]:
    from export.voxtral_tts.exporter import export_voxtral

    return export_voxtral(src, tmp, precision, progress, source)


def make_tiny(out: Path, seed: int = 0, size: str = "tiny") -> Path:
    from export.voxtral_tts.tiny import make_tiny_voxtral

    if size not in SIZES:
        raise InvalidRequest(f"--family {contract.FAMILY} takes --size {' or '.join(SIZES)}", "size")
    return make_tiny_voxtral(Path(out), seed=seed, size=size)


def deploy(served: Sequence[ServedCheckpoint]) -> Deployment:
    """Each checkpoint decodes inline (its own export's codec_stream graph) and has no voice-features model."""
    plan = Deployment()
    for s in served:
        plan.vocoder[s.name] = "inline"
        plan.voice_features[s.name] = None
    return plan


FAMILY = ExportFamily(
    name=contract.FAMILY, display=contract.DISPLAY, hub_org=contract.HUB_ORG,
    signature="Mistral-format params.json with multimodal.audio_model_args.acoustic_transformer_args",
    detect=detect, check=check, export=export, make_tiny=make_tiny, sizes=SIZES, deploy=deploy,
    demo=(("Voxtral-TTS-tiny", {}),),
)
