"""audiovae_encoder: VoxCPM2 reference audio -> latent patches (voice features), ONNX Runtime.

One clip per request (clips differ in length; padding them together would change the latents). A
bad clip (rate, duration, non-finite) gets INVALID_ARG naming the tensor.
"""

from __future__ import annotations

import triton_python_backend_utils as pb_utils  # noqa: F401  (provided by the python backend stub)

from ttscore.backend.clip_encoder import clip_encoder_model
from ttscore.backend.voxcpm2 import audiovae

# One clip per request, health probes, errors naming the field: ttscore.backend.clip_encoder.
TritonPythonModel = clip_encoder_model("audiovae_encoder", audiovae.load_encoder, audiovae.encode_request)
