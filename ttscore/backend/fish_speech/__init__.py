"""Fish Speech S2 Pro on Triton: generation in speech_generation under the shared continuous-batching scheduler
(ttscore.backend.generation) with Fish's wire inputs (ttscore.contract.fish_speech.WIRE); its vocoder, the DAC
decoder as an exact streaming graph (`dac_stream`), runs inline in the same model (vocoder "inline",
export/fish_speech/family.py). Its voice features: `dac_encoder` (reference audio -> DAC codes [frames, 10], one
per served checkpoint: encoder.py); speech_generation takes the codes (`ref_dac_codes`), never the audio."""

from __future__ import annotations

from ttscore.backend.family import BackendFamily, TritonModel
from ttscore.contract import fish_speech as spec

FAMILY = BackendFamily(name=spec.FAMILY, models=(TritonModel(spec.ENCODER_MODEL),),
                       voice_features=spec.ENCODER_MODEL)
