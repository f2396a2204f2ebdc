"""Breeze-TTS-2 on Triton. Its vocoder is the Qwen3-TTS 12 Hz codec's exact streaming code2wav, run
inline by speech_generation (vocoder "inline", export/breeze_tts_2/family.py): the shared `code2wav`
model reads Qwen3-TTS manifests, and a Breeze checkpoint's codec sits under its own audio_tokenizer/.
Its voice features (clone, direction, uploaded voices) are `breeze_speech_encoder`, one per served
checkpoint: reference audio -> 24 kHz -> the export's speech encoder -> ref_codes [T, 16]
(ttscore.backend.breeze_tts_2.reference)."""

from __future__ import annotations

from ttscore.backend.family import BackendFamily, TritonModel
from ttscore.contract import breeze_tts_2 as spec

FAMILY = BackendFamily(
    name=spec.FAMILY,
    models=(TritonModel(spec.SPEECH_ENCODER),),
    voice_features=spec.SPEECH_ENCODER,
)
