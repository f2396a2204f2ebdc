"""The one module that talks to Triton (the only importer of tritonclient and grpc).

- `stream_speech`: one gRPC bidirectional stream per request (ModelStreamInfer) to the decoupled
  speech_generation model, sent with `triton_enable_empty_final_response` and read until the
  response flagged `triton_final_response` (never on a count or a timeout). The request side of
  the stream stays open until then. If the consumer stops early (client disconnect, downstream
  error) the call is cancelled, which cancels the request inside Triton: the model sees
  `is_cancelled()` at its next step and frees the slot.
- `infer`: a plain ModelInfer (a family's feature models: voice_features, audiovae_encoder).
- Readiness: server and per-model readiness RPCs.
- Health (gateway.monitor): liveness, ensemble steps from the model configs, a health probe per
  model (a request with the `HEALTH_PROBE_PARAMETER` parameter and the smallest valid value of each
  required input, sent on a stream so decoupled and plain models are probed alike; the model answers
  it without running) and reload through the repository API (unload + load: a plain load of an
  unchanged model is a no-op in Triton 2.51, even when its stub is dead).
- The channel reconnects within ~2 s of Triton coming back (gRPC's default backoff grows to 2 min).

Errors leave as `BackendError` with the model repository's codes (parsed from the message by
ttscore.contract.tensors.parse_error); Triton being unreachable, or a model not loaded, is UNAVAILABLE.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

import grpc
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
from tritonclient.grpc import MAX_GRPC_MESSAGE_SIZE
from tritonclient.utils import InferenceServerException

from ttscore.contract.tensors import HEALTH_PROBE_PARAMETER, parse_error

from .backend import (
    CANCELLED,
    DEADLINE_EXCEEDED,
    INTERNAL,
    UNAVAILABLE,
    BackendError,
    ProbeResult,
    SpeechChunk,
)
from .usage import Usage

logger = logging.getLogger(__name__)

READINESS_TIMEOUT_S = 3.0
CHANNEL_ARGS = [
    ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_SIZE),
    ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_SIZE),
    # Reconnect soon after Triton restarts: new requests fail fast while the channel waits.
    ("grpc.initial_reconnect_backoff_ms", 500),
    ("grpc.min_reconnect_backoff_ms", 500),
    ("grpc.max_reconnect_backoff_ms", 2000),
]
_PROBE_DTYPES: dict[str, Any] = {
    "TYPE_BOOL": np.bool_, "TYPE_UINT8": np.uint8, "TYPE_UINT16": np.uint16, "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64, "TYPE_INT8": np.int8, "TYPE_INT16": np.int16, "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64, "TYPE_FP16": np.float16, "TYPE_FP32": np.float32, "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}
# Triton's own messages for a model it cannot run right now (not loaded, loading, unloaded, or a
# server shutting down: "Server is stopping, scheduler for model has stopped accepting new inference
# requests", which a replay or a retry that reaches a stopping Triton gets before any audio).
_MODEL_UNAVAILABLE = re.compile(
    r"unknown model|is not ready|not found|unavailable|is not loaded|server is stopping|stopped accepting", re.IGNORECASE
)


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


# gRPC core's own details for a call whose transport broke under it (measured: a stream sent as tritonserver was
# SIGKILLed ended with INTERNAL and these details); Triton's own errors carry its messages. Unavailable, not a fault.
_CORE_INTERNAL = "Internal error from Core"


def _from_exception(exc: InferenceServerException) -> BackendError:
    status = str(exc.status() or "")
    if "INTERNAL" in status and (exc.message() or "").strip() == _CORE_INTERNAL:
        return BackendError(UNAVAILABLE, "the connection to the inference server broke")
    if "DEADLINE_EXCEEDED" in status:
        return BackendError(DEADLINE_EXCEEDED, "the inference server did not answer in time")
    if "UNAVAILABLE" in status:
        return BackendError(UNAVAILABLE, "the inference server is unreachable")
    if "CANCELLED" in status:
        return BackendError(CANCELLED, "request cancelled")
    return _from_message(exc.message() or str(exc))


def _from_rpc(exc: grpc.aio.AioRpcError) -> BackendError:
    code = exc.code()
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return BackendError(DEADLINE_EXCEEDED, "the inference server did not answer in time")
    if code == grpc.StatusCode.UNAVAILABLE:
        return BackendError(UNAVAILABLE, "the inference server is unreachable")
    if code == grpc.StatusCode.CANCELLED:
        return BackendError(CANCELLED, "request cancelled")
    details = exc.details() or ""
    if code == grpc.StatusCode.INTERNAL and details.strip() == _CORE_INTERNAL:
        return BackendError(UNAVAILABLE, "the connection to the inference server broke")
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


def probe_tensors(config: dict[str, Any]) -> dict[str, np.ndarray]:
    """The smallest valid value of every required input of a model config (JSON form): zeros (empty
    strings), -1 dims as 1, plus the batch dim when the model batches. Optional inputs are left out."""
    batch = [1] if int(config.get("max_batch_size") or 0) > 0 else []
    out = {}
    for spec in config.get("input") or []:
        if spec.get("optional"):
            continue
        dtype = _PROBE_DTYPES.get(str(spec.get("data_type")))
        if dtype is None:
            raise ValueError(f"input {spec.get('name')!r} has unsupported data_type {spec.get('data_type')}")
        shape = batch + [max(int(d), 1) for d in spec.get("dims") or []]
        value = np.full(shape, b"", dtype=object) if dtype is np.object_ else np.zeros(shape, dtype)
        out[str(spec["name"])] = value
    return out


def _probe_error(message: str) -> ProbeResult:
    """A probe answered with an error: the model cannot serve (a dead stub answers "Stub process
    '<instance>' is not healthy." after ~1 s; an unloaded model is unknown / not ready)."""
    return ProbeResult("failed", message.strip() or "error without a message")


class TritonBackend:
    """InferenceBackend over Triton's gRPC endpoint. One channel, opened here, closed by close().

    `unary_timeout_s` bounds every plain (non-streaming) inference call; None: no limit."""

    def __init__(self, url: str, unary_timeout_s: float | None = None) -> None:
        self.url = url
        self.unary_timeout_s = unary_timeout_s
        self._client = grpcaio.InferenceServerClient(url, channel_args=CHANNEL_ARGS)
        self._configs: dict[str, dict[str, Any]] = {}  # model configs (JSON form), for probes

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

    # --- health ---------------------------------------------------------------------------------

    async def server_live(self) -> bool:
        try:
            return bool(await self._client.is_server_live(client_timeout=READINESS_TIMEOUT_S))
        except InferenceServerException:
            return False

    async def _config(self, model: str) -> dict[str, Any]:
        config = self._configs.get(model)
        if config is None:
            try:
                reply = await self._client.get_model_config(model, as_json=True, client_timeout=READINESS_TIMEOUT_S)
            except InferenceServerException as exc:
                raise _from_exception(exc) from None
            config = dict(reply.get("config") or {})
            self._configs[model] = config
        return config

    async def model_components(self, model: str) -> list[str]:
        config = await self._config(model)
        if config.get("platform") != "ensemble":
            return [model]
        out: list[str] = []
        for step in (config.get("ensemble_scheduling") or {}).get("step") or []:
            for name in await self.model_components(str(step["model_name"])):
                if name not in out:
                    out.append(name)
        return out

    async def probe_model(self, model: str, timeout_s: float) -> ProbeResult:
        try:
            return await asyncio.wait_for(self._probe(model), timeout_s)
        except asyncio.TimeoutError:
            return ProbeResult("timeout", f"no answer to a health probe within {timeout_s:g} s")
        except BackendError as exc:  # the model config could not be read: unknown model, or no server?
            self._configs.pop(model, None)
            if not await self.server_live():
                return ProbeResult("unreachable", exc.message)
            return _probe_error(exc.message)

    async def _probe(self, model: str) -> ProbeResult:
        try:
            tensors = probe_tensors(await self._config(model))
        except ValueError as exc:
            return _probe_error(f"cannot build a probe: {exc}")
        finished = asyncio.Event()
        request = {
            "model_name": model,
            "inputs": _inputs(tensors),
            "request_id": "health-probe",
            "parameters": {"triton_enable_empty_final_response": True, HEALTH_PROBE_PARAMETER: True},
        }

        async def requests() -> AsyncIterator[dict[str, Any]]:
            yield request
            await finished.wait()

        call = self._client.stream_infer(requests())
        try:
            async for result, error in call:
                if error is not None:
                    return _probe_error(error.message() or str(error))
                params = result.get_response().parameters
                # Plain models answer once; a decoupled one ends with its flagged final response.
                if "triton_final_response" not in params or params["triton_final_response"].bool_param:
                    return ProbeResult("ok")
            return _probe_error("the probe stream ended without an answer")
        except grpc.aio.AioRpcError as exc:
            err = _from_rpc(exc)
            return ProbeResult("unreachable", err.message) if err.code == UNAVAILABLE else _probe_error(err.message)
        finally:
            finished.set()
            call.cancel()  # a no-op once answered; on timeout it ends the RPC

    async def reload_model(self, model: str, timeout_s: float) -> None:
        self._configs.pop(model, None)
        try:
            await self._client.unload_model(model, client_timeout=timeout_s)
        except InferenceServerException as exc:
            err = _from_exception(exc)
            if err.code == UNAVAILABLE:
                raise err from None
            logger.warning("unloading %s failed (%s); loading it anyway", model, err.message)
        try:
            await self._client.load_model(model, client_timeout=timeout_s)
        except InferenceServerException as exc:
            err = _from_exception(exc)
            raise BackendError(err.code or INTERNAL, err.message, err.param) from None

    # --- inference --------------------------------------------------------------------------------

    async def infer(self, model: str, inputs: dict[str, np.ndarray], request_id: str) -> dict[str, np.ndarray]:
        try:
            result = await self._client.infer(model, _inputs(inputs), request_id=request_id,
                                              client_timeout=self.unary_timeout_s)
        except InferenceServerException as exc:
            raise _from_exception(exc) from None
        out = {}
        for output in result.get_response().outputs:
            value = result.as_numpy(output.name)
            if value is not None:
                out[output.name] = value
        return out

    async def stream_speech(
        self, model: str, inputs: dict[str, np.ndarray], request_id: str,
        parameters: Mapping[str, Any] | None = None,
    ) -> AsyncGenerator[SpeechChunk, None]:
        finished = asyncio.Event()
        request = {
            "model_name": model,
            "inputs": _inputs(inputs),
            "request_id": request_id,
            "parameters": {**(parameters or {}), "triton_enable_empty_final_response": True},
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
