"""Voxtral TTS on Triton: `speech_generation` alone. Generation runs under the shared continuous-batching
scheduler (ttscore.backend.generation) with Voxtral's wire inputs (text, voice, max_new_tokens, seed,
cfg_alpha: ttscore.contract.voxtral_tts.WIRE); its vocoder, Mistral's codec as an exact streaming decoder
(the export's `codec_stream` graph: codes [B, 37, T] + state), runs inline in the same model (vocoder
"inline", export/voxtral_tts/family.py). There are no voice features: preset voices only (the public
checkpoint has no codec encoder), their prompt rows are tables of the export."""

from __future__ import annotations

from ttscore.backend.family import BackendFamily
from ttscore.contract import voxtral_tts as spec

FAMILY = BackendFamily(name=spec.FAMILY, models=())
