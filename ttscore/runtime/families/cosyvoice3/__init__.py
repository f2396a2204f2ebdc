"""CosyVoice3 (FunAudioLLM/Fun-CosyVoice3-0.5B-2512): checkpoint reader, front-end, sampling, the offline
route over the exported graphs and the FamilyModel for the shared engine (export/cosyvoice3/README.md)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from ttscore.contract import cosyvoice3
from ttscore.contract import tensors as triton_io
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.manifest import Manifest
from ttscore.runtime.family import OfflineTools

if TYPE_CHECKING:
    from ttscore.runtime.families.cosyvoice3.model import CosyVoice3Model


class CosyVoice3:
    name = cosyvoice3.FAMILY
    rules = cosyvoice3.RULES

    def load(
        self, artifacts: Path, manifest: Manifest, *, threads: int | None, vocoder: bool, encoders: bool
    ) -> CosyVoice3Model:
        from ttscore.runtime.families.cosyvoice3.model import CosyVoice3Model  # onnxruntime

        return CosyVoice3Model(artifacts, manifest, threads, encoders=encoders)

    @property
    def offline(self) -> OfflineTools:
        from ttscore.runtime.families.cosyvoice3.offline import OFFLINE

        return OFFLINE

    def request_from_tensors(self, tensors: Mapping[str, NDArray[Any]]) -> Any:
        """The wire's clip features (all three or none: InvalidRequest naming the first missing) become
        the request's `clip`."""
        from ttscore.runtime.families.cosyvoice3.frontend import ClipFeatures
        from ttscore.runtime.families.cosyvoice3.request import CosyVoice3Request

        kwargs = triton_io.request_kwargs(tensors, self.name)
        names = [t.name for t in cosyvoice3.FEATURES]
        given = [kwargs.pop(n, None) for n in names]
        clip = None
        if any(g is not None for g in given):
            for n, g in zip(names, given, strict=True):
                if g is None:
                    raise InvalidRequest(f"input '{n}' is required with the other reference features", n)
            tokens, mel, emb = given
            if len(tokens) == 0 or mel.shape[0] != 2 * len(tokens):
                raise InvalidRequest(f"'prompt_mel' must have 2 frames per speech token ({len(tokens)} tokens, "
                                     f"{mel.shape[0]} frames)", "prompt_mel")
            clip = ClipFeatures(np.asarray(tokens, np.int64), np.asarray(mel, np.float32), np.asarray(emb, np.float32))
        return CosyVoice3Request(**kwargs, clip=clip)


FAMILY = CosyVoice3()
