"""Fish Speech S2 Pro's export entry (export/families.py): detect, check, make-tiny, deploy.

Served (demo: a tiny checkpoint): each checkpoint's speech_generation decodes inline (the export's `dac_stream`
graph, the DAC decoder as an exact streaming decoder) and gets its own `dac_encoder` (voice features: reference
audio -> DAC codes). Light to import (no torch).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from export.family import Deployment, ExportFamily, ExportProgress, ServedCheckpoint, model_name
from ttscore.contract import fish_speech as contract
from ttscore.contract.errors import InvalidRequest

SIZES = ("tiny", "real")  # export.fish_speech.tiny.SIZES


def detect(checkpoint: Path) -> bool:
    from ttscore.runtime.families.fish_speech.checkpoint import is_fish_speech

    return is_fish_speech(checkpoint)


def check(checkpoint: Path) -> object:
    from ttscore.runtime.families.fish_speech.checkpoint import read_checkpoint

    return read_checkpoint(checkpoint)


def export(src: Path, tmp: Path, precision: str, progress: ExportProgress | None,
           source: dict[str, Any]) -> dict[str, Any]:
    from export.fish_speech.exporter import export_fish

    return export_fish(src, tmp, precision, progress, source)


def make_tiny(out: Path, seed: int = 0, size: str = "tiny") -> Path:
    from export.fish_speech.tiny import make_tiny_fish

    if size not in SIZES:
        raise InvalidRequest(f"--family {contract.FAMILY} takes --size {' or '.join(SIZES)}", "size")
    return make_tiny_fish(Path(out), seed=seed, size=size)


def deploy(served: Sequence[ServedCheckpoint]) -> Deployment:
    """Each checkpoint's speech_generation decodes inline (its export's dac_stream) and gets its own
    `dac_encoder` (voice features: reference audio -> DAC codes), suffixed with its name when several are served."""
    plan = Deployment()
    alone = len(served) == 1
    for s in served:
        encoder = model_name(contract.ENCODER_MODEL, s, alone)
        plan.vocoder[s.name] = "inline"
        plan.voice_features[s.name] = encoder
        plan.models.append((encoder, contract.ENCODER_MODEL, {"artifacts_dir": str(s.artifacts)}))
    return plan


FAMILY = ExportFamily(
    name=contract.FAMILY, display=contract.DISPLAY, hub_org=contract.HUB_ORG,
    signature=f"config.json with model_type {contract.MODEL_TYPE}",
    detect=detect, check=check, export=export, make_tiny=make_tiny, sizes=SIZES, deploy=deploy,
    demo=(("Fish-Speech-S2-Pro-tiny", {}),),
)
