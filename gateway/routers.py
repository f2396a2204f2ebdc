"""HTTP and WebSocket routes: parse, call the service, shape the response. No Speech API logic
lives here (voices: gateway.voice_registry; the WebSocket protocol: gateway.streaming)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable
from typing import Any, TypeVar

from fastapi import APIRouter, Request, WebSocket
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.requests import ClientDisconnect
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocketDisconnect, WebSocketState

from ttscore.contract.errors import InvalidRequest

from . import encoding, sse
from .errors import error_body, internal
from .errors import ws_error as error_message
from .metrics import GatewayMetrics, trace_of
from .planning import refuse_raw_word_timestamps
from .protocol import (
    VOICE_UPLOAD_FORM,
    BatchSpeechRequest,
    BatchSpeechResponse,
    CaptionedSpeech,
    ErrorResponse,
    Liveness,
    ModelList,
    Readiness,
    SpeechRequest,
    VoiceDeleteResponse,
    VoiceNotFoundResponse,
    VoicesResponse,
    VoiceUploadResponse,
)
from .services import FINISH_REASON_HEADER, AudioStream, SpeechService
from .streaming.session import StreamingSession
from .streaming.transport import CLOSE_INTERNAL_ERROR, CLOSE_NORMAL, Disconnected
from .usage import USAGE_HEADERS
from .voices import UploadTooLarge, parse_multipart_form

logger = logging.getLogger(__name__)
T = TypeVar("T")

REQUEST_ID_KEY = "gateway.request_id"
SEED_HEADER = "X-Seed"


class ClientDisconnected(Exception):
    """The client went away before the response started; nothing is sent."""


def request_id(request: Request) -> str:
    return str(request.scope.get(REQUEST_ID_KEY, ""))


def service(request: Request) -> SpeechService:
    return request.app.state.speech  # type: ignore[no-any-return]


def metrics(request: Request) -> GatewayMetrics:
    return request.app.state.metrics  # type: ignore[no-any-return]


async def _wait_disconnect(request: Request) -> None:
    # The body was read already, so the next ASGI message is the disconnect.
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def until_disconnect(request: Request, work: Awaitable[T]) -> T:
    """Run `work`, cancelling it if the client disconnects first (which cancels Triton work)."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_wait_disconnect(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        watcher.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    logger.info("client of %s disconnected; request cancelled", request_id(request))
    raise ClientDisconnected()


class AudioStreamResponse(StreamingResponse):
    """StreamingResponse that always releases its stream, even if the body never started."""

    def __init__(self, stream: AudioStream, headers: dict[str, str]) -> None:
        super().__init__(stream.body(), media_type=stream.media_type, headers=headers)
        self._stream = stream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._stream.aclose()


# --- OpenAPI descriptions of the non-JSON responses ---------------------------------------------

_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorResponse, "description": "Invalid parameter (param names it)"},
    404: {"model": ErrorResponse, "description": "Unknown model"},
    500: {"model": ErrorResponse, "description": "Internal error (the message carries the request id)"},
    429: {"model": ErrorResponse, "description": "The API key has its most generations in progress; see Retry-After",
          "headers": {"Retry-After": {"schema": {"type": "integer"}}}},
    503: {"model": ErrorResponse, "description": "Triton or a model is not ready, or the request queue is full; see "
          "Retry-After", "headers": {"Retry-After": {"schema": {"type": "integer"}}}},
}
_SSE_EVENT = {
    "type": "object",
    "properties": {
        "event": {"type": "string", "enum": [sse.DELTA, sse.TIMESTAMPS, sse.DONE, sse.ERROR]},
        "data": {"type": "string", "contentMediaType": "application/json"},
        "id": {"type": "string"},
        "retry": {"type": "integer"},
    },
    "required": ["data"],
}
_AUDIO_CONTENT = {mt: {"schema": {"type": "string", "format": "binary"}}
                  for mt in dict.fromkeys([*encoding.MEDIA_TYPES.values(), *encoding.STREAM_MEDIA_TYPES.values()])}
