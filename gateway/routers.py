"""HTTP routes: parse, call the service, shape the response. No Speech API logic lives here."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable
from typing import Any, TypeVar

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from . import encoding, sse
from .errors import error_body
from .protocol import (
    BatchSpeechRequest,
    BatchSpeechResponse,
    ErrorResponse,
    Liveness,
    ModelList,
    Readiness,
    SpeechRequest,
    VoicesResponse,
)
from .services import AudioStream, SpeechService
from .usage import USAGE_HEADERS

logger = logging.getLogger(__name__)
T = TypeVar("T")

REQUEST_ID_KEY = "gateway.request_id"


class ClientDisconnected(Exception):
    """The client went away before the response started; nothing is sent."""


def request_id(request: Request) -> str:
    return str(request.scope.get(REQUEST_ID_KEY, ""))


def service(request: Request) -> SpeechService:
    return request.app.state.speech  # type: ignore[no-any-return]


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
    503: {"model": ErrorResponse, "description": "Triton or a model is not ready; see Retry-After",
          "headers": {"Retry-After": {"schema": {"type": "integer"}}}},
}
_AUDIO_CONTENT = {mt: {"schema": {"type": "string", "format": "binary"}} for mt in dict.fromkeys(encoding.MEDIA_TYPES.values())}
_SPEECH_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The audio (whole clip, or raw pcm/wav bytes as decoded with stream_format='audio'), "
        "or speech.audio.* Server-Sent Events (stream=true / stream_format='sse').",
        "content": {**_AUDIO_CONTENT, sse.MEDIA_TYPE: {"schema": {"type": "string"}}},
        "headers": {name: {"schema": {"type": "integer"}, "description": "Token usage (non-streaming responses)"}
                    for name in USAGE_HEADERS},
    },
    **_ERRORS,
}

router = APIRouter()


@router.post("/v1/audio/speech", response_class=Response, responses=_SPEECH_RESPONSES,
             summary="Generate speech from text")
async def create_speech(body: SpeechRequest, request: Request) -> Response:
    svc, rid = service(request), request_id(request)
    plan = svc.plan(body.to_fields())
    if plan.output.stream is not None:
        stream = await until_disconnect(request, svc.open_stream(plan, rid))
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return AudioStreamResponse(stream, headers)
    clip = await until_disconnect(request, svc.synthesize(plan, rid))
    return Response(clip.audio, media_type=clip.media_type, headers=clip.usage.headers())


@router.post("/v1/audio/speech/batch", response_model=BatchSpeechResponse, response_model_exclude_none=True,
             responses=_ERRORS, summary="Generate speech for up to 32 texts")
async def create_speech_batch(body: BatchSpeechRequest, request: Request) -> Any:
    return await until_disconnect(request, service(request).batch(body, request_id(request)))


@router.get("/v1/audio/voices", response_model=VoicesResponse, response_model_exclude_none=True,
            responses={500: _ERRORS[500]}, summary="List voices")
async def list_voices(request: Request) -> Any:
    return service(request).voices()


@router.get("/v1/models", response_model=ModelList, responses={500: _ERRORS[500]}, summary="List served models")
async def list_models(request: Request) -> Any:
    return service(request).models()


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
    body = {"status": "ready" if ok else "not_ready", "triton": triton, "models": models}
    if ok:
        return body
    return JSONResponse(body, status_code=503, headers={"Retry-After": str(svc.settings.retry_after_s)})


__all__ = ["ClientDisconnected", "REQUEST_ID_KEY", "error_body", "router"]
