"""VoxCPM2 (openbmb/VoxCPM2): prompt, per-patch decode over exported graphs (export/voxcpm2/README.md)."""

from __future__ import annotations

from ttscore.contract import voxcpm2 as contract
from ttscore.runtime.family import DeclaredFamily

FAMILY = DeclaredFamily.of(contract, "VoxCPM2Model", "from_wire", takes=("manifest", "vocoder", "encoders"))
