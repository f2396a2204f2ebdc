"""dac_encoder's glue: the export's `dac_encode` graph and one request -> its codes, by the runtime's one rule
(ttscore.runtime.families.fish_speech.artifacts.encode_reference), so served and offline codes agree."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ttscore.backend.settings import ModelSettingsError, OrtModelSettings, open_graph
from ttscore.contract import fish_speech as spec
from ttscore.contract import tensors as triton_io
from ttscore.contract.errors import InvalidRequest


def load(model: str, settings: OrtModelSettings) -> tuple[Any, int]:
    """(the dac_encode graph, samples per frame) of a Fish Speech export."""
    if settings.manifest.family != spec.FAMILY:
        raise ModelSettingsError(f"{model}: {settings.artifacts_dir} is a {settings.manifest.family} export, "
                                 f"not {spec.FAMILY}")
    frame = settings.manifest.raw.get("samples_per_frame")
    if not isinstance(frame, int) or frame <= 0:
        raise ModelSettingsError(f"{model}: {settings.artifacts_dir}/manifest.json has no samples_per_frame")
    return open_graph(model, settings, "dac_encode"), frame


def encode_request(tensors: Mapping[str, np.ndarray], encoder: tuple[Any, int]) -> dict[str, np.ndarray]:
    """(audio, sample_rate) -> {"ref_dac_codes": codes [frames, 10] int64}; InvalidRequest naming the field."""
    from ttscore.runtime.families.fish_speech.artifacts import encode_reference

    for row in spec.ENCODER_INPUTS:
        if row.name not in tensors:
            raise InvalidRequest(f"input '{row.name}' is required", row.name)
        triton_io.check_tensor(row, tensors[row.name])
    audio = np.asarray(tensors["audio"], np.float32).reshape(-1)
    rate = int(np.asarray(tensors["sample_rate"]).reshape(-1)[0])
    graph, frame = encoder
    codes = encode_reference(graph, audio, rate, frame, param="ref_audio", rate_param="ref_audio")
    return {spec.ENCODER_OUTPUTS[0].name: np.ascontiguousarray(codes, dtype=np.int64)}
