"""prompt_encoder's glue: the export's front-end (runtime FrontEnd: campplus.onnx, speech_tokenizer_v3.onnx)
and one request -> the clip's speech tokens, prompt mel and speaker embedding."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ttscore.backend.settings import ModelSettingsError, OrtModelSettings
from ttscore.contract import cosyvoice3 as spec
from ttscore.contract import tensors as triton_io
from ttscore.contract.errors import ArtifactError, InvalidRequest


def load(model: str, settings: OrtModelSettings) -> Any:
    """The checkpoint's FrontEnd (onnxruntime: only inside the server)."""
    from ttscore.runtime.families.cosyvoice3.checkpoint import FRONTEND_DIR
    from ttscore.runtime.families.cosyvoice3.frontend import FrontEnd

    if settings.manifest.family != spec.FAMILY:
        raise ModelSettingsError(f"{model}: {settings.artifacts_dir} is a {settings.manifest.family} export, "
                                 f"not {spec.FAMILY}")
    try:
        return FrontEnd(settings.artifacts_dir / FRONTEND_DIR, settings.intra_op_threads or None)
    except ArtifactError as exc:
        raise ModelSettingsError(f"{model}: {exc}") from None


def encode_request(tensors: Mapping[str, np.ndarray], front: Any) -> dict[str, np.ndarray]:
    """(audio, sample_rate) -> the three prompt features; InvalidRequest naming the field."""
    for row in spec.ENCODER_INPUTS:
        if row.name not in tensors:
            raise InvalidRequest(f"input '{row.name}' is required", row.name)
        triton_io.check_tensor(row, tensors[row.name])
    audio = np.asarray(tensors["audio"], np.float32).reshape(-1)
    rate = int(np.asarray(tensors["sample_rate"]).reshape(-1)[0])
    clip = front.features(audio, rate)
    tokens, mel, emb = spec.FEATURES
    return {tokens.name: np.ascontiguousarray(clip.speech_tokens, np.int64),
            mel.name: np.ascontiguousarray(clip.feat, np.float32),
            emb.name: np.ascontiguousarray(clip.embedding, np.float32)}
