"""audiovae_encoder: VoxCPM2 reference audio -> latent patches (voice features), ONNX Runtime.

One clip per request (clips differ in length; padding them together would change the latents). A
bad clip (rate, duration, non-finite) gets INVALID_ARG naming the tensor.
"""

from __future__ import annotations

import logging

import triton_python_backend_utils as pb_utils  # noqa: F401  (provided by the python backend stub)

from ttscore.backend import audiovae, glue
from ttscore.backend import settings as model_settings
from ttscore.contract import tensors as triton_io
from ttscore.contract.errors import InvalidRequest

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
        responses = []
        for request in requests:
            try:
                patches = audiovae.encode_request(glue.input_arrays(request), self.graph, self.info)
                responses.append(glue.response({"ref_patches": patches}))
            except InvalidRequest as exc:
                responses.append(glue.response(error=triton_io.invalid_request_error(exc)))
            except Exception:
                log.exception("reference encoding failed")
                responses.append(glue.response(error=triton_io.WireError(triton_io.INTERNAL, triton_io.INTERNAL_MESSAGE)))
        return responses

    def finalize(self):
        self.graph = None
