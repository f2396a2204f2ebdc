"""VoxCPM2's part of the benches that compare with the PyTorch reference (`bench offline`,
`bench compare`; triton_tts.bench.common.bench_families): its random-weight checkpoint and the
reference's `VoxCPM2Model.generate` (zero-shot, the reference's default 10 LocDiT steps and CFG 2.0,
capped at `frames` patches; like the exported pipeline it stops earlier when its stop head fires)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ttscore.contract import voxcpm2 as spec

FAMILY = spec.FAMILY
SIZES = ("tiny", "real")
CHECKPOINT = "zero_shot"
REQUEST: dict[str, Any] = {}  # no extra wire fields: no preset speakers, no greedy switch (diffusion)


def make_checkpoint(path: Path, size: str) -> Path:
    from export.voxcpm2.tiny import make_tiny_voxcpm2

    return make_tiny_voxcpm2(path, seed=0, size=size)


class Reference:
    def __init__(self, checkpoint: Path) -> None:
        from export.voxcpm2.reference import load_reference
        from ttscore.runtime.families.voxcpm2.checkpoint import parse_config

        self.model = load_reference(checkpoint)
        info = parse_config(json.loads((Path(checkpoint) / "config.json").read_text(encoding="utf-8")))
        self.samples_per_patch = info.samples_per_patch

    def generate(self, text: str, frames: int, **_fields: Any) -> int:
        wav = self.model.generate(text, max_len=frames)
        return int(wav.reshape(-1).shape[0] // self.samples_per_patch)
