"""prompt_encoder's glue: the export's front-end (runtime FrontEnd: campplus.onnx, speech_tokenizer_v3.onnx)
and one request -> the clip's speech tokens, prompt mel and speaker embedding."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ttscore.backend.encoder_kit import open_encoder, read_clip, require_family
from ttscore.backend.settings import OrtModelSettings
from ttscore.contract import cosyvoice3 as spec


def load(model: str, settings: OrtModelSettings) -> Any:
    """The checkpoint's FrontEnd (onnxruntime: only inside the server)."""
    from ttscore.runtime.families.cosyvoice3.checkpoint import FRONTEND_DIR
    from ttscore.runtime.families.cosyvoice3.frontend import FrontEnd

    require_family(model, settings, spec.FAMILY)
    return open_encoder(model, lambda: FrontEnd(settings.artifacts_dir / FRONTEND_DIR,
                                                settings.intra_op_threads or None))


def encode_request(tensors: Mapping[str, np.ndarray], front: Any) -> dict[str, np.ndarray]:
    """(audio, sample_rate) -> the three prompt features; InvalidRequest naming the field."""
    clip = front.features(*read_clip(tensors, spec.ENCODER_INPUTS))
    tokens, mel, emb = spec.FEATURES
    return {tokens.name: np.ascontiguousarray(clip.speech_tokens, np.int64),
            mel.name: np.ascontiguousarray(clip.feat, np.float32),
            emb.name: np.ascontiguousarray(clip.embedding, np.float32)}
