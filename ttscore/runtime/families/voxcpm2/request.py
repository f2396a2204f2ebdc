"""VoxCPM2's synthesis request: what `VoxCPM2Model.admit` takes (fields resolved against the family's rules)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ttscore.contract.errors import InvalidRequest

F32 = npt.NDArray[np.float32]


@dataclass
class VoxCPM2Request:
    """One synthesis request. Reference patches [T, P, D] come from `encode_reference`."""

    text: str
    ref_patches: F32 | None = None  # voice cloning: isolated reference (the reference's "reference" mode)
    prompt_patches: F32 | None = None  # continuation: the prompt audio ...
    prompt_text: str | None = None  # ... and its transcript
    max_new_tokens: int | None = None  # patches; None: the reference's length cap
    seed: int | None = None
    inference_timesteps: int | None = None
    cfg_value: float | None = None
    initial_chunk_frames: int | None = None
    chunk_frames: int | None = None


def from_wire(**kw: Any) -> VoxCPM2Request:
    """The request from speech_generation's decoded inputs, by the reference's prompt modes: `ref_patches`
    alone is "reference" (voice cloning from an isolated reference); `ref_text` with `prompt_patches` is
    "continuation" (the prompt audio that `ref_text` transcribes, audiovae_encoder's `prompt` padding), and
    with `ref_patches` too "ref_continuation" (the same or another clip as the reference). `ref_patches` +
    `ref_text` without `prompt_patches` is the continuation prompt as well (the patches are the prompt)."""
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
