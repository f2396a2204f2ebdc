"""CosyVoice3's synthesis request: what `CosyVoice3Model.admit` takes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ttscore.contract import cosyvoice3
from ttscore.contract.errors import InvalidRequest
from ttscore.runtime.families.cosyvoice3.frontend import ClipFeatures


@dataclass
class CosyVoice3Request:
    """Zero-shot cloning: `text` in the voice of a reference clip with its transcript `ref_text`. The clip
    comes as audio (`ref_audio`: mono float samples and their rate) or as its features computed once
    (`clip`: an uploaded voice's speech tokens, prompt mel and speaker embedding). `seed` seeds the
    request's sampling and flow noise; `temperature`/`top_k`/`top_p` (the Speech API's extra_params, None:
    the checkpoint's yaml) the RAS sampling."""

    text: str
    ref_text: str | None = None
    ref_audio: tuple[Any, int] | None = None
    clip: ClipFeatures | None = None
    max_new_tokens: int | None = None
    seed: int | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None


def from_wire(**kwargs: Any) -> CosyVoice3Request:
    """The request from speech_generation's decoded inputs: the clip features (all three or none:
    InvalidRequest naming the first missing) become `clip`."""
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
