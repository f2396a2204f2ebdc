"""The one module that talks to Triton (the only importer of tritonclient and grpc).

- `stream_speech`: one gRPC bidirectional stream per request (ModelStreamInfer) to the decoupled
  speech_generation model, sent with `triton_enable_empty_final_response` and read until the
  response flagged `triton_final_response` (never on a count or a timeout). The request side of
  the stream stays open until then. If the consumer stops early (client disconnect, downstream
  error) the call is cancelled, which cancels the request inside Triton: the model sees
  `is_cancelled()` at its next step and frees the slot.
- `voice_features`: a plain ModelInfer on the voice_features ensemble.
- Readiness: server and per-model readiness RPCs.

Errors leave as `BackendError` with the model repository's codes (parsed from the message by
ttscore.contract.tensors.parse_error); Triton being unreachable, or a model not loaded, is UNAVAILABLE.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import grpc
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
from tritonclient.utils import InferenceServerException

from ttscore.contract.tensors import parse_error

from .backend import CANCELLED, INTERNAL, UNAVAILABLE, BackendError, SpeechChunk
from .usage import Usage

logger = logging.getLogger(__name__)

READINESS_TIMEOUT_S = 3.0
# Triton's own messages for a model it cannot run right now (not loaded, loading, unloaded).
_MODEL_UNAVAILABLE = re.compile(r"unknown model|is not ready|not found|unavailable|is not loaded", re.IGNORECASE)


def _inputs(tensors: dict[str, np.ndarray]) -> list[grpcclient.InferInput]:
    out = []
    for name, value in tensors.items():
        dtype = "BYTES" if value.dtype == np.object_ else grpcclient.np_to_triton_dtype(value.dtype)
        inp = grpcclient.InferInput(name, list(value.shape), dtype)
        inp.set_data_from_numpy(value)
        out.append(inp)
    return out


def _from_message(message: str) -> BackendError:
    wire = parse_error(message)
    code = wire.code
    if not code and _MODEL_UNAVAILABLE.search(message):
        code = UNAVAILABLE
    return BackendError(code, wire.message, wire.param)


def _from_exception(exc: InferenceServerException) -> BackendError:
    status = str(exc.status() or "")
    if "UNAVAILABLE" in status or "DEADLINE_EXCEEDED" in status:
        return BackendError(UNAVAILABLE, "the inference server is unreachable")
    if "CANCELLED" in status:
        return BackendError(CANCELLED, "request cancelled")
    return _from_message(exc.message() or str(exc))


def _from_rpc(exc: grpc.aio.AioRpcError) -> BackendError:
    code = exc.code()
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return BackendError(UNAVAILABLE, "the inference server is unreachable")
    if code == grpc.StatusCode.CANCELLED:
        return BackendError(CANCELLED, "request cancelled")
    details = exc.details() or ""
    err = _from_message(details)
    return err if err.code else BackendError(INTERNAL, details or str(code))


def _chunk(result: Any, final: bool) -> SpeechChunk | None:
    audio = result.as_numpy("audio")
    if audio is None:  # an empty (flags-only) final response
        return None
    frames = result.as_numpy("frames")
    reason = result.as_numpy("finish_reason")
    usage = result.as_numpy("usage")
    return SpeechChunk(
        audio=np.asarray(audio, dtype=np.float32).reshape(-1),
        frames=int(frames.reshape(-1)[0]) if frames is not None else 0,
        usage=Usage.from_tensor(usage.reshape(-1)) if usage is not None else Usage(),
        final=final,
        finish_reason=(reason.reshape(-1)[0].decode("utf-8") if reason is not None else "") if final else "",
    )


class TritonBackend:
    """InferenceBackend over Triton's gRPC endpoint. One channel, opened here, closed by close()."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._client = grpcaio.InferenceServerClient(url)

    async def close(self) -> None:
        await self._client.close()

    async def server_ready(self) -> bool:
        try:
            return bool(await self._client.is_server_ready(client_timeout=READINESS_TIMEOUT_S))
        except InferenceServerException:
            return False

    async def model_ready(self, model: str) -> bool:
        try:
            return bool(await self._client.is_model_ready(model, client_timeout=READINESS_TIMEOUT_S))
        except InferenceServerException:
            return False

    async def voice_features(
        self, model: str, audio: np.ndarray, sample_rate: int, request_id: str
    ) -> tuple[np.ndarray, np.ndarray]:
        inputs = _inputs({
            "audio": np.ascontiguousarray(audio, dtype=np.float32).reshape(-1),
            "sample_rate": np.array([sample_rate], dtype=np.int32),
        })
        try:
            result = await self._client.infer(model, inputs, request_id=request_id)
        except InferenceServerException as exc:
            raise _from_exception(exc) from None
        x_vector, ref_codes = result.as_numpy("x_vector"), result.as_numpy("ref_codes")
        if x_vector is None or ref_codes is None:
            raise BackendError(INTERNAL, f"{model} returned no x_vector/ref_codes")
        return np.asarray(x_vector, np.float32).reshape(-1), np.asarray(ref_codes, np.int64)

    async def stream_speech(
        self, model: str, inputs: dict[str, np.ndarray], request_id: str
    ) -> AsyncGenerator[SpeechChunk, None]:
        finished = asyncio.Event()
        request = {
            "model_name": model,
            "inputs": _inputs(inputs),
            "request_id": request_id,
            "parameters": {"triton_enable_empty_final_response": True},
        }

        async def requests() -> AsyncIterator[dict[str, Any]]:
            yield request
            await finished.wait()  # half-close only after the FINAL response

        call = self._client.stream_infer(requests())
        complete = False
        try:
            try:
                async for result, error in call:
                    if error is not None:
                        complete = True  # an error response is the request's FINAL one
                        raise _from_exception(error)
                    params = result.get_response().parameters
                    final = "triton_final_response" in params and params["triton_final_response"].bool_param
                    chunk = _chunk(result, final)
                    if final:
                        complete = True
                    if chunk is not None:
                        yield chunk
                    if final:
                        return
            except grpc.aio.AioRpcError as exc:
                complete = True
                raise _from_rpc(exc) from None
            complete = True
            raise BackendError(INTERNAL, "the inference stream ended before the final response")
        finally:
            finished.set()
            if not complete:
                # The consumer stopped early: cancel the RPC, which cancels the request in Triton.
                call.cancel()
                logger.info("cancelled Triton request %s", request_id)
