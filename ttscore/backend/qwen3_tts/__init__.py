"""Qwen3-TTS on Triton: the code2wav vocoder (shared by checkpoints with one speech tokenizer) and
the voice_features ensemble of Base checkpoints (audio_preprocess -> speaker_encoder + speech_encoder)."""

from __future__ import annotations

from ttscore.backend.family import BackendFamily, TritonModel
from ttscore.contract import qwen3_tts as spec

_GROUPS = spec.NUM_CODE_GROUPS

FAMILY = BackendFamily(
    name=spec.FAMILY,
    models=(
        TritonModel(
            "code2wav",
            spec.code2wav_stream_spec(_GROUPS, "state_size", spec.SAMPLES_PER_FRAME),  # type: ignore[arg-type]
            state_key="code2wav_state_size",
        ),
        TritonModel(spec.VOICE_FEATURES),
        TritonModel("audio_preprocess"),
        TritonModel("speaker_encoder", spec.speaker_encoder_spec(spec.MEL_BINS, "embed_dim")),  # type: ignore[arg-type]
        TritonModel("speech_encoder", spec.speech_encoder_spec(_GROUPS)),
    ),
    vocoder="code2wav",
    voice_features=spec.VOICE_FEATURES,
)
