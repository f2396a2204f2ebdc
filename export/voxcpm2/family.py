"""VoxCPM2's export entry (export/families.py): detect, export, make-tiny, demo, deployment.

Light to import (no torch): the heavy modules load when an entry point is called.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from export.family import Deployment, ExportFamily, ExportProgress, LoraSupport, ServedCheckpoint, model_name
from ttscore.contract import voxcpm2 as contract
from ttscore.contract.errors import InvalidRequest

SIZES = ("tiny", "real")  # export.voxcpm2.tiny.SIZES


def detect(checkpoint: Path) -> bool:
    from ttscore.runtime.families.voxcpm2.checkpoint import is_voxcpm2

    return is_voxcpm2(checkpoint)


def check(checkpoint: Path) -> object:
    from ttscore.runtime.families.voxcpm2.checkpoint import read_checkpoint

    return read_checkpoint(checkpoint)


def export(src: Path, tmp: Path, precision: str, progress: ExportProgress | None,
           source: dict[str, Any], lora: Path | None = None) -> dict[str, Any]:
    from export.voxcpm2.exporter import export_voxcpm2
    from ttscore.runtime.families.voxcpm2.checkpoint import read_checkpoint

    return export_voxcpm2(src, tmp, read_checkpoint(src), precision, progress, source, lora)


def lora_identity(adapter: Path) -> dict[str, Any]:
    from export.voxcpm2.lora import identity

    return identity(adapter)


def make_tiny_lora(checkpoint: Path, out: Path, seed: int = 0) -> Path:
    from export.voxcpm2.tiny import make_tiny_lora as make

    return make(Path(checkpoint), Path(out), seed=seed)


def make_tiny(out: Path, seed: int = 0, size: str = "tiny") -> Path:
    from export.voxcpm2.tiny import make_tiny_voxcpm2

    if size not in SIZES:
        raise InvalidRequest(f"--family {contract.FAMILY} takes --size {' or '.join(SIZES)}", "size")
    return make_tiny_voxcpm2(Path(out), seed=seed, size=size)


def deploy(served: Sequence[ServedCheckpoint]) -> Deployment:
    """Each checkpoint gets its own `audiovae_decoder` (BLS vocoder) and `audiovae_encoder` (voice
    features), suffixed with its name when several are served."""
    plan = Deployment()
    alone = len(served) == 1
    for s in served:
        decoder, encoder = model_name("audiovae_decoder", s, alone), model_name("audiovae_encoder", s, alone)
        plan.vocoder[s.name], plan.voice_features[s.name] = decoder, encoder
        plan.models += [(decoder, "audiovae_decoder", {"artifacts_dir": str(s.artifacts)}),
                        (encoder, "audiovae_encoder", {"artifacts_dir": str(s.artifacts)})]
        plan.readiness.append(decoder)
    return plan


FAMILY = ExportFamily(
    name=contract.FAMILY,
    display="VoxCPM2",
    hub_org="openbmb",
    signature="config.json with lm_config and dit_config",
    detect=detect,
    check=check,
    export=export,
    make_tiny=make_tiny,
    sizes=SIZES,
    deploy=deploy,
    demo=(("VoxCPM2-tiny", {}),),
    lora=LoraSupport(
        format="native VoxCPM2 LoRA export (lora_config.json + lora_weights.safetensors)",
        identity=lora_identity,
        make_tiny=make_tiny_lora,
    ),
)
