"""Qwen3-TTS 12 Hz (CustomVoice, VoiceDesign, Base): request resolution, prompt, per-frame decode."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from numpy.typing import NDArray

from ttscore.contract import qwen3_tts
from ttscore.contract import tensors as triton_io
from ttscore.contract.manifest import Manifest
from ttscore.runtime.family import OfflineTools

if TYPE_CHECKING:
    from ttscore.runtime.families.qwen3_tts.model import Qwen3TTSPipeline


class Qwen3TTS:
    name = qwen3_tts.FAMILY
    rules = qwen3_tts.RULES

    def load(
        self, artifacts: Path, manifest: Manifest, *, threads: int | None, vocoder: bool, encoders: bool
    ) -> Qwen3TTSPipeline:
        from ttscore.runtime.families.qwen3_tts.model import Qwen3TTSPipeline  # onnxruntime

        return Qwen3TTSPipeline(artifacts, manifest, threads, vocoder=vocoder, encoders=encoders)

    @property
    def offline(self) -> OfflineTools:
        """What `say` and `precompute-voice` ask of the family (ttscore.runtime.family.OfflineTools)."""
        from ttscore.runtime.families.qwen3_tts.offline import OFFLINE

        return OFFLINE

    def request_from_tensors(self, tensors: Mapping[str, NDArray[Any]]) -> Any:
        from ttscore.runtime.families.qwen3_tts.request import Qwen3TTSRequest

        return Qwen3TTSRequest(**triton_io.request_kwargs(tensors, self.name))


FAMILY = Qwen3TTS()
