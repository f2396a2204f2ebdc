"""CosyVoice3's export entry (export/families.py): detect, check, make-tiny, export.

Served (demo: a tiny checkpoint): each checkpoint's speech_generation runs the flow + HiFT hop stream
inline and its prompt_encoder turns reference audio into the clip's speech tokens, prompt mel and speaker
embedding (export/cosyvoice3/README.md). Light to import (no torch).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from export.family import Deployment, ExportFamily, ExportProgress, ServedCheckpoint, model_name
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
    """Each checkpoint's speech_generation runs the hop-stream vocoder inline (the flow + HiFT re-run per
    hop, under the chunk mask for streamed and whole requests alike) and gets its own `prompt_encoder`
    (voice features: reference audio -> speech tokens, prompt mel, speaker embedding), suffixed with its
    name when several are served."""
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
    signature="cosyvoice3.yaml beside llm.pt, flow.pt, hift.pt and CosyVoice-BlankEN/",
    detect=detect, check=check, export=export, make_tiny=make_tiny, sizes=SIZES, deploy=deploy,
    demo=(("CosyVoice3-tiny", {}),),
)
