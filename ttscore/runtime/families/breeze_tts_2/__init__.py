"""Breeze-TTS-2 (BreezeBlue/Breeze-TTS-2): prompt, greedy per-frame decode over exported graphs,
the Qwen3-TTS 12 Hz codec as its exact streaming vocoder (export/breeze_tts_2/README.md)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from numpy.typing import NDArray

from ttscore.contract import breeze_tts_2
from ttscore.contract import tensors as triton_io
from ttscore.contract.manifest import Manifest
from ttscore.runtime.family import OfflineTools

if TYPE_CHECKING:
    from ttscore.runtime.families.breeze_tts_2.model import BreezeModel


class BreezeTTS2:
    name = breeze_tts_2.FAMILY
    rules = breeze_tts_2.RULES

    def load(
        self, artifacts: Path, manifest: Manifest, *, threads: int | None, vocoder: bool, encoders: bool
    ) -> BreezeModel:
        from ttscore.runtime.families.breeze_tts_2.model import BreezeModel  # onnxruntime, tokenizers

        return BreezeModel(artifacts, manifest, threads, vocoder=vocoder, encoders=encoders)

    @property
    def offline(self) -> OfflineTools:
        from ttscore.runtime.families.breeze_tts_2.offline import OFFLINE

        return OFFLINE

    def request_from_tensors(self, tensors: Mapping[str, NDArray[Any]]) -> Any:
        """speaker -> voice; ref_codes + ref_text -> clone (+ instructions: direction)."""
        from ttscore.runtime.families.breeze_tts_2.request import BreezeRequest

        kw = triton_io.request_kwargs(tensors, self.name)
        voice = kw.pop("speaker", None)
        return BreezeRequest(voice=voice, **kw)


FAMILY = BreezeTTS2()
