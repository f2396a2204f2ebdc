"""Fish Speech S2 Pro's export entry (export/families.py): detect, check, make-tiny.

Exported (slow_step, fast_step, dac_stream, dac_encode, tables), not served yet (no demo; `deploy` refuses):
export/fish_speech/README.md says what is done and what is left. Light to import (no torch).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from export.family import Deployment, ExportFamily, ExportProgress, ServedCheckpoint
from ttscore.contract import fish_speech as contract
from ttscore.contract.errors import CheckpointError, InvalidRequest

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
    raise CheckpointError(f"{contract.DISPLAY} is not served yet")


FAMILY = ExportFamily(
    name=contract.FAMILY, display=contract.DISPLAY, hub_org=contract.HUB_ORG,
    signature=f"config.json with model_type {contract.MODEL_TYPE}",
    detect=detect, check=check, export=export, make_tiny=make_tiny, sizes=SIZES, deploy=deploy,
)
