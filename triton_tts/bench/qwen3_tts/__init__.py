"""Qwen3-TTS's part of the benches that compare with the PyTorch reference (`bench offline`,
`bench compare`; triton_tts.bench.common.bench_families): its random-weight CustomVoice checkpoint
and the reference's greedy `generate_custom_voice`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ttscore.contract import qwen3_tts as spec

FAMILY = spec.FAMILY
SIZES = ("tiny", "0.6b", "1.7b")
CHECKPOINT = "custom_voice"
REQUEST: dict[str, Any] = {"speaker": "vivian", "language": "English"}  # the wire fields of its bench requests


def make_checkpoint(path: Path, size: str) -> Path:
    from export.qwen3_tts.tiny import make_tiny

    return make_tiny(CHECKPOINT, path, seed=0, size=size)


class Reference:
    def __init__(self, checkpoint: Path) -> None:
        from export.qwen3_tts.reference import load_reference

        self.model = load_reference(checkpoint)

    def generate(self, text: str, frames: int, speaker: str | None = None, language: str = "English") -> int:
        wavs, _sr = self.model.generate_custom_voice(
            text=text, speaker=speaker, language=language, max_new_tokens=frames + 1,
            do_sample=False, subtalker_dosample=False,
        )
        return int(wavs[0].shape[0] // spec.SAMPLES_PER_FRAME)