_SPEECH_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The audio (whole clip, or raw pcm/wav bytes as decoded with stream_format='audio'), "
        "or speech.audio.* Server-Sent Events (stream=true / stream_format='sse').",
        # An event stream is described per event (what OpenAPI 3.2 calls itemSchema; schemathesis
        # validates each parsed event against `schema`): `event` names it, `data` holds its JSON.
        "content": {**_AUDIO_CONTENT, sse.MEDIA_TYPE: {"schema": _SSE_EVENT},
                    "application/json": {"schema": CaptionedSpeech.model_json_schema()}},
        "headers": {**{name: {"schema": {"type": "integer"}, "description": "Token usage (non-streaming responses)"}
                       for name in USAGE_HEADERS},
                    FINISH_REASON_HEADER: {"schema": {"type": "string", "enum": ["stop", "length"]},
                                           "description": "Why the generation ended: stop (the model ended it) or "
                                           "length (max_new_tokens or the runaway guard). Whole files always; raw "
                                           "streams only when the first chunk was the last (use SSE otherwise)."},
                    SEED_HEADER: {"schema": {"type": "integer"}, "description": "The seed the audio was generated "
                                  "with (the request's, or one the server drew): the same request with this seed "
                                  "gives the same audio. Absent for models that take no seed or apply their own default."}},
    },
    **_ERRORS,
}

router = APIRouter()


@router.post("/v1/audio/speech", response_class=Response, responses=_SPEECH_RESPONSES,
             summary="Generate speech from text")
async def create_speech(body: SpeechRequest, request: Request) -> Response:
    svc, rid, trace = service(request), request_id(request), trace_of(request.scope)
    metrics(request).requested(trace, body.model)
    plan = svc.plan(body.to_fields())
    # The seed the audio came from (the client's or the gateway's): the same request with it is the same audio.
    seed = {SEED_HEADER: str(plan.seed)} if plan.seed is not None else {}
    refuse_raw_word_timestamps(plan)
    if plan.output.stream is not None:
        stream = await until_disconnect(request, svc.open_stream(plan, rid, trace=trace))
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **seed}
        if stream.finish_reason is not None and not stream.sse:
            # Known before the body starts only when the first chunk was the last one; otherwise a raw stream
            # cannot carry it (no trailers): SSE's speech.audio.done and the WebSocket's audio.done do.
            headers[FINISH_REASON_HEADER] = stream.finish_reason
        return AudioStreamResponse(stream, headers)
    clip = await until_disconnect(request, svc.synthesize(plan, rid, trace=trace))
    headers = {**clip.usage.headers(), **seed, FINISH_REASON_HEADER: clip.finish_reason}
    if clip.words is not None:  # word_timestamps: the audio and its words in one JSON body
        return JSONResponse(CaptionedSpeech.of(clip, plan.output.format).model_dump(), headers=headers)
    return Response(clip.audio, media_type=clip.media_type, headers=headers)


@router.post("/v1/audio/speech/batch", response_model=BatchSpeechResponse, response_model_exclude_none=True,
             responses=_ERRORS, summary="Generate speech for up to 32 texts")
async def create_speech_batch(body: BatchSpeechRequest, request: Request) -> Any:
    trace = trace_of(request.scope)
    metrics(request).requested(trace, body.model)
    return await until_disconnect(request, service(request).batch(body, request_id(request), trace))


@router.get("/v1/audio/voices", response_model=VoicesResponse, response_model_exclude_none=True,
            responses={500: _ERRORS[500]}, summary="List voices")
async def list_voices(request: Request) -> Any:
    return service(request).listings.voices()


def _registry(request: Request) -> Any:
    registry = getattr(request.app.state, "voices", None)
    if registry is None or not hasattr(registry, "upload"):
        raise InvalidRequest("Voice upload is not enabled on this server", None)
    return registry


# Only `request`: a Form/File parameter would make FastAPI read (and spool) the whole body before
# the handler runs; parse_multipart_form enforces the 10 MB limit while the body streams in.
@router.post("/v1/audio/voices", response_model=VoiceUploadResponse, response_model_exclude_none=True,
             responses={400: _ERRORS[400], 500: _ERRORS[500], 503: _ERRORS[503]},
             openapi_extra={"requestBody": {"required": True,
                                            "content": {"multipart/form-data": {"schema": VOICE_UPLOAD_FORM}}}},
             summary="Upload a voice sample for voice cloning")
async def upload_voice(request: Request) -> Any:
    registry = _registry(request)
    limit = registry.store.max_file_bytes
    try:
        form = await parse_multipart_form(
            request.headers.get("content-type"), request.stream(), max_file_bytes=limit,
            file_limits={"audio_sample": limit}, content_length=request.headers.get("content-length"),
        )
    except ClientDisconnect:
        logger.info("upload %s: the client went away mid-body; nothing stored", request_id(request))
        raise ClientDisconnected() from None
    except UploadTooLarge as exc:
        if exc.limit == limit:
            raise
        # The whole body passed its limit (the file's plus room for the text fields): it is the
        # file that is too big, so say that, in the spec's terms.
        raise UploadTooLarge(limit, "audio_sample") from None
    return await registry.upload(form)


