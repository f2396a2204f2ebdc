"""The forced aligner's export entry: an export.family.ExportFamily so that `triton-tts export` and the artifact
caches treat an aligner checkpoint as they treat a family's, but not in export.families.FAMILIES: the aligner
is no speech family (it serves no speech_generation model and `serve --checkpoint` does not take it).
export.families.ALIGNER finds it (ttscore.contract.plugins.ALIGNER); export.exporter.export_checkpoint tries it
before the families.
"""

from __future__ import annotations

from collections.abc import Sequence

from export.family import Deployment, ExportFamily, ServedCheckpoint, lazy, sized_make_tiny
from export.tiny_weights import TINY_SIZES
from ttscore.contract import qwen3_forced_aligner as spec


def _deploy(served: Sequence[ServedCheckpoint]) -> Deployment:
    return Deployment()  # never a served checkpoint: `serve/prepare --aligner` render forced_aligner (plan_deployment)


ENTRY = ExportFamily(
    name=spec.COMPONENT, display=spec.DISPLAY, hub_org="Qwen",
    signature="config.json with model_type qwen3_asr whose thinker_config.model_type is qwen3_forced_aligner",
    detect=lazy("ttscore.runtime.qwen3_forced_aligner.checkpoint:is_aligner"),
    check=lazy("ttscore.runtime.qwen3_forced_aligner.checkpoint:read_checkpoint"),
    export=lazy("export.qwen3_forced_aligner.exporter:export_aligner"),
    make_tiny=sized_make_tiny("export.qwen3_forced_aligner.tiny:make_tiny_aligner", spec.COMPONENT, TINY_SIZES),
    sizes=TINY_SIZES,
    deploy=_deploy,
)
