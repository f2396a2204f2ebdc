"""CosyVoice3's export entry (export/families.py): detect, check, make-tiny, export.

Not served yet (no demo): the export writes and validates the graphs; the runtime, backend and gateway
layers are still to come (export/cosyvoice3/README.md). Light to import (no torch).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from export.family import Deployment, ExportFamily, ExportProgress, ServedCheckpoint
from ttscore.contract import cosyvoice3 as contract
from ttscore.contract.errors import InvalidRequest

SIZES = ("tiny", "real")  # export.cosyvoice3.tiny.SIZES


def detect(checkpoint: Path) -> bool:
    from ttscore.runtime.families.cosyvoice3.checkpoint import is_cosyvoice3

    return is_cosyvoice3(checkpoint)


def check(checkpoint: Path) -> object:
    from ttscore.runtime.families.cosyvoice3.checkpoint import read_checkpoint

    return read_checkpoint(checkpoint)


def export(src: Path, tmp: Path, precision: str, progress: ExportProgress | None,
           source: dict[str, Any]) -> dict[str, Any]:
    from export.cosyvoice3.exporter import export_cosyvoice3

    return export_cosyvoice3(src, tmp, precision, progress, source)


def make_tiny(out: Path, seed: int = 0, size: str = "tiny") -> Path:
    from export.cosyvoice3.tiny import make_tiny_cosyvoice3

    if size not in SIZES:
        raise InvalidRequest(f"--family {contract.FAMILY} takes --size {' or '.join(SIZES)}", "size")
    return make_tiny_cosyvoice3(Path(out), seed=seed, size=size)


def deploy(served: Sequence[ServedCheckpoint]) -> Deployment:
    raise InvalidRequest(f"{contract.DISPLAY} is not served yet (export only; export/cosyvoice3/README.md)", "model")


FAMILY = ExportFamily(
    name=contract.FAMILY, display=contract.DISPLAY, hub_org=contract.HUB_ORG,
    signature="cosyvoice3.yaml beside llm.pt, flow.pt, hift.pt and CosyVoice-BlankEN/",
    detect=detect, check=check, export=export, make_tiny=make_tiny, sizes=SIZES, deploy=deploy,
    demo=(),
)
