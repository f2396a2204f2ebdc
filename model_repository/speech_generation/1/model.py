"""speech_generation: the decoupled entry model hosting ttscore.generator.Generator.

execute() only decodes each request and hands it to the GenerationScheduler's inbox, then returns;
a background thread runs the step loop (one batched talker + code-predictor step for every active
request), checks cancellation between steps and streams every audio chunk. Exactly one FINAL per
request on every path is the scheduler's obligation (ttscore/triton_models.py).
"""

from __future__ import annotations

import logging

import triton_python_backend_utils as pb_utils  # noqa: F401  (provided by the python backend stub)

from ttscore import triton_glue as glue
from ttscore import triton_io, triton_models
from ttscore.errors import InvalidRequest

log = logging.getLogger("ttscore.model.speech_generation")


class TritonPythonModel:
    def initialize(self, args):
        glue.install_logging()
        config = glue.model_config(args)
        # Fails fast (and so fails the model load) on a wrong policy or missing artifacts.
        self.settings = triton_models.SpeechGenerationSettings.from_model_config(config)
        triton_models.Instance.from_args(args).configure_process()
        self.generator = self._load_generator(self.settings)
        self.scheduler = triton_models.GenerationScheduler(
            self.generator,
            max_active=self.settings.max_active_requests,
            max_pending=self.settings.max_pending_requests,
        )
        self.scheduler.start()
        log.info(
            "ready: artifacts=%s max_active_requests=%d max_pending_requests=%d",
            self.settings.artifacts_dir,
            self.settings.max_active_requests,
            self.settings.max_pending_requests,
        )

    def _load_generator(self, settings):
        return triton_models.load_generator(settings)

    def execute(self, requests):
        for request in requests:
            stream = glue.SenderStream(request.get_response_sender())
            if glue.is_probe(request):  # gateway health probe: answered now, proves stub + step loop alive
                self.scheduler.probe(stream)
                continue
            try:
                synthesis = triton_io.request_from_tensors(glue.input_arrays(request))
            except InvalidRequest as exc:
                self.scheduler.reject(stream, triton_io.invalid_request_error(exc))
                continue
            except Exception:
                log.exception("could not decode request %s", request.request_id())
                self.scheduler.reject(stream, triton_io.WireError(triton_io.INTERNAL, triton_io.INTERNAL_MESSAGE))
                continue
            self.scheduler.submit(synthesis, stream, request.request_id())
        return None  # decoupled: responses go through the senders

    def finalize(self):
        scheduler = getattr(self, "scheduler", None)
        if scheduler is not None:
            scheduler.stop()  # signal, join, then UNAVAILABLE + FINAL for anything left
        self.generator = None
