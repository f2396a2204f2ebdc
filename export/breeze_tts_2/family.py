"""Breeze-TTS-2's export entry (export/families.py): detect, check, export, make-tiny.

Served (demo: a tiny checkpoint) in the four modes: each checkpoint's speech_generation decodes inline (the
Qwen3-TTS code2wav graph of its own export); its breeze_speech_encoder turns reference audio into codes.
Light to import (no torch): the heavy modules load when an entry point is called.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from export.family import Deployment, ExportFamily, ExportProgress, ServedCheckpoint, model_name
from ttscore.contract import breeze_tts_2 as contract
from ttscore.contract.errors import InvalidRequest

SIZES = ("tiny", "real")  # export.breeze_tts_2.tiny.SIZES


def detect(checkpoint: Path) -> bool:
    from ttscore.runtime.families.breeze_tts_2.checkpoint import is_breeze

    return is_breeze(checkpoint)


def check(checkpoint: Path) -> object:
    from ttscore.runtime.families.breeze_tts_2.checkpoint import read_checkpoint

    return read_checkpoint(checkpoint)


def export(src: Path, tmp: Path, precision: str, progress: ExportProgress | None,
           source: dict[str, Any]) -> dict[str, Any]:
    from export.breeze_tts_2.exporter import export_breeze

    return export_breeze(src, tmp, precision, progress, source)


def make_tiny(out: Path, seed: int = 0, size: str = "tiny") -> Path:
    from export.breeze_tts_2.tiny import make_tiny_breeze

    if size not in SIZES:
        raise InvalidRequest(f"--family {contract.FAMILY} takes --size {' or '.join(SIZES)}", "size")
    return make_tiny_breeze(Path(out), seed=seed, size=size)


def deploy(served: Sequence[ServedCheckpoint]) -> Deployment:
    """Each checkpoint decodes inline (the shared `code2wav` model is Qwen3-TTS's, read from a
    Qwen3-TTS export) and gets its own `breeze_speech_encoder` (voice features: reference audio ->
    the codes of its own audio_tokenizer), suffixed with its name when several are served."""
    plan = Deployment()
    alone = len(served) == 1
    for s in served:
        encoder = model_name(contract.SPEECH_ENCODER, s, alone)
        plan.vocoder[s.name] = "inline"
        plan.voice_features[s.name] = encoder
        plan.models.append((encoder, contract.SPEECH_ENCODER, {"artifacts_dir": str(s.artifacts)}))
    return plan


FAMILY = ExportFamily(
    name=contract.FAMILY,
    display="Breeze-TTS-2",
    hub_org="BreezeBlue",
    signature="config.json with model_type breeze, text_encoder_config and depth_decoder_config",
    detect=detect,
    check=check,
    export=export,
    make_tiny=make_tiny,
    sizes=SIZES,
    deploy=deploy,
    demo=(("Breeze-TTS-2-tiny", {}),),
)
