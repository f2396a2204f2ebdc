"""Gepard-1.0's export entry (export/families.py): detect, check, export, make-tiny.

Served (demo: a tiny checkpoint): each checkpoint's speech_generation decodes inline (the export's
NanoCodec `codec_stream` graph, exact streaming); there are no voice features (one voice, `default`).
Light to import (no torch): the heavy modules load when an entry point is called.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from export.family import Deployment, ExportFamily, ExportProgress, ServedCheckpoint
from ttscore.contract import gepard as contract
from ttscore.contract.errors import InvalidRequest

SIZES = ("tiny", "real")  # export.gepard.tiny.SIZES


def detect(checkpoint: Path) -> bool:
    from ttscore.runtime.families.gepard.checkpoint import is_gepard

    return is_gepard(checkpoint)


def check(checkpoint: Path) -> object:
    from ttscore.runtime.families.gepard.checkpoint import read_checkpoint

    return read_checkpoint(checkpoint)


def export(src: Path, tmp: Path, precision: str, progress: ExportProgress | None,
           source: dict[str, Any]) -> dict[str, Any]:
    from export.gepard.exporter import export_gepard

    return export_gepard(src, tmp, precision, progress, source)


def make_tiny(out: Path, seed: int = 0, size: str = "tiny") -> Path:
    from export.gepard.tiny import make_tiny_gepard

    if size not in SIZES:
        raise InvalidRequest(f"--family {contract.FAMILY} takes --size {' or '.join(SIZES)}", "size")
    return make_tiny_gepard(Path(out), seed=seed, size=size)


def deploy(served: Sequence[ServedCheckpoint]) -> Deployment:
    """Each checkpoint decodes inline (its own export's codec_stream graph) and has no voice-features model."""
    plan = Deployment()
    for s in served:
        plan.vocoder[s.name] = "inline"
        plan.voice_features[s.name] = None
    return plan


FAMILY = ExportFamily(
    name=contract.FAMILY, display=contract.RULES.name, hub_org="nineninesix",
    signature="config.json with model_type qwen3_5_text beside a gepard_config.json", detect=detect, check=check,
    export=export, make_tiny=make_tiny, sizes=SIZES, deploy=deploy, demo=(("Gepard-1.0-tiny", {}),),
)
