"""prompt_encoder: CosyVoice3 reference audio -> speech tokens, prompt mel and speaker embedding (voice
features), ONNX Runtime (the export's frontend/ models).

One clip per request (clips differ in length). A bad clip (rate, duration, non-finite, no speech tokens)
gets INVALID_ARG naming `ref_audio`.
"""

from __future__ import annotations

import triton_python_backend_utils as pb_utils  # noqa: F401  (provided by the python backend stub)

from ttscore.backend.clip_encoder import clip_encoder_model
from ttscore.backend.cosyvoice3 import encoder

# One clip per request, health probes, errors naming the field: ttscore.backend.clip_encoder.
TritonPythonModel = clip_encoder_model("prompt_encoder", encoder.load, encoder.encode_request)
