"""Gepard-1.0 on Triton: `speech_generation` alone. Generation runs under the shared continuous-batching
scheduler (ttscore.backend.generation) with Gepard's wire inputs (text, max_new_tokens, seed:
ttscore.contract.gepard.WIRE); its vocoder, NanoCodec's exact streaming decoder (the export's
`codec_stream` graph: codes [B, T, 32] + state), runs inline in the same model (vocoder "inline",
export/gepard/family.py). There are no voice features: its only voice is the learned default."""

from __future__ import annotations

from ttscore.backend.family import BackendFamily
from ttscore.contract import gepard as spec

FAMILY = BackendFamily(name=spec.FAMILY, models=())
