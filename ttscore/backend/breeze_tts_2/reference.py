"""breeze_speech_encoder's logic: a reference clip -> its codec codes, by the runtime's one rule
(ttscore.runtime.families.breeze_tts_2.model.encode_reference), so served and offline codes agree."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ttscore.backend.encoder_kit import require_family
from ttscore.backend.settings import OrtModelSettings, open_graph
from ttscore.contract import breeze_tts_2 as spec
from ttscore.contract.errors import InvalidRequest


def load(model: str, settings: OrtModelSettings) -> Any:
    """breeze_speech_encoder: the export's speech_encoder graph (its audio_tokenizer's)."""
    require_family(model, settings, spec.FAMILY)
    return open_graph(model, settings, "speech_encoder")


def encode_request(tensors: Mapping[str, np.ndarray], encoder: Any) -> dict[str, np.ndarray]:
    """(audio, sample_rate) -> {"ref_codes": [T, 16] int64}; InvalidRequest naming the tensor."""
    from ttscore.runtime.families.breeze_tts_2.model import encode_reference

    rate = np.asarray(tensors["sample_rate"]).reshape(-1)
    if rate.size != 1:
        raise InvalidRequest("input 'sample_rate' must hold one value", "sample_rate")
    audio = np.asarray(tensors["audio"], np.float32).reshape(-1)
    return {"ref_codes": np.ascontiguousarray(
        encode_reference(encoder, audio, int(rate[0]), param="audio", rate_param="sample_rate"), np.int64)}
