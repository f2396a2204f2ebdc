"""Fish Speech S2 Pro (fishaudio/s2-pro): a dual-AR model (Slow AR over frames, Fast AR over each frame's
residual codes) with per-request seeded sampling noise over exported graphs, the DAC decoder as an exact
streaming vocoder; cloning from a reference clip's DAC codes (export/fish_speech/README.md)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from numpy.typing import NDArray

from ttscore.contract import fish_speech
from ttscore.contract import tensors as triton_io
from ttscore.contract.manifest import Manifest
from ttscore.runtime.family import OfflineTools

if TYPE_CHECKING:
    from ttscore.runtime.families.fish_speech.model import FishModel


class FishSpeech:
    name = fish_speech.FAMILY
    rules = fish_speech.RULES

    def load(
        self, artifacts: Path, manifest: Manifest, *, threads: int | None, vocoder: bool, encoders: bool
    ) -> FishModel:
        from ttscore.runtime.families.fish_speech.model import FishModel  # onnxruntime, tokenizers

        return FishModel(artifacts, threads, encoders=encoders)

    @property
    def offline(self) -> OfflineTools:
        from ttscore.runtime.families.fish_speech.offline import OFFLINE

        return OFFLINE

    def request_from_tensors(self, tensors: Mapping[str, NDArray[Any]]) -> Any:
        from ttscore.runtime.families.fish_speech.request import FishRequest

        kwargs = triton_io.request_kwargs(tensors, self.name)
        if "ref_dac_codes" in kwargs:  # the wire's name for the request's reference codes
            kwargs["ref_codes"] = kwargs.pop("ref_dac_codes")
        return FishRequest(**kwargs)


FAMILY = FishSpeech()
