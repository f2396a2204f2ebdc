"""OmniVoice on Triton: no Triton model of its own besides speech_generation. Its vocoder is the
codec decoder of its own export, run inline by speech_generation (vocoder "inline",
export/omnivoice/family.py) over each whole utterance (or each sentence chunk of a streamed request):
the model is non-autoregressive, so a chunk's audio exists only after its last unmasking step and
there is no frame streaming to do. Its voice features: `codec_encoder` (reference audio -> codes
[8, T], one per served checkpoint: encoder.py)."""

from __future__ import annotations

from ttscore.backend.family import BackendFamily, TritonModel
from ttscore.contract import omnivoice as spec

FAMILY = BackendFamily(name=spec.FAMILY, models=(TritonModel(spec.ENCODER_MODEL),),
                       voice_features=spec.ENCODER_MODEL)
