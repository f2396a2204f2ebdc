"""VoxCPM2 (openbmb/VoxCPM2): prompt, per-patch decode over exported graphs (export/voxcpm2/README.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ttscore.contract import voxcpm2
from ttscore.contract.manifest import Manifest

if TYPE_CHECKING:
    from ttscore.runtime.families.voxcpm2.model import VoxCPM2Model


class VoxCPM2:
    name = voxcpm2.FAMILY
    rules = voxcpm2.RULES

    def load(
        self, artifacts: Path, manifest: Manifest, *, threads: int | None, vocoder: bool, encoders: bool
    ) -> VoxCPM2Model:
        from ttscore.runtime.families.voxcpm2.model import VoxCPM2Model  # onnxruntime, tokenizers

        return VoxCPM2Model(artifacts, manifest, threads, vocoder=vocoder, encoders=encoders)


FAMILY = VoxCPM2()
