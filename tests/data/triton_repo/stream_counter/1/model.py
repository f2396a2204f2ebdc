"""Test-only decoupled model (see config.pbtxt). Runs each request on its own thread so the
cancellation check (`response_sender.is_cancelled()`) between responses can be exercised."""

import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self._threads = []

    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "count").as_numpy().reshape(-1)[0])
            delay = pb_utils.get_input_tensor_by_name(request, "delay_ms")
            delay_s = 0.0 if delay is None else int(delay.as_numpy().reshape(-1)[0]) / 1000.0
            sender = request.get_response_sender()
            t = threading.Thread(target=self._stream, args=(sender, count, delay_s), daemon=True)
            t.start()
            self._threads.append(t)

    def _stream(self, sender, count, delay_s):
        if count < 0:
            err = pb_utils.TritonError("count must be >= 0", pb_utils.TritonError.INVALID_ARG)
            sender.send(pb_utils.InferenceResponse(error=err),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return
        for i in range(count):
            if sender.is_cancelled():
                pb_utils.Logger.log_info(f"stream_counter: cancelled after {i} responses")
                err = pb_utils.TritonError("cancelled", pb_utils.TritonError.CANCELLED)
                sender.send(pb_utils.InferenceResponse(error=err),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                return
            out = [pb_utils.Tensor("index", np.array([i], dtype=np.int32)),
                   pb_utils.Tensor("audio", np.full([4], i, dtype=np.float32))]
            sender.send(pb_utils.InferenceResponse(output_tensors=out))
            if delay_s:
                time.sleep(delay_s)
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for t in self._threads:
            t.join(timeout=5)
