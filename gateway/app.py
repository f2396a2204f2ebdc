"""create_app(settings): the FastAPI application of the Speech API.

- The lifespan owns the inference backend: every Triton endpoint behind one balancing pool
  (gateway.pool), opened at startup, closed at shutdown; no module-level state. The pool runs the
  health monitor of each endpoint (gateway.monitor), which ends the streams of a model that breaks
  there and reloads it.
- Every response carries X-Request-Id: the client's when it sent a sane one, else a new one. It
  is the Triton request id of the work done for the request.
- Errors reach the wire here and only here: APIError, FastAPI's validation errors (400, never
  422), Starlette's HTTP errors, and anything unexpected (500, generic message with the request id,
  the traceback only in the log). After the status line is sent nothing can change it: a failure
  then ends the body (raw audio) or was already sent in-band (SSE). A WebSocket refused before its
  session starts (API key, drain) gets an `error` message and a close code.
- Middleware, outermost first: metrics (gateway.metrics: sees every request and its final
  status), request context (id, error rendering), drain (gateway.drain), API keys (gateway.auth).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.telemetry import TelemetryConfig
from pydantic import ValidationError
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route, WebSocketRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocket

from ttscore.contract.errors import InvalidRequest

from . import errors, playground
from .aliases import AliasError
from .auth import API_KEY_ID, APIKeyMiddleware, APIKeys
from .backend import InferenceBackend
from .checkpoints import load_checkpoints
from .drain import Drain, DrainMiddleware
from .elevenlabs import http as elevenlabs
from .elevenlabs import wire as elevenlabs_wire
from .errors import APIError
from .metrics import GatewayMetrics, MetricsMiddleware, trace_of
from .planning import Deployment, VoiceResolver, route_speech
from .pool import pool_from_settings
from .protocol import SpeechRequest
from .routers import REQUEST_ID_KEY, ClientDisconnected, router
from .services import SpeechService, StreamAborted
from .settings import Settings, SettingsError
from .voice_registry import VoiceRegistry

logger = logging.getLogger(__name__)

REQUEST_ID_HEADER = "X-Request-Id"
_SANE_ID = re.compile(r"^[A-Za-z0-9._:@/+=-]{1,128}$")

# One endpoint's backend ("host:port" -> backend); the app puts every endpoint behind one pool.
BackendFactory = Callable[[str], InferenceBackend]


def _triton_backend(settings: Settings) -> BackendFactory:
    """Production: a gRPC client per Triton endpoint."""
    from .triton_client import TritonBackend  # tritonclient only when serving for real

    # Plain calls (a family's feature models) are bounded like a stalled stream.
    return lambda url: TritonBackend(url, unary_timeout_s=settings.stall_timeout_s)


class RouteMemo:
    """Where requests were routed, by everything but their text, for ROUTE_S: admission decides a request without
    `model` by planning it (validation and its adapter's routing: ~80 us, most of what a refusal costs), and the
    requests of a burst mostly differ only in their text. Only small plain fields make a key (no inline audio, no
    extra_params). A route remembered wrongly (a stored voice deleted within ROUTE_S) costs nothing but time: the
    generation claims its ticket for the model its own plan routes to, and one decided for another model is decided
    again there (gateway.admission.Admission.acquire)."""

    ROUTE_S = 1.0  # as long as a replica takes to see another's voice uploads (speaker_sync_interval_s' default)
    SIZE = 256
    MAX_VALUE_CHARS = 256

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._routes: OrderedDict[tuple[Any, ...], tuple[float, str]] = OrderedDict()

    @classmethod
    def key(cls, fields: dict[str, Any]) -> tuple[Any, ...] | None:
        """`fields` but `input` as a key; None: not one to remember (a large or structured value)."""
        items = []
        for name, value in fields.items():
            if name == "input":
                continue
            if isinstance(value, str) and len(value) > cls.MAX_VALUE_CHARS:
                return None
            if not (value is None or isinstance(value, (str, int, float, bool))):
                return None
            items.append((name, type(value).__name__, value))
        return tuple(sorted(items, key=lambda item: item[0]))

    def get(self, key: tuple[Any, ...] | None) -> str | None:
        if key is None:
            return None
        hit = self._routes.get(key)
        if hit is None or hit[0] < self._clock():
            return None
        return hit[1]

    def put(self, key: tuple[Any, ...] | None, model: str) -> None:
        if key is None:
            return
        self._routes[key] = (self._clock() + self.ROUTE_S, model)
        self._routes.move_to_end(key)
        while len(self._routes) > self.SIZE:
            self._routes.popitem(last=False)


def new_request_id() -> str:
    return f"speech-{uuid.uuid4().hex}"


def _render(exc: APIError, scope: Scope) -> JSONResponse:
    if elevenlabs_wire.is_dialect_path(scope.get("path", "")):  # the ElevenLabs dialect's shape and statuses
        exc = elevenlabs_wire.dialect_error(exc)
    trace_of(scope).fail(exc.status, exc.type)
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers or None)


async def _refuse_websocket(exc: APIError, scope: Scope, receive: Receive, send: Send, rid: str) -> None:
    """A connection refused before its session: the spec's `error` message, then the close code
    (accepting first, since a message can only follow an accepted handshake)."""
    trace_of(scope).fail(exc.status, exc.type)
    ws = WebSocket(scope, receive, send)
    if elevenlabs_wire.is_dialect_path(scope.get("path", "")):
        message = elevenlabs_wire.ws_dialect_error(exc)
    else:
        message = errors.ws_error(exc.message)
    code = message.get("code")
    close_code = code if isinstance(code, int) else errors.ws_close_code(exc.status)
    try:
        await ws.accept(headers=[(b"x-request-id", rid.encode("latin-1"))])
        await ws.send_json(message)
        await ws.close(close_code, exc.message[:120])  # a close reason is <= 123 bytes
    except (OSError, RuntimeError):
        logger.info("websocket %s went away while being refused", rid)


# FastAPI's native OpenTelemetry asks on every request whether a provider is set (~12 us of a refusal's ~64, measured
# in process); it is left on where the environment configures OpenTelemetry (an OTEL_* variable, as
# `opentelemetry-instrument` and the OTLP exporters read), off otherwise.
NO_TELEMETRY: TelemetryConfig = {"tracing": False, "metrics": False, "logs": False}


def _opentelemetry_configured(environ: Mapping[str, str]) -> bool:
    return any(k.startswith("OTEL_") for k in environ) or environ.get("FASTAPI_OTEL_AUTO_CONFIGURE", "") != ""


class RequestContextMiddleware:
    """Request id in, request id out, and the last line of defence for unexpected errors."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        incoming = ""
        for key, value in scope.get("headers", []):
            if key == b"x-request-id":
                incoming = value.decode("latin-1").strip()
                break
        rid = incoming if _SANE_ID.match(incoming) else new_request_id()
        scope[REQUEST_ID_KEY] = rid
        if scope["type"] == "websocket":  # the route echoes the id in its handshake and handles errors in-band
            try:
                await self.app(scope, receive, send)
            except APIError as exc:  # refused by a middleware before the route ran
                await _refuse_websocket(exc, scope, receive, send, rid)
            return
        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = MutableHeaders(raw=list(message.get("headers", [])))
                headers[REQUEST_ID_HEADER] = rid
                message = {**message, "headers": headers.raw}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except ClientDisconnected:
            pass  # nobody to answer; the work was cancelled
        except StreamAborted as exc:
            # The status line is out: ending without the final chunk tells the client it is incomplete.
            logger.warning("response %s cut short: %s", rid, exc)
        except APIError as exc:  # refused by a middleware (API key, drain): nothing was sent yet
            await _render(exc, scope)(scope, receive, send_with_id)
        except Exception:
            logger.exception("unhandled error in request %s", rid)
            if not started:
                await _render(errors.internal(rid), scope)(scope, receive, send_with_id)


# The HTTP request admission control decides as soon as its body is in (a batch's items and the other dialects'
# requests are decided when their routes start each generation).
DECIDED_HERE = "/v1/audio/speech"
# Bodies up to this size are read for their model here (a larger one, with inline reference audio, is decided
# when its route plans it).
PEEK_MAX_BYTES = 64 * 1024


class AdmissionMiddleware:
    """Admission control's HTTP end (gateway.admission): a speech request counts as arriving until it is decided,
    and is decided here as soon as its body is read, in the order requests are read: from the model its `model`
    names (a dictionary lookup), or else from where its plan routes it. Its route then claims that decision."""

    def __init__(self, app: ASGIApp, resolve_model: Callable[[dict[str, Any]], str | None]) -> None:
        self.app = app
        self.resolve_model = resolve_model

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        speech = getattr(scope["app"].state, "speech", None) if scope["type"] == "http" else None
        if speech is None or scope["method"] != "POST" or scope.get("path") != DECIDED_HERE:
            await self.app(scope, receive, send)
            return
        admission = speech.admission
        with admission.arrival():
            messages, body = await _read_body(receive)
            fields = _json_object(body)
            if fields is not None and isinstance(fields.get("model"), str):  # (the route says it again)
                scope["app"].state.metrics.requested(trace_of(scope), fields["model"])
            served = self.resolve_model(fields) if fields is not None else None
            ticket = admission.take(served, API_KEY_ID.get(), _streams(fields)) if served is not None else None

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        if ticket is None:  # not decided here (not JSON, no such model, a large body): its route decides
            await self.app(scope, replay, send)
            return
        with admission.taken(ticket):
            if ticket.grant is None:  # admitted to run: its validation and planning wait for the burst too
                await admission.settled()
                ticket.settled = True
            await self.app(scope, replay, send)


async def _read_body(receive: Receive) -> tuple[list[Message], bytes]:
    """The request's body messages as received (to replay) and its bytes, up to PEEK_MAX_BYTES + a message."""
    messages: list[Message] = []
    size = 0
    parts: list[bytes] = []
    while size <= PEEK_MAX_BYTES:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        parts.append(chunk)
        size += len(chunk)
        if not message.get("more_body", False):
            return messages, b"".join(parts)
    return messages, b""


def _streams(fields: dict[str, Any] | None) -> bool:
    """Does this speech request's body ask for a stream (the spec's `stream` / `stream_format`)? Its plan says it
    again; a body the plan then refuses gets its 400 either way."""
    return fields is not None and (fields.get("stream") is True or fields.get("stream_format") in ("audio", "sse"))


def _json_object(body: bytes) -> dict[str, Any] | None:
    try:
        parsed = json.loads(body) if body else None
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _install_error_handlers(app: FastAPI) -> None:
    async def api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, APIError)
        return _render(exc, request.scope)

    async def invalid_request(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, InvalidRequest)
        return _render(errors.from_invalid_request(exc), request.scope)

    async def validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return _render(errors.validation_error(list(exc.errors())), request.scope)

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        detail = exc.detail if isinstance(exc.detail, str) else "HTTP error"
        return _render(errors.from_http_status(exc.status_code, detail, dict(exc.headers or {})), request.scope)

    app.add_exception_handler(APIError, api_error)
    app.add_exception_handler(InvalidRequest, invalid_request)
    app.add_exception_handler(RequestValidationError, validation)
    app.add_exception_handler(StarletteHTTPException, http_error)


