"""audio_preprocess: reference clip -> 24 kHz audio (unpadded) + log-mel.

First stage of the voice_features ensemble; a bad clip (too short/long, bad rate) gets
INVALID_ARG naming the tensor, and the ensemble stops there.
"""

from __future__ import annotations

import logging

import triton_python_backend_utils as pb_utils  # noqa: F401  (provided by the python backend stub)

from ttscore.backend import glue
from ttscore.backend import settings as model_settings
from ttscore.backend.qwen3_tts import code2wav as code2wav_logic
from ttscore.backend.qwen3_tts import encoders

log = logging.getLogger("ttscore.model.audio_preprocess")


class TritonPythonModel:
    def initialize(self, args):
        glue.install_logging()
        config = glue.model_config(args)
        name = config.get("name", "audio_preprocess")
        settings = model_settings.OrtModelSettings.from_model_config(config)
        self.facts = code2wav_logic.codec_facts(name, settings.manifest, settings.artifacts_dir)
        self.mel_filters = encoders.mel_filters(name, settings.artifacts_dir)

    def execute(self, requests):
        # Health probes get an empty response without running the model (ttscore.backend.glue).
        return glue.answer_probes(requests, self._execute)

    def _execute(self, requests):
        return glue.each_request(requests, self._preprocess, log, "audio preprocessing")

    def _preprocess(self, tensors):
        audio_24k, mels = encoders.preprocess_reference(
            tensors["audio"], int(tensors["sample_rate"].reshape(-1)[0]), self.mel_filters
        )
        return {"audio_24k": audio_24k, "mels": mels}

    def finalize(self):
        self.mel_filters = None
