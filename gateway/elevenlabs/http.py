"""The ElevenLabs dialect's routes: parse, plan through the Speech API's planner, run through its service,
shape the response (gateway.elevenlabs: the obligations). Errors are raised as APIError; gateway.app renders
them in the dialect's shape (wire.dialect_error).

- `POST /v1/text-to-speech/{voice_id}`: the whole file (speed honoured). `/stream`: raw bytes as generated
  (speed 1 only, as the Speech API's streams). `/with-timestamps`: `{audio_base64, alignment,
  normalized_alignment}`. `/stream/with-timestamps`: one such JSON object a line per chunk (alignment null
  on audio lines; the text's alignment on a last line with empty audio). Alignment is made of the words the
  deployment's forced aligner times (gateway.word_timing: `word_timestamps` of the same request); without an
  aligner it is null.
- `GET /v1/voices`: every voice a `voice_id` may name.
- WebSockets `stream-input` (one context) and `multi-stream-input` (gateway.elevenlabs.session).
These routes are not in the OpenAPI schema, which describes the Speech API; gateway/README.md documents them.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request, WebSocket
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import ValidationError

from .. import encoding
from ..auth import DEFERRED_KEYS
from ..errors import APIError, internal
from ..family import SpeechPlan
from ..metrics import trace_of
from ..routers import (
    REQUEST_ID_KEY,
    AudioStreamResponse,
    WebSocketTransport,
    request_id,
    service,
    until_disconnect,
)
from ..services import AudioStream
from ..streaming.transport import Disconnected
from ..word_timing import Word
from . import wire
from .session import ElevenLabsSession, SessionOptions

logger = logging.getLogger(__name__)

router = APIRouter()
PREFIX = "/v1/text-to-speech/{voice_id}"


async def _body(request: Request) -> wire.TextToSpeechBody:
    raw = await request.body()
    try:
        data = json.loads(raw or b"null")
    except ValueError as exc:
        raise wire.validation_error(("body",), f"JSON decode error: {exc}", "json_invalid") from None
    try:
        return wire.TextToSpeechBody.model_validate(data)
    except ValidationError as exc:
        raise wire.from_validation(exc, "body") from None


def _plan(request: Request, voice_id: str, body: wire.TextToSpeechBody, output_format: str | None,
          streamed: bool, aligned: bool = False) -> SpeechPlan:
    """`aligned`: the response carries alignment, so the words are timed where the deployment has an aligner."""
    fmt, rate = wire.output_format(output_format)
    metrics = request.app.state.metrics
    trace = trace_of(request.scope)
    metrics.requested(trace, body.model_id)
    svc = service(request)
    return svc.plan(wire.speech_fields(
        body.text, voice_id, body.model_id, fmt, rate, streamed=streamed, voice_settings=body.voice_settings,
        language_code=body.language_code, seed=body.seed, max_new_tokens=body.max_new_tokens,
        word_timestamps=aligned and svc.deployment.aligner_model is not None))


def _raw(plan: SpeechPlan, audio: bytes) -> bytes:
    """A whole clip as ElevenLabs sends it: G.711 without the WAV header the Speech API puts on a file."""
    fmt = plan.output.format
    if fmt in encoding.G711_FORMATS:
        return audio[len(encoding.g711_wav_header(fmt, plan.output.sample_rate, 0)):]
    return audio


async def _whole(request: Request, voice_id: str, output_format: str | None,
                 aligned: bool = False) -> tuple[SpeechPlan, bytes, Any, str]:
    body = await _body(request)
    plan = _plan(request, voice_id, body, output_format, streamed=False, aligned=aligned)
    clip = await until_disconnect(request, service(request).synthesize(plan, request_id(request),
                                                                     trace=trace_of(request.scope)))
    return plan, _raw(plan, clip.audio), clip, body.text


@router.post(PREFIX, include_in_schema=False)
async def convert(voice_id: str, request: Request, output_format: str | None = None) -> Response:
    plan, audio, _, _ = await _whole(request, voice_id, output_format)
    return Response(audio, media_type=wire.MEDIA_TYPES[plan.output.format])


@router.post(PREFIX + "/with-timestamps", include_in_schema=False)
async def convert_with_timestamps(voice_id: str, request: Request, output_format: str | None = None) -> Response:
    _, audio, clip, text = await _whole(request, voice_id, output_format, aligned=True)
    aligned = wire.alignment(text, clip.words, clip.seconds)  # (the words' times are after `speed`, as the audio)
    shaped = aligned.http() if aligned is not None else None
    return JSONResponse({"audio_base64": base64.b64encode(audio).decode("ascii"), "alignment": shaped,
                         "normalized_alignment": shaped})


async def _open(request: Request, voice_id: str, output_format: str | None,
                aligned: bool = False) -> tuple[AudioStream, str]:
    body = await _body(request)
    plan = _plan(request, voice_id, body, output_format, streamed=True, aligned=aligned)
    stream = await until_disconnect(request, service(request).open_stream(plan, request_id(request),
                                                                        trace=trace_of(request.scope)))
    return stream, body.text


@router.post(PREFIX + "/stream", include_in_schema=False)
async def stream(voice_id: str, request: Request, output_format: str | None = None) -> Response:
    audio, _ = await _open(request, voice_id, output_format)
    return AudioStreamResponse(audio, {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


class _Lines(StreamingResponse):
    """A JSON-lines body that always releases its audio stream, even if the body never started."""

    def __init__(self, body: AsyncIterator[bytes], stream: AudioStream) -> None:
        super().__init__(body, media_type=wire.NDJSON, headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self._stream = stream

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._stream.aclose()


@router.post(PREFIX + "/stream/with-timestamps", include_in_schema=False)
async def stream_with_timestamps(voice_id: str, request: Request, output_format: str | None = None) -> Response:
    audio, text = await _open(request, voice_id, output_format, aligned=True)
    words: list[Word] | None = None

    async def on_words(got: tuple[Word, ...]) -> None:  # each segment's, on the stream's timeline
        nonlocal words
        words = [*(words or []), *got]

    audio.on_words = on_words

    def line(data: bytes, alignment: dict[str, Any] | None = None) -> bytes:
        return json.dumps({"audio_base64": base64.b64encode(data).decode("ascii"), "alignment": alignment,
                           "normalized_alignment": alignment}).encode() + b"\n"

    async def body() -> AsyncIterator[bytes]:
        async for data in audio.body():  # (a failure after the first line ends the body, as a raw stream's)
            if data:
                yield line(data)
        aligned = wire.alignment(text, words, audio.seconds)
        if aligned is not None:
            yield line(b"", aligned.http())

    return _Lines(body(), audio)


@router.get("/v1/voices", include_in_schema=False)
async def list_voices(request: Request) -> Any:
    listing = service(request).listings.voices()
    return wire.voice_list(listing.voices, [v.model_dump() for v in listing.uploaded_voices])


# --- WebSockets --------------------------------------------------------------------------------------


async def _socket(websocket: WebSocket, voice_id: str, multi: bool) -> None:
    rid = str(websocket.scope.get(REQUEST_ID_KEY) or "")
    await websocket.accept(headers=[(b"x-request-id", rid.encode("latin-1"))] if rid else None)
    transport = WebSocketTransport(websocket)
    app = websocket.app
    try:
        options = SessionOptions.from_query(dict(websocket.query_params), multi)
    except APIError as exc:
        with contextlib.suppress(Disconnected):
            await transport.send_json(wire.ws_dialect_error(exc))
        await transport.close(wire.WS_POLICY, exc.message[:120])
        return
    session = ElevenLabsSession(app.state.speech, transport, app.state.settings, rid, voice_id, options,
                                keys=websocket.scope.get(DEFERRED_KEYS),
                                route=trace_of(websocket.scope).route, stop=app.state.drain.started)
    try:
        await session.run()
    except Exception:
        logger.exception("elevenlabs session %s failed", rid)
        with contextlib.suppress(Disconnected):
            await transport.send_json(wire.ws_error(internal(rid).message, "internal_error", wire.WS_INTERNAL))
        await transport.close(wire.WS_INTERNAL, "internal error")
    finally:
        await transport.close()


@router.websocket(PREFIX + "/stream-input")
async def stream_input(websocket: WebSocket, voice_id: str) -> None:
    await _socket(websocket, voice_id, multi=False)


@router.websocket(PREFIX + "/multi-stream-input")
async def multi_stream_input(websocket: WebSocket, voice_id: str) -> None:
    await _socket(websocket, voice_id, multi=True)


__all__ = ["router"]
