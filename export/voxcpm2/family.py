"""VoxCPM2's export entry (export/families.py): detect, export, make-tiny, demo, deployment.

Light to import (no torch): the heavy modules load when an entry point is called.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from export.family import (
    Deployment,
    ExportFamily,
    ExportProgress,
    LoraSupport,
    ServedCheckpoint,
    lazy,
    model_name,
    sized_make_tiny,
)
from export.tiny_weights import TINY_SIZES
from ttscore.contract import voxcpm2 as contract


def export(src: Path, tmp: Path, precision: str, progress: ExportProgress | None,
           source: dict[str, Any], lora: Path | None = None) -> dict[str, Any]:
    from export.voxcpm2.exporter import export_voxcpm2
    from ttscore.runtime.families.voxcpm2.checkpoint import read_checkpoint

    return export_voxcpm2(src, tmp, read_checkpoint(src), precision, progress, source, lora)


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
    detect=lazy("ttscore.runtime.families.voxcpm2.checkpoint:is_voxcpm2"),
    check=lazy("ttscore.runtime.families.voxcpm2.checkpoint:read_checkpoint"),
    export=export,
    make_tiny=sized_make_tiny("export.voxcpm2.tiny:make_tiny_voxcpm2", contract.FAMILY, TINY_SIZES),
    sizes=TINY_SIZES,
    deploy=deploy,
    demo=(("VoxCPM2-tiny", {}),),
    revision=contract.EXPORT_REVISION,
    lora=LoraSupport(
        format="native VoxCPM2 LoRA export (lora_config.json + lora_weights.safetensors)",
        identity=lazy("export.voxcpm2.lora:identity"),
        make_tiny=lazy("export.voxcpm2.tiny:make_tiny_lora"),
    ),
)
