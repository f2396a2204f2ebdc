"""Breeze-TTS-2 on Triton: no Triton model of its own besides speech_generation. Its vocoder is the
Qwen3-TTS 12 Hz codec's exact streaming code2wav, run inline by speech_generation (vocoder "inline",
export/breeze_tts_2/family.py): the shared `code2wav` model reads Qwen3-TTS manifests, and a Breeze
checkpoint's codec sits under its own audio_tokenizer/. Reference audio (clone, direction) is not
served yet, so there is no voice-features model."""

from __future__ import annotations

from ttscore.backend.family import BackendFamily
from ttscore.contract import breeze_tts_2 as spec

FAMILY = BackendFamily(name=spec.FAMILY, models=())
