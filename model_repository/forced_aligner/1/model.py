"""forced_aligner: a clip and the text spoken in it -> word timestamps and character spans (Qwen3-ForcedAligner),
ONNX Runtime.

One clip per request (clips differ in length). A bad request (rate, duration, non-finite audio, a missing or
non-UTF-8 string) gets INVALID_ARG naming the field.
"""

from __future__ import annotations

import triton_python_backend_utils as pb_utils  # noqa: F401  (provided by the python backend stub)

from ttscore.backend import qwen3_forced_aligner as aligner
from ttscore.backend.clip_encoder import clip_encoder_model

# One request at a time, health probes, errors naming the field: ttscore.backend.clip_encoder's class.
TritonPythonModel = clip_encoder_model("forced_aligner", aligner.load, aligner.align_request)
