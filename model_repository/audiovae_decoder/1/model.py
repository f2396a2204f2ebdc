"""audiovae_decoder: VoxCPM2's exact streaming AudioVAE decoder over ONNX Runtime, batched across requests.

Requests of one execute() are grouped by frame count, each group runs once, results are scattered
back (ttscore.backend.vocoder, shared with code2wav); a request with bad inputs gets its own
INVALID_ARG response and the others still get audio.
"""

from __future__ import annotations

import logging

import triton_python_backend_utils as pb_utils

from ttscore.backend import glue, vocoder
from ttscore.backend import settings as model_settings
from ttscore.backend.voxcpm2 import audiovae

log = logging.getLogger("ttscore.model.audiovae_decoder")


class TritonPythonModel:
    def initialize(self, args):
        glue.install_logging()
        config = glue.model_config(args)
        name = config.get("name", "audiovae_decoder")
        settings = model_settings.OrtModelSettings.from_model_config(config)
        model_settings.Instance.from_args(args).configure_process()
        self.facts = audiovae.decoder_facts(name, settings.manifest)
        for kind, tensor in (("input", "state"), ("output", "new_state")):
            get = pb_utils.get_input_config_by_name if kind == "input" else pb_utils.get_output_config_by_name
            vocoder.check_state_dims(name, get(config, tensor)["dims"], self.facts.state_size, tensor)
        self.graph = model_settings.open_graph(name, settings, "vae_decoder_stream")
        log.info("ready: state_size=%d feat_dim=%d", self.facts.state_size, self.facts.feat_dim)

    def execute(self, requests):
        # Health probes get an empty response without running the model (ttscore.backend.glue).
        return glue.answer_probes(requests, self._execute)

    def _execute(self, requests):
        items = glue.request_items(requests, lambda t: audiovae.decoder_item(t, self.facts), log,
                                   "reading an audiovae_decoder request")
        return vocoder.vocoder_responses(vocoder.run_vocoder(self.graph.run, items), glue.response)

    def finalize(self):
        self.graph = None
