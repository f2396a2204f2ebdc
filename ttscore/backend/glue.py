"""pb_utils adapters shared by the `model_repository/*/1/model.py` files.

Imported only inside the python-backend stub (or under tests/fakes/triton_python_backend_utils.py),
which is why this is the one ttscore module that imports `triton_python_backend_utils`. Model logic
lives in ttscore.backend.generation and ttscore.contract.tensors, which have no Triton imports.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import numpy as np
import triton_python_backend_utils as pb_utils

from ttscore.contract.errors import InvalidRequest, UpstreamUnavailable
from ttscore.contract.tensors import (
    CANCELLED,
    HEALTH_PROBE_PARAMETER,
    INTERNAL,
    INTERNAL_MESSAGE,
    INVALID_ARG,
    UNAVAILABLE,
    WireError,
    invalid_request_error,
)

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def model_config(args: Mapping[str, Any]) -> dict[str, Any]:
    return dict(json.loads(args["model_config"]))


def triton_error(error: WireError) -> Any:
    codes = {
        INVALID_ARG: pb_utils.TritonError.INVALID_ARG,
        CANCELLED: pb_utils.TritonError.CANCELLED,
        UNAVAILABLE: pb_utils.TritonError.UNAVAILABLE,
        INTERNAL: pb_utils.TritonError.INTERNAL,
    }
    # The formatted message carries the code too: gRPC stream clients only receive the message.
    return pb_utils.TritonError(str(error), codes.get(error.code, pb_utils.TritonError.INTERNAL))


def response(outputs: Mapping[str, np.ndarray] | None = None, error: WireError | None = None) -> Any:
    if error is not None:
        return pb_utils.InferenceResponse(output_tensors=[], error=triton_error(error))
    tensors = [pb_utils.Tensor(name, value) for name, value in (outputs or {}).items()]
    return pb_utils.InferenceResponse(output_tensors=tensors)


def input_arrays(request: Any) -> dict[str, np.ndarray]:
    return {t.name(): t.as_numpy() for t in request.inputs()}


T = TypeVar("T")


def request_items(requests: list[Any], parse: Callable[[dict[str, np.ndarray]], T], log: logging.Logger,
                  what: str) -> list[T | WireError]:
    """`parse(inputs)` of each request, or its error: InvalidRequest -> INVALID_ARG naming the
    field, anything else -> INTERNAL (logged with `what`, the client sees a generic message)."""
    items: list[T | WireError] = []
    for request in requests:
        try:
            items.append(parse(input_arrays(request)))
        except InvalidRequest as exc:
            items.append(invalid_request_error(exc))
        except Exception:
            log.exception("%s failed", what)
            items.append(WireError(INTERNAL, INTERNAL_MESSAGE))
    return items


def each_request(requests: list[Any], handle: Callable[[dict[str, np.ndarray]], Mapping[str, np.ndarray]],
                 log: logging.Logger, what: str) -> list[Any]:
    """One response per request: `handle(inputs)`'s outputs, or its error (see request_items)."""
    return [response(error=x) if isinstance(x, WireError) else response(x)
            for x in request_items(requests, handle, log, what)]


def request_parameters(request: Any) -> dict[str, Any]:
    """The request's parameters ({} when there are none or they cannot be read)."""
    try:
        raw = request.parameters()
        params = json.loads(raw) if raw else {}
    except Exception:  # unreadable parameters: none; the normal path reports what is wrong
        return {}
    return params if isinstance(params, dict) else {}


def is_probe(request: Any) -> bool:
    """A gateway health probe (request parameter HEALTH_PROBE_PARAMETER set to true)?"""
    return request_parameters(request).get(HEALTH_PROBE_PARAMETER) is True


def answer_probes(requests: list[Any], execute: Callable[[list[Any]], list[Any]]) -> list[Any]:
    """execute() of a non-decoupled model with health probes answered here: one response per request,
    in order; probes get a response with no outputs (the stub is alive and executing), the rest go
    to `execute`. A dynamic batch may mix both."""
    probes = [is_probe(r) for r in requests]
    if not any(probes):
        return execute(requests)
    real = [r for r, probe in zip(requests, probes, strict=True) if not probe]
    answers = iter(execute(real) if real else [])
    return [response() if probe else next(answers) for probe in probes]


