"""speaker_encoder: log-mel [frames, 128] -> x-vector, ONNX Runtime (speaker_encoder GraphSpec)."""

from __future__ import annotations

import logging

import numpy as np
import triton_python_backend_utils as pb_utils  # noqa: F401  (provided by the python backend stub)

from ttscore.backend import glue
from ttscore.backend import settings as model_settings
from ttscore.contract import tensors as triton_io

log = logging.getLogger("ttscore.model.speaker_encoder")


class TritonPythonModel:
    def initialize(self, args):
        glue.install_logging()
        config = glue.model_config(args)
        settings = model_settings.OrtModelSettings.from_model_config(config)
        model_settings.Instance.from_args(args).configure_process()
        self.graph = model_settings.open_graph(config.get("name", "speaker_encoder"), settings, "speaker_encoder")

    def execute(self, requests):
        # Health probes get an empty response without running the model (ttscore.backend.glue).
        return glue.answer_probes(requests, self._execute)

    def _execute(self, requests):
        responses = []
        for request in requests:
            try:
                mels = glue.input_arrays(request)["mels"].astype(np.float32, copy=False)
                x_vector = self.graph.run({"mels": mels[None]})["x_vector"][0]
                responses.append(glue.response({"x_vector": np.ascontiguousarray(x_vector, dtype=np.float32)}))
            except Exception:
                log.exception("speaker encoder failed")
                responses.append(glue.response(error=triton_io.WireError(triton_io.INTERNAL, triton_io.INTERNAL_MESSAGE)))
        return responses

    def finalize(self):
        self.graph = None
