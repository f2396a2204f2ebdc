"""speech_encoder: 24 kHz audio (unpadded) -> reference codes [ceil(samples / 1920), 16] (ONNX Runtime)."""

from __future__ import annotations

import logging

import numpy as np
import triton_python_backend_utils as pb_utils  # noqa: F401  (provided by the python backend stub)

from ttscore.backend import glue
from ttscore.backend import settings as model_settings
from ttscore.backend.qwen3_tts import code2wav as code2wav_logic

log = logging.getLogger("ttscore.model.speech_encoder")


class TritonPythonModel:
    def initialize(self, args):
        glue.install_logging()
        config = glue.model_config(args)
        name = config.get("name", "speech_encoder")
        settings = model_settings.OrtModelSettings.from_model_config(config)
        model_settings.Instance.from_args(args).configure_process()
        self.facts = code2wav_logic.codec_facts(name, settings.manifest, settings.artifacts_dir)
        self.graph = model_settings.open_graph(name, settings, "speech_encoder")

    def execute(self, requests):
        # Health probes get an empty response without running the model (ttscore.backend.glue).
        return glue.answer_probes(requests, self._execute)

    def _execute(self, requests):
        return glue.each_request(requests, self._codes, log, "speech encoder")

    def _codes(self, tensors):
        audio = tensors["audio"].astype(np.float32, copy=False).reshape(-1)
        if audio.size == 0:
            raise ValueError("empty audio")
        codes = self.graph.run({"audio": audio[None]})["codes"][0]
        codes = codes[: -(-audio.size // self.facts.samples_per_frame)]  # ceil(samples / spf) frames
        return {"codes": np.ascontiguousarray(codes, dtype=np.int64)}

    def finalize(self):
        self.graph = None