class SenderStream:
    """ttscore.backend.generation.ResponseStream over a decoupled response sender."""

    def __init__(self, sender: Any) -> None:
        self._sender = sender

    def send(self, outputs: dict[str, np.ndarray] | None, error: WireError | None, final: bool) -> None:
        flags = FINAL if final else 0
        if outputs is None and error is None:
            self._sender.send(flags=flags)
        else:
            self._sender.send(response(outputs, error), flags=flags)

    def is_cancelled(self) -> bool:
        return bool(self._sender.is_cancelled())


class PbLogHandler(logging.Handler):
    """Routes `logging` records of ttscore into Triton's log (pb_utils.Logger)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = self.format(record)
            if record.levelno >= logging.ERROR:
                pb_utils.Logger.log_error(msg)
            elif record.levelno >= logging.WARNING:
                pb_utils.Logger.log_warn(msg)
            elif record.levelno >= logging.INFO:
                pb_utils.Logger.log_info(msg)
            else:
                pb_utils.Logger.log_verbose(msg)
        except Exception:  # logging must never take the model down
            self.handleError(record)


def install_logging(level: int = logging.INFO) -> None:
    root = logging.getLogger("ttscore")
    if not any(isinstance(h, PbLogHandler) for h in root.handlers):
        handler = PbLogHandler()
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        root.addHandler(handler)
        root.setLevel(level)
        root.propagate = False


def _unavailable(error: Any) -> bool:
    """A BLS error meaning the callee cannot serve now (dead stub, unloaded or reloading model)."""
    code = getattr(error, "code", lambda: None)()
    text = str(error.message()).lower()
    return code in (pb_utils.TritonError.UNAVAILABLE, pb_utils.TritonError.NOT_FOUND) or any(
        s in text for s in ("is not healthy", "unknown model", "is not ready", "is not loaded"))


class BlsVocoder:
    """The generator's vocoder as BLS calls to a streaming vocoder model (`code2wav`, shared by
    every Qwen3-TTS checkpoint with the same speech tokenizer; `audiovae_decoder` for VoxCPM2).
    Streams are batched by the caller: one BLS request per distinct chunk length, one row per
    stream. `feeds` is the family's FamilyModel.vocoder_feeds (the model's input names)."""

    external = True  # runs in another process: the engine counts its time apart from its own work

    def __init__(self, model_name: str, state_size: int, feeds: Callable[..., dict[str, np.ndarray]],
                 max_rows: int = 8) -> None:
        self.model_name = model_name
        self.state_size = state_size
        self.feeds = feeds
        self.max_rows = max_rows  # the vocoder model's max_batch_size

    def new_stream(self) -> Any:
        from ttscore.runtime.vocoder import new_stream

        return new_stream(self.state_size)

    def _run(self, frames: np.ndarray, state: np.ndarray, position: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # A per-row scalar is [1] per request in a batching model's config: [B] -> [B, 1].
        inputs = [
            pb_utils.Tensor(name, value.reshape(-1, 1) if value.ndim == 1 else value)
            for name, value in self.feeds(frames, state, position).items()
        ]
        res = pb_utils.InferenceRequest(
            model_name=self.model_name, inputs=inputs, requested_output_names=["pcm", "new_state"]
        ).exec()
        if res.has_error():
            error = res.error()
            message = f"{self.model_name}: {error.message()}"
            if _unavailable(error):
                raise UpstreamUnavailable(message)
            raise RuntimeError(message)
        return (
            pb_utils.get_output_tensor_by_name(res, "pcm").as_numpy(),
            pb_utils.get_output_tensor_by_name(res, "new_state").as_numpy(),
        )

    def decode(self, items: list[tuple[Any, np.ndarray]]) -> list[np.ndarray]:
        from ttscore.runtime.vocoder import decode_streams

        return decode_streams(items, self._run, self.max_rows)