def _openapi_without_422(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """FastAPI documents 422 for every body; this API answers 400 instead, so drop it."""
    base = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = base()
        for path in schema.get("paths", {}).values():
            for op in path.values():
                if isinstance(op, dict):
                    op.get("responses", {}).pop("422", None)
        comps = schema.get("components", {}).get("schemas", {})
        for name in ("HTTPValidationError", "ValidationError"):
            comps.pop(name, None)
        app.openapi_schema = schema
        return schema

    return openapi


def create_app(
    settings: Settings,
    *,
    backend_factory: BackendFactory | None = None,
    voices: VoiceResolver | None = None,
) -> FastAPI:
    """The Speech API over the deployment `settings` describes. `backend_factory` replaces the
    Triton client of each endpoint (tests: a fake; the pool, its monitors and readiness stay the
    production ones); `voices` replaces the voice registry (uploaded + precomputed voices,
    gateway.voice_registry), which is otherwise built here: precomputed voices loaded and uploaded
    voices restored at start-up."""
    checkpoints = load_checkpoints(settings)  # fails fast on a bad deployment
    if voices is None:
        voices = VoiceRegistry(settings, checkpoints)
    try:
        deployment = Deployment(checkpoints, voices, model_aliases=settings.model_aliases,
                                voice_aliases=settings.voice_aliases, max_input_chars=settings.max_input_chars,
                                segment_chars=settings.segment_chars, aligner_model=settings.aligner_model)
    except AliasError as exc:
        raise SettingsError(str(exc)) from None
    factory = backend_factory or _triton_backend(settings)
    served_families = ", ".join(dict.fromkeys(c.rules.name for c in checkpoints))
    served = voices  # (narrowed for the closure below)

    def resolve_model(model: str) -> str | None:
        ckpt = deployment.default_model() if deployment.routes_by_default(model) else deployment.find_model(model)
        return ckpt.name if ckpt is not None else None

    routes = RouteMemo()

    def admitted_model(fields: dict[str, Any]) -> str | None:
        """The served model a speech request's JSON `fields` generate with: the one `model` names, or where it is
        routed (by its voice or task) among several: its plan's (None: the request is invalid; its route says
        why), remembered for a moment for requests that differ only in their text (RouteMemo)."""
        model = fields.get("model")
        if isinstance(model, str) and not deployment.routes_by_default(model):
            return resolve_model(model)
        key = RouteMemo.key(fields)
        known = routes.get(key)
        if known is not None:
            return known
        try:
            routed = route_speech(SpeechRequest.model_validate(fields).to_fields(), deployment).checkpoint.name
        except (ValidationError, APIError, InvalidRequest):
            return None
        routes.put(key, routed)
        return routed

    metrics = GatewayMetrics([c.name for c in checkpoints], resolve_model, lambda: len(served.uploaded_voices()))
    drain = Drain()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        backend = pool_from_settings(settings, factory)
        app.state.backend = backend
        await backend.start()  # resolves its endpoints first
        metrics.endpoints = backend.stats
        app.state.speech = SpeechService(deployment, backend, settings, metrics)
        bind = getattr(voices, "bind", None)
        if bind is not None:
            bind(backend)
        logger.info(
            "serving %s over Triton %s",
            ", ".join(f"{c.name} ({c.task} -> {c.triton_model})" for c in deployment.checkpoints),
            ", ".join(settings.endpoints()),
        )
        try:
            yield
        finally:
            if bind is not None:
                bind(None)
            await backend.close()

    app = FastAPI(
        title="Triton TTS Speech API",
        version="1.0",
        summary=f"OpenAI-compatible speech generation ({served_families} on NVIDIA Triton)",
        lifespan=lifespan,
        telemetry=None if _opentelemetry_configured(os.environ) else NO_TELEMETRY,
    )
    app.state.settings = settings
    app.state.deployment = deployment
    app.state.voices = voices
    app.state.metrics = metrics
    app.state.drain = drain
    app.include_router(router)
    app.include_router(elevenlabs.router)
    app.include_router(playground.router)
    _install_error_handlers(app)
    # add_middleware wraps what is there: the last added runs first.
    app.add_middleware(AdmissionMiddleware, resolve_model=admitted_model)
    app.add_middleware(APIKeyMiddleware, keys=APIKeys(settings.api_keys), defer=elevenlabs_wire.is_dialect_path)
    app.add_middleware(DrainMiddleware, drain=drain, retry_after_s=settings.retry_after_s)
    app.add_middleware(RequestContextMiddleware)
    # Requests are labelled with their route's path template. (FastAPI keeps an included router
    # behind a wrapper of its own; the router's routes match the same paths, since it has no prefix.)
    labelled = [r for r in app.router.routes if isinstance(r, (Route, WebSocketRoute))] + list(router.routes) + list(
        elevenlabs.router.routes) + list(playground.router.routes)
    app.add_middleware(MetricsMiddleware, metrics=metrics, routes=labelled)
    app.openapi = _openapi_without_422(app)  # type: ignore[method-assign]
    return app
