"""code2wav: exact streaming vocoder over ONNX Runtime, batched across requests.

Requests of one execute() are grouped by frame count, each group runs once, results are scattered
back (ttscore.backend.vocoder, shared with audiovae_decoder); a request with bad inputs gets its
own INVALID_ARG response and the others still get audio.
"""

from __future__ import annotations

import logging

import triton_python_backend_utils as pb_utils

from ttscore.backend import glue, vocoder
from ttscore.backend import settings as model_settings
from ttscore.backend.qwen3_tts import code2wav as code2wav_logic

log = logging.getLogger("ttscore.model.code2wav")


class TritonPythonModel:
    def initialize(self, args):
        glue.install_logging()
        config = glue.model_config(args)
        name = config.get("name", "code2wav")
        settings = model_settings.OrtModelSettings.from_model_config(config)
        model_settings.Instance.from_args(args).configure_process()
        self.facts = code2wav_logic.codec_facts(name, settings.manifest, settings.artifacts_dir)
        vocoder.check_state_dims(
            name, pb_utils.get_input_config_by_name(config, "state")["dims"], self.facts.state_size, "state"
        )
        vocoder.check_state_dims(
            name, pb_utils.get_output_config_by_name(config, "new_state")["dims"], self.facts.state_size, "new_state"
        )
        self.graph = model_settings.open_graph(name, settings, "code2wav_stream")
        log.info("ready: state_size=%d groups=%d", self.facts.state_size, self.facts.num_groups)

    def execute(self, requests):
        # Health probes get an empty response without running the model (ttscore.backend.glue).
        return glue.answer_probes(requests, self._execute)

    def _execute(self, requests):
        items = glue.request_items(requests, lambda t: code2wav_logic.code2wav_item(t, self.facts), log,
                                   "reading a code2wav request")
        return vocoder.vocoder_responses(vocoder.run_vocoder(self.graph.run, items), glue.response)

    def finalize(self):
        self.graph = None
