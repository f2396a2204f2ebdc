"""MOSS-TTS-Nano on Triton: generation in speech_generation under the shared continuous-batching scheduler
(ttscore.backend.generation) with its wire inputs (ttscore.contract.moss_tts_nano.WIRE); its vocoder, the codec's
exact streaming decoder (`moss_codec_decoder`), runs inline in the same model (vocoder "inline",
export/moss_tts_nano/family.py). Its voice features: `moss_codec_encoder` (a reference clip -> its codec codes
[frames, 16], one per served checkpoint: encoder.py); speech_generation takes the codes (`ref_audio_tokens`), never
the audio."""

from __future__ import annotations

from ttscore.backend.family import BackendFamily, TritonModel
from ttscore.contract.moss_tts_nano import rules as spec

FAMILY = BackendFamily(name=spec.FAMILY, models=(TritonModel(spec.ENCODER_MODEL),),
                       voice_features=spec.ENCODER_MODEL)
