"""Voxtral TTS (mistralai/Voxtral-4B-TTS-2603): preset voices, semantic argmax and
flow-matching acoustic codes with per-request seeded noise over exported graphs, Mistral's codec as an
exact streaming vocoder (export/voxtral_tts/README.md)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from numpy.typing import NDArray

from ttscore.contract import tensors as triton_io
from ttscore.contract import voxtral_tts
from ttscore.contract.manifest import Manifest
from ttscore.runtime.family import OfflineTools

if TYPE_CHECKING:
    from ttscore.runtime.families.voxtral_tts.model import VoxtralModel


class VoxtralTTS:
    name = voxtral_tts.FAMILY
    rules = voxtral_tts.RULES

    def load(
        self, artifacts: Path, manifest: Manifest, *, threads: int | None, vocoder: bool, encoders: bool
    ) -> VoxtralModel:
        from ttscore.runtime.families.voxtral_tts.model import VoxtralModel  # onnxruntime, regex

        return VoxtralModel(artifacts, manifest, threads, vocoder=vocoder)

    @property
    def offline(self) -> OfflineTools:
        from ttscore.runtime.families.voxtral_tts.offline import OFFLINE

        return OFFLINE

    def request_from_tensors(self, tensors: Mapping[str, NDArray[Any]]) -> Any:
        from ttscore.runtime.families.voxtral_tts.request import VoxtralRequest

        return VoxtralRequest(**triton_io.request_kwargs(tensors, self.name))


FAMILY = VoxtralTTS()