@router.delete("/v1/audio/voices/{name}", response_model=VoiceDeleteResponse,
               responses={404: {"model": VoiceNotFoundResponse, "description": "No uploaded voice of that name"},
                          400: _ERRORS[400], 500: _ERRORS[500]},
               summary="Delete an uploaded voice")
async def delete_voice(name: str, request: Request) -> Any:
    return await _registry(request).delete(name)


# --- WebSocket: streaming text input -----------------------------------------------------------------


class WebSocketTransport:
    """streaming.Transport over Starlette's WebSocket (send failures mean the client is gone)."""

    def __init__(self, websocket: WebSocket) -> None:
        self.ws = websocket

    async def receive(self) -> str | bytes | None:
        message = await self.ws.receive()
        if message["type"] == "websocket.disconnect":
            return None
        if message.get("text") is not None:
            return str(message["text"])
        return bytes(message.get("bytes") or b"")

    async def send_json(self, message: dict[str, Any]) -> None:
        try:
            await self.ws.send_json(message)
        except (WebSocketDisconnect, RuntimeError, OSError) as exc:
            raise Disconnected() from exc

    async def send_bytes(self, data: bytes) -> None:
        try:
            await self.ws.send_bytes(data)
        except (WebSocketDisconnect, RuntimeError, OSError) as exc:
            raise Disconnected() from exc

    async def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None:
        if self.ws.application_state != WebSocketState.DISCONNECTED:
            with contextlib.suppress(Exception):
                await self.ws.close(code, reason)


@router.websocket("/v1/audio/speech/stream")
async def speech_stream(websocket: WebSocket) -> None:
    """Streaming text in, audio out (spec: "Streaming Text Input (WebSocket)")."""
    rid = str(websocket.scope.get(REQUEST_ID_KEY) or "")
    await websocket.accept(headers=[(b"x-request-id", rid.encode("latin-1"))] if rid else None)
    transport = WebSocketTransport(websocket)
    app = websocket.app
    session = StreamingSession(app.state.speech, transport, app.state.settings, rid,
                               route=trace_of(websocket.scope).route, stop=app.state.drain.started)
    try:
        await session.run()
    except Exception:
        logger.exception("streaming session %s failed", rid)
        with contextlib.suppress(Disconnected):
            await transport.send_json(error_message(internal(rid).message))
        await transport.close(CLOSE_INTERNAL_ERROR, "internal error")
    finally:
        await transport.close(CLOSE_NORMAL)


@router.get("/v1/models", response_model=ModelList, response_model_exclude_none=True, responses={500: _ERRORS[500]}, summary="List served models")
async def list_models(request: Request) -> Any:
    return service(request).listings.models()


@router.get("/metrics", include_in_schema=False)
async def prometheus_metrics(request: Request) -> Response:
    """Prometheus text format (gateway.metrics); open without an API key, like /health."""
    m = metrics(request)
    return Response(m.render(), media_type=m.content_type)


@router.get("/health", response_model=Liveness, responses={500: _ERRORS[500]}, summary="Liveness")
async def health() -> Any:
    return {"status": "ok"}


@router.get("/ready", response_model=Readiness,
            responses={503: {"model": Readiness, "description": "Not ready; see Retry-After",
                             "headers": {"Retry-After": {"schema": {"type": "integer"}}}},
                       500: _ERRORS[500]},
            summary="Readiness: Triton and every served model")
async def ready(request: Request) -> Any:
    svc = service(request)
    ok, triton, models = await svc.readiness.check()
    # Draining (gateway.drain): not ready whatever Triton says, so load balancers stop sending.
    status = "draining" if request.app.state.drain.draining else "ready" if ok else "not_ready"
    body: dict[str, Any] = {"status": status, "triton": triton, "models": models, "broken": svc.readiness.broken(),
                            "admission": svc.admission.status()}
    if svc.endpoints is not None:  # several Triton endpoints (gateway.pool): which are in service
        body["endpoints"] = svc.endpoints()
    if status == "ready":
        return body
    return JSONResponse(body, status_code=503, headers={"Retry-After": str(svc.settings.retry_after_s)})


__all__ = ["REQUEST_ID_KEY", "ClientDisconnected", "error_body", "router"]
