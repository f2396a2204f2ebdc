"""audiovae_encoder: VoxCPM2 reference audio -> latent patches (voice features), ONNX Runtime.

One clip per request (clips differ in length; padding them together would change the latents). A
bad clip (rate, duration, non-finite) gets INVALID_ARG naming the tensor.
"""

from __future__ import annotations

import logging

import triton_python_backend_utils as pb_utils  # noqa: F401  (provided by the python backend stub)

from ttscore.backend import glue
from ttscore.backend import settings as model_settings
from ttscore.backend.voxcpm2 import audiovae

log = logging.getLogger("ttscore.model.audiovae_encoder")


class TritonPythonModel:
    def initialize(self, args):
        glue.install_logging()
        config = glue.model_config(args)
        name = config.get("name", "audiovae_encoder")
        settings = model_settings.OrtModelSettings.from_model_config(config)
        model_settings.Instance.from_args(args).configure_process()
        self.info = audiovae.voxcpm2_info(name, settings.manifest)
        self.graph = model_settings.open_graph(name, settings, "vae_encoder")

    def execute(self, requests):
        # Health probes get an empty response without running the model (ttscore.backend.glue).
        return glue.answer_probes(requests, self._execute)

    def _execute(self, requests):
        return glue.each_request(
            requests, lambda t: {"ref_patches": audiovae.encode_request(t, self.graph, self.info)}, log,
            "reference encoding",
        )

    def finalize(self):
        self.graph = None
