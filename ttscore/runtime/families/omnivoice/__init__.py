"""OmniVoice (k2-fsa/OmniVoice): non-autoregressive iterative unmasking over the exported generator
graph, the whole utterance decoded by the exported codec decoder at the last step."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from numpy.typing import NDArray

from ttscore.contract import omnivoice
from ttscore.contract import tensors as triton_io
from ttscore.contract.manifest import Manifest
from ttscore.runtime.family import OfflineTools

if TYPE_CHECKING:
    from ttscore.runtime.families.omnivoice.model import OmniVoiceModel


class OmniVoice:
    name = omnivoice.FAMILY
    rules = omnivoice.RULES

    def load(
        self, artifacts: Path, manifest: Manifest, *, threads: int | None, vocoder: bool, encoders: bool
    ) -> OmniVoiceModel:
        from ttscore.runtime.families.omnivoice.model import OmniVoiceModel  # onnxruntime, tokenizers

        return OmniVoiceModel(artifacts, manifest, threads, vocoder=vocoder)

    @property
    def offline(self) -> OfflineTools:
        from ttscore.runtime.families.omnivoice.offline import OFFLINE

        return OFFLINE

    def request_from_tensors(self, tensors: Mapping[str, NDArray[Any]]) -> Any:
        from ttscore.runtime.families.omnivoice.request import OmniVoiceRequest

        kwargs = triton_io.request_kwargs(tensors, self.name)
        if "ref_audio_codes" in kwargs:  # the wire's name for the request's reference codes
            kwargs["ref_codes"] = kwargs.pop("ref_audio_codes")
        return OmniVoiceRequest(**kwargs)


FAMILY = OmniVoice()
