"""Gepard-1.0 (nineninesix/gepard-1.0): prompt, Gumbel-max per-frame sampling with per-request seeded
noise over exported graphs, NanoCodec as its exact streaming vocoder (export/gepard/README.md)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from numpy.typing import NDArray

from ttscore.contract import gepard
from ttscore.contract import tensors as triton_io
from ttscore.contract.manifest import Manifest
from ttscore.runtime.family import OfflineTools

if TYPE_CHECKING:
    from ttscore.runtime.families.gepard.model import GepardModel


class Gepard:
    name = gepard.FAMILY
    rules = gepard.RULES

    def load(
        self, artifacts: Path, manifest: Manifest, *, threads: int | None, vocoder: bool, encoders: bool
    ) -> GepardModel:
        from ttscore.runtime.families.gepard.model import GepardModel  # onnxruntime, tokenizers

        return GepardModel(artifacts, manifest, threads, vocoder=vocoder)

    @property
    def offline(self) -> OfflineTools:
        from ttscore.runtime.families.gepard.offline import OFFLINE

        return OFFLINE

    def request_from_tensors(self, tensors: Mapping[str, NDArray[Any]]) -> Any:
        from ttscore.runtime.families.gepard.request import GepardRequest

        return GepardRequest(**triton_io.request_kwargs(tensors, self.name))


FAMILY = Gepard()
