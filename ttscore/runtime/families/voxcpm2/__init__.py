"""VoxCPM2 (openbmb/VoxCPM2): prompt, per-patch decode over exported graphs (export/voxcpm2/README.md)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from numpy.typing import NDArray

from ttscore.contract import tensors as triton_io
from ttscore.contract import voxcpm2
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.manifest import Manifest
from ttscore.runtime.family import OfflineTools

if TYPE_CHECKING:
    from ttscore.runtime.families.voxcpm2.model import VoxCPM2Model


class VoxCPM2:
    name = voxcpm2.FAMILY
    rules = voxcpm2.RULES

    def load(
        self, artifacts: Path, manifest: Manifest, *, threads: int | None, vocoder: bool, encoders: bool
    ) -> VoxCPM2Model:
        from ttscore.runtime.families.voxcpm2.model import VoxCPM2Model  # onnxruntime, tokenizers

        return VoxCPM2Model(artifacts, manifest, threads, vocoder=vocoder, encoders=encoders)

    @property
    def offline(self) -> OfflineTools:
        """What `say` and `precompute-voice` ask of the family (ttscore.runtime.family.OfflineTools)."""
        from ttscore.runtime.families.voxcpm2.offline import OFFLINE

        return OFFLINE

    def request_from_tensors(self, tensors: Mapping[str, NDArray[Any]]) -> Any:
        """The reference's prompt modes: `ref_patches` alone is "reference" (voice cloning from an
        isolated reference); `ref_text` with `prompt_patches` is "continuation" (the prompt audio
        that `ref_text` transcribes, audiovae_encoder's `prompt` padding), and with `ref_patches`
        too "ref_continuation" (the same or another clip as the reference). `ref_patches` + `ref_text`
        without `prompt_patches` is the continuation prompt as well (the patches are the prompt)."""
        from ttscore.runtime.families.voxcpm2.request import VoxCPM2Request

        kw = triton_io.request_kwargs(tensors, self.name)
        patches, ref_text = kw.pop("ref_patches", None), kw.pop("ref_text", None)
        prompt = kw.pop("prompt_patches", None)
        if prompt is not None:
            if ref_text is None:
                raise InvalidRequest("input 'prompt_patches' needs 'ref_text' (the transcript of the prompt audio)",
                                     "ref_text")
            return VoxCPM2Request(ref_patches=patches, prompt_patches=prompt, prompt_text=ref_text, **kw)
        if ref_text is not None and patches is None:
            raise InvalidRequest("input 'ref_text' needs 'ref_patches' (the reference audio it transcribes)", "ref_text")
        if patches is not None and ref_text is not None:
            return VoxCPM2Request(prompt_patches=patches, prompt_text=ref_text, **kw)
        return VoxCPM2Request(ref_patches=patches, **kw)


FAMILY = VoxCPM2()
