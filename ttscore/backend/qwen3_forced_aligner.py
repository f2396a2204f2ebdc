"""forced_aligner's glue: an aligner export opened once, and one request (a clip, its sample rate, the text and its
language) -> the words' texts, times and character spans, by the runtime's one rule
(ttscore.runtime.qwen3_forced_aligner.model.ForcedAligner), so served and offline alignments agree."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ttscore.backend.encoder_kit import open_encoder, read_clip, require_family
from ttscore.backend.settings import OrtModelSettings
from ttscore.contract import aligner as served
from ttscore.contract import qwen3_forced_aligner as spec
from ttscore.contract import tensors as triton_io
from ttscore.contract.errors import InvalidRequest


def load(model: str, settings: OrtModelSettings) -> Any:
    """The ForcedAligner of an aligner export (ModelSettingsError for another export, or a broken one)."""
    from ttscore.runtime.qwen3_forced_aligner.model import ForcedAligner

    require_family(model, settings, spec.COMPONENT)
    return open_encoder(model, lambda: ForcedAligner(settings.artifacts_dir, settings.intra_op_threads or None))


def align_request(tensors: Mapping[str, np.ndarray], aligner: Any) -> dict[str, np.ndarray]:
    """One request's outputs (ttscore.contract.aligner.OUTPUTS); InvalidRequest naming the field."""
    audio, rate = read_clip(tensors, served.INPUTS[:2])
    strings = {}
    for row in served.INPUTS[2:]:
        if row.name not in tensors:
            raise InvalidRequest(f"input '{row.name}' is required", row.name)
        strings[row.name] = triton_io.scalar_input(row, tensors[row.name])
    if rate <= 0:
        raise InvalidRequest("sample_rate must be positive", "sample_rate")
    if not np.isfinite(audio).all():
        raise InvalidRequest("the audio has non-finite samples", "audio")
    if audio.shape[0] > served.MAX_AUDIO_SECONDS * rate:
        raise InvalidRequest(f"the audio is longer than {served.MAX_AUDIO_SECONDS:.0f} s", "audio")
    words = aligner.align(audio, strings["text"], strings["language"], sample_rate=rate)
    return {
        "word_text": np.array([w.text.encode("utf-8") for w in words], dtype=np.object_),
        "word_start": np.array([w.start for w in words], dtype=np.float32),
        "word_end": np.array([w.end for w in words], dtype=np.float32),
        "char_start": np.array([w.char_start for w in words], dtype=np.int32),
        "char_end": np.array([w.char_end for w in words], dtype=np.int32),
    }
