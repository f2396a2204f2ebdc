"""codec_encoder's glue: the export's clone.ReferenceEncoder and one request -> its codes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ttscore.backend.encoder_kit import open_encoder, read_clip, require_family
from ttscore.backend.settings import OrtModelSettings
from ttscore.contract import omnivoice as spec


def load(model: str, settings: OrtModelSettings) -> Any:
    """The checkpoint's ReferenceEncoder (onnxruntime: only inside the server)."""
    from ttscore.runtime.families.omnivoice.clone import ReferenceEncoder

    require_family(model, settings, spec.FAMILY)
    return open_encoder(model, lambda: ReferenceEncoder(settings.artifacts_dir, settings.manifest,
                                                        settings.intra_op_threads or None))


def encode_request(tensors: Mapping[str, np.ndarray], encoder: Any) -> dict[str, np.ndarray]:
    """(audio, sample_rate) -> {"ref_audio_codes": codes [8, T] int64}; InvalidRequest naming the field."""
    codes = encoder.codes(*read_clip(tensors, spec.ENCODER_INPUTS))
    return {spec.ENCODER_OUTPUTS[0].name: np.ascontiguousarray(codes, dtype=np.int64)}
