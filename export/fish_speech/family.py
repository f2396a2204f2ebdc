"""Fish Speech S2 Pro's export entry (export/families.py): detect, check, make-tiny.

Not served yet (no demo): `export` refuses a Fish Speech checkpoint with a message saying so (the Slow AR,
Fast AR and DAC graphs are not written yet; export/fish_speech/README.md says what is done and what is
left). Light to import (no torch).
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
    check(src)
    raise CheckpointError(f"{src}: {contract.DISPLAY} checkpoints are recognised and checked, but their export "
                          "is not implemented yet (export/fish_speech/README.md)")


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
