"""Qwen3-TTS 12 Hz (CustomVoice, VoiceDesign, Base): request resolution, prompt, per-frame decode."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ttscore.contract import qwen3_tts
from ttscore.contract.manifest import Manifest

if TYPE_CHECKING:
    from ttscore.runtime.families.qwen3_tts.pipeline import Pipeline


class Qwen3TTS:
    name = qwen3_tts.FAMILY
    rules = qwen3_tts.RULES

    def load(
        self, artifacts: Path, manifest: Manifest, *, threads: int | None, vocoder: bool, encoders: bool
    ) -> Pipeline:
        from ttscore.runtime.families.qwen3_tts.pipeline import Pipeline  # onnxruntime

        return Pipeline(artifacts, manifest, threads, vocoder=vocoder, encoders=encoders)


FAMILY = Qwen3TTS()
