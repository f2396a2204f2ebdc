"""speech_generation: the decoupled entry model hosting ttscore.runtime.engine.Generator.

execute() only decodes each request and hands it to the GenerationScheduler's inbox, then returns;
a background thread runs the step loop (one batched decode step of the checkpoint's family for every
active request), checks cancellation between steps and streams every audio chunk. Exactly one FINAL per
request on every path is the scheduler's obligation (ttscore/backend/generation.py).
"""

from __future__ import annotations

import logging

import triton_python_backend_utils as pb_utils  # provided by the python backend stub

from ttscore.backend import generation, glue, triton_metrics
from ttscore.backend import settings as model_settings
from ttscore.contract import tensors as triton_io
from ttscore.contract.errors import InvalidRequest

log = logging.getLogger("ttscore.model.speech_generation")


class TritonPythonModel:
    def initialize(self, args):
        glue.install_logging()
        config = glue.model_config(args)
        # Fails fast (and so fails the model load) on a wrong policy or missing artifacts.
        self.settings = model_settings.SpeechGenerationSettings.from_model_config(config)
        model_settings.Instance.from_args(args).configure_process()
        self.generator = self._load_generator(self.settings)
        # The checkpoint's family decodes the request tensors (ttscore.runtime.family.Family).
        self.request_from_tensors = generation.request_decoder(self.settings)
        # Per-step batch/time/load metrics on Triton's metrics port; never fails initialize.
        self.publisher = triton_metrics.TritonMetricsPublisher.for_model(pb_utils, args)
        self.scheduler = generation.GenerationScheduler(
            self.generator,
            max_active=self.settings.max_active_requests,
            max_pending=self.settings.max_pending_requests,
            metrics=self.publisher.metrics,
            keepalive_s=self.settings.keepalive_s,
        )
        self.scheduler.start()
        self.publisher.start()
        log.info(
            "ready: artifacts=%s max_active_requests=%d max_pending_requests=%d",
            self.settings.artifacts_dir,
            self.settings.max_active_requests,
            self.settings.max_pending_requests,
        )

    def _load_generator(self, settings):
        return generation.load_generator(settings)

    def execute(self, requests):
        for request in requests:
            stream = glue.SenderStream(request.get_response_sender())
            if glue.is_probe(request):  # gateway health probe: answered now, proves stub + step loop alive
                self.scheduler.probe(stream)
                continue
            params = glue.request_parameters(request)
            extend = params.get(triton_io.TEXT_EXTEND_PARAMETER)
            if isinstance(extend, str):  # incremental text: more text for an open request
                try:
                    text = triton_io.request_kwargs({"text": glue.input_arrays(request).get("text")})["text"]
                except Exception:
                    self.scheduler.reject(stream, triton_io.WireError(triton_io.INVALID_ARG, "bad text", "text"))
                    continue
                self.scheduler.extend(extend, text, params.get(triton_io.TEXT_DONE_PARAMETER) is True, stream)
                continue
            key = params.get(triton_io.TEXT_KEY_PARAMETER)
            try:
                synthesis = self.request_from_tensors(glue.input_arrays(request))
            except InvalidRequest as exc:
                self.scheduler.reject(stream, triton_io.invalid_request_error(exc))
                continue
            except Exception:
                log.exception("could not decode request %s", request.request_id())
                self.scheduler.reject(stream, triton_io.WireError(triton_io.INTERNAL, triton_io.INTERNAL_MESSAGE))
                continue
            self.scheduler.submit(synthesis, stream, request.request_id(), text_key=key if isinstance(key, str) else None)
        # decoupled: responses go through the senders

    def finalize(self):
        scheduler = getattr(self, "scheduler", None)
        if scheduler is not None:
            scheduler.stop()  # signal, join, then UNAVAILABLE + FINAL for anything left
        publisher = getattr(self, "publisher", None)
        if publisher is not None:
            publisher.close()  # after the scheduler: its last counts are published too
        self.generator = None
