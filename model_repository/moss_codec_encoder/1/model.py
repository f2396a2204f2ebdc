"""moss_codec_encoder: MOSS-TTS-Nano reference audio -> codec codes [frames, 16] (voice features), ONNX Runtime.

One clip per request (clips differ in length). A bad clip (rate, duration, non-finite) gets INVALID_ARG naming
`ref_audio`.
"""

from __future__ import annotations

import triton_python_backend_utils as pb_utils  # noqa: F401  (provided by the python backend stub)

from ttscore.backend.clip_encoder import clip_encoder_model
from ttscore.backend.moss_tts_nano import encoder

# One clip per request, health probes, errors naming the field: ttscore.backend.clip_encoder.
TritonPythonModel = clip_encoder_model("moss_codec_encoder", encoder.load, encoder.encode_request)
