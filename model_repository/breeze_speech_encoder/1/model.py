"""breeze_speech_encoder: Breeze-TTS-2 reference audio -> reference codes (voice features), ONNX Runtime.

One clip per request. A bad clip (rate, duration, non-finite) gets INVALID_ARG naming the tensor.
"""

from __future__ import annotations

import triton_python_backend_utils as pb_utils  # noqa: F401  (provided by the python backend stub)

from ttscore.backend.breeze_tts_2 import reference
from ttscore.backend.clip_encoder import clip_encoder_model

# One clip per request, health probes, errors naming the field: ttscore.backend.clip_encoder.
TritonPythonModel = clip_encoder_model("breeze_speech_encoder", reference.load, reference.encode_request)
