"""dac_encoder's glue: the export's `dac_encode` graph and one request -> its codes, by the runtime's one rule
(ttscore.runtime.families.fish_speech.artifacts.encode_reference), so served and offline codes agree."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ttscore.backend.encoder_kit import read_clip, require_family
from ttscore.backend.settings import ModelSettingsError, OrtModelSettings, open_graph
from ttscore.contract import fish_speech as spec


def load(model: str, settings: OrtModelSettings) -> tuple[Any, int]:
    """(the dac_encode graph, samples per frame) of a Fish Speech export."""
    require_family(model, settings, spec.FAMILY)
    frame = settings.manifest.raw.get("samples_per_frame")
    if not isinstance(frame, int) or frame <= 0:
        raise ModelSettingsError(f"{model}: {settings.artifacts_dir}/manifest.json has no samples_per_frame")
    return open_graph(model, settings, "dac_encode"), frame


def encode_request(tensors: Mapping[str, np.ndarray], encoder: tuple[Any, int]) -> dict[str, np.ndarray]:
    """(audio, sample_rate) -> {"ref_dac_codes": codes [frames, 10] int64}; InvalidRequest naming the field."""
    from ttscore.runtime.families.fish_speech.artifacts import encode_reference

    audio, rate = read_clip(tensors, spec.ENCODER_INPUTS)
    graph, frame = encoder
    codes = encode_reference(graph, audio, rate, frame, param="ref_audio", rate_param="ref_audio")
    return {spec.ENCODER_OUTPUTS[0].name: np.ascontiguousarray(codes, dtype=np.int64)}
