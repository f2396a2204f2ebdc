"""CosyVoice3's synthesis request: what `CosyVoice3Model.admit` takes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
