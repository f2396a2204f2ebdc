"""breeze_speech_encoder: Breeze-TTS-2 reference audio -> reference codes (voice features), ONNX Runtime.

One clip per request. A bad clip (rate, duration, non-finite) gets INVALID_ARG naming the tensor.
"""

from __future__ import annotations

import logging

import triton_python_backend_utils as pb_utils  # noqa: F401  (provided by the python backend stub)

from ttscore.backend import glue
from ttscore.backend import settings as model_settings
from ttscore.backend.breeze_tts_2 import reference

log = logging.getLogger("ttscore.model.breeze_speech_encoder")


class TritonPythonModel:
    def initialize(self, args):
        glue.install_logging()
        config = glue.model_config(args)
        name = config.get("name", "breeze_speech_encoder")
        settings = model_settings.OrtModelSettings.from_model_config(config)
        model_settings.Instance.from_args(args).configure_process()
        reference.check_manifest(name, settings.manifest)
        self.graph = model_settings.open_graph(name, settings, "speech_encoder")

    def execute(self, requests):
        # Health probes get an empty response without running the model (ttscore.backend.glue).
        return glue.answer_probes(requests, self._execute)

    def _execute(self, requests):
        return glue.each_request(
            requests, lambda t: {"ref_codes": reference.encode_request(t, self.graph)}, log, "reference encoding")

    def finalize(self):
        self.graph = None
