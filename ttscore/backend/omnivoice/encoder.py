"""codec_encoder's glue: the export's clone.ReferenceEncoder and one request -> its codes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ttscore.backend.settings import ModelSettingsError, OrtModelSettings
from ttscore.contract import omnivoice as spec
from ttscore.contract import tensors as triton_io
from ttscore.contract.errors import ArtifactError, InvalidRequest


def load(model: str, settings: OrtModelSettings) -> Any:
    """The checkpoint's ReferenceEncoder (onnxruntime: only inside the server)."""
    from ttscore.runtime.families.omnivoice.clone import ReferenceEncoder

    if settings.manifest.family != spec.FAMILY:
        raise ModelSettingsError(f"{model}: {settings.artifacts_dir} is a {settings.manifest.family} export, "
                                 f"not {spec.FAMILY}")
    try:
        return ReferenceEncoder(settings.artifacts_dir, settings.manifest, settings.intra_op_threads or None)
    except ArtifactError as exc:
        raise ModelSettingsError(f"{model}: {exc}") from None


def encode_request(tensors: Mapping[str, np.ndarray], encoder: Any) -> dict[str, np.ndarray]:
    """(audio, sample_rate) -> {"ref_audio_codes": codes [8, T] int64}; InvalidRequest naming the field."""
    for row in spec.ENCODER_INPUTS:
        if row.name not in tensors:
            raise InvalidRequest(f"input '{row.name}' is required", row.name)
        triton_io.check_tensor(row, tensors[row.name])
    audio = np.asarray(tensors["audio"], np.float32).reshape(-1)
    rate = int(np.asarray(tensors["sample_rate"]).reshape(-1)[0])
    return {spec.ENCODER_OUTPUTS[0].name: np.ascontiguousarray(encoder.codes(audio, rate), dtype=np.int64)}
