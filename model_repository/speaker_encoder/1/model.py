"""speaker_encoder: log-mel [frames, 128] -> x-vector, ONNX Runtime (speaker_encoder GraphSpec)."""

from __future__ import annotations

import logging

import numpy as np
import triton_python_backend_utils as pb_utils  # noqa: F401  (provided by the python backend stub)

from ttscore.backend import glue
from ttscore.backend import settings as model_settings

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
        return glue.each_request(requests, self._x_vector, log, "speaker encoder")

    def _x_vector(self, tensors):
        mels = tensors["mels"].astype(np.float32, copy=False)
        x_vector = self.graph.run({"mels": mels[None]})["x_vector"][0]
        return {"x_vector": np.ascontiguousarray(x_vector, dtype=np.float32)}

    def finalize(self):
        self.graph = None
