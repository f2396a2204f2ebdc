"""CosyVoice3 on Triton: its vocoder (the flow + HiFT hop stream, runtime HopVocoder) runs inline in
speech_generation (vocoder "inline", export/cosyvoice3/family.py) for streamed and whole requests alike,
under upstream's chunk mask, so a streamed request's audio equals the whole one's. Its voice features:
`prompt_encoder` (reference audio -> speech tokens, prompt mel, speaker embedding; one per served
checkpoint: encoder.py)."""

from __future__ import annotations

from ttscore.backend.family import BackendFamily, TritonModel
from ttscore.contract import cosyvoice3 as spec

FAMILY = BackendFamily(name=spec.FAMILY, models=(TritonModel(spec.ENCODER_MODEL),),
                       voice_features=spec.ENCODER_MODEL)
