"""moss_codec_encoder's glue: the export's `moss_codec_encoder` graph and one request -> its codes, by the runtime's
one rule (ttscore.runtime.families.moss_tts_nano.model.encode_reference: resampled to 48 kHz as torchaudio does,
whole frames, repeated to the codec's two channels inside the graph), so served and offline codes agree."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ttscore.backend.encoder_kit import read_clip, require_family
from ttscore.backend.settings import OrtModelSettings, open_graph
from ttscore.contract.moss_tts_nano import codec
from ttscore.contract.moss_tts_nano import rules as spec


def load(model: str, settings: OrtModelSettings) -> tuple[Any, int]:
    """(the moss_codec_encoder graph, its state size) of a MOSS-TTS-Nano export."""
    from ttscore.runtime.families.moss_tts_nano.model import encoder_state_size

    require_family(model, settings, spec.FAMILY)
    return open_graph(model, settings, codec.ENCODER), encoder_state_size(settings.manifest)


def encode_request(tensors: Mapping[str, np.ndarray], encoder: tuple[Any, int]) -> dict[str, np.ndarray]:
    """(audio, sample_rate) -> {"ref_audio_tokens": codes [frames, 16] int64}; InvalidRequest naming the field."""
    from ttscore.runtime.families.moss_tts_nano.model import encode_reference

    audio, rate = read_clip(tensors, spec.ENCODER_INPUTS)
    graph, state_size = encoder
    codes = encode_reference(graph, state_size, audio, rate)
    return {spec.ENCODER_OUTPUTS[0].name: np.ascontiguousarray(codes, dtype=np.int64)}
