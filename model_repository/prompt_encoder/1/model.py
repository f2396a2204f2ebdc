"""prompt_encoder: CosyVoice3 reference audio -> speech tokens, prompt mel and speaker embedding (voice
features), ONNX Runtime (the export's frontend/ models).

One clip per request (clips differ in length). A bad clip (rate, duration, non-finite, no speech tokens)
gets INVALID_ARG naming `ref_audio`.
"""

from __future__ import annotations

import logging

import triton_python_backend_utils as pb_utils  # noqa: F401  (provided by the python backend stub)

from ttscore.backend import glue
from ttscore.backend import settings as model_settings
from ttscore.backend.cosyvoice3 import encoder

log = logging.getLogger("ttscore.model.prompt_encoder")


class TritonPythonModel:
    def initialize(self, args):
        glue.install_logging()
        config = glue.model_config(args)
        settings = model_settings.OrtModelSettings.from_model_config(config)
        model_settings.Instance.from_args(args).configure_process()
        self.encoder = encoder.load(config.get("name", "prompt_encoder"), settings)

    def execute(self, requests):
        # Health probes get an empty response without running the model (ttscore.backend.glue).
        return glue.answer_probes(requests, self._execute)

    def _execute(self, requests):
        return glue.each_request(requests, lambda t: encoder.encode_request(t, self.encoder), log,
                                 "reference encoding")

    def finalize(self):
        self.encoder = None
