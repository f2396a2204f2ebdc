"""The streaming-text WebSocket session (/v1/audio/speech/stream): protocol state machine.

Spec, "Streaming Text Input (WebSocket)". Transport-agnostic (a `Transport` of text/binary frames),
so it is tested without a server; routers.py adapts Starlette's WebSocket to it.

Obligations:
- `session.config` first (text before it is a non-fatal error); it is sticky, and may be replaced
  between utterances only: one sent while an utterance is open (text received since the last
  `input.done`) is rejected, so no input is dropped and no utterance mixes two voices. A rejected
  config leaves the previous one in force. The config is validated when it arrives (the same
  planning as POST /v1/audio/speech), and an inline `ref_audio` is fetched and turned into features
  once, then reused for every request of the session.
- `input.text` feeds the splitter (gateway.text_split); each completed unit is one TTS request.
  `input.done` flushes the rest, then `session.done`; the connection stays open.
- Per request: `audio.start`, binary frames (one payload, or PCM/WAV chunks as decoded with
  `stream_audio`), `audio.done` (total_bytes, error): always paired, also when generation fails
  (then an `error` message comes in between). `utterance_index` counts flushes, `sentence_index` the
  requests inside one.
- Barge-in: `input.cancel` stops the current utterance at once. The reader sees it as it arrives
  (even while a request is being generated or the queue is full): the request in flight is
  cancelled (its task, hence its Triton request, whose slot is freed), its `audio.done` says
  `"cancelled": true` and no frame of it follows; every `input.text` / `input.done` sent before the
  cancel and not yet spoken is dropped, as is the splitter's buffer; then `session.done` with
  `"cancelled": true` closes the utterance (counted like a flush). The config stays in force.
  A cancelled request is counted with status 499 and in tts_cancelled_requests (gateway.metrics).
- Incremental text (`split_granularity: "incremental"`, for models that take text while they
  generate: gateway.family.takes_open_text; others fall back to `sentence`): the reply to such a
  config is `session.configured` naming the mode in effect. The first `input.text` of an utterance
  starts ONE generation (its `audio.start` carries that first text), sent to Triton with a text key
  (ttscore.contract.tensors.TEXT_KEY_PARAMETER, a random hex per generation); each later
  `input.text` is sent to the same model instance as an extension (`SpeechService.extend_text`,
  one at a time, in order) while the audio streams; `input.done` ends the text and waits for the
  audio to finish (`audio.done`, `session.done` with total_sentences 1). The generation runs as
  its own task so the session keeps reading messages; `input.cancel` stops it like any request.
  The Qwen3-TTS prompt is built in its streaming mode (non_streaming_mode false).
- Metrics: tts_ws_first_text_to_audio_seconds{split_granularity} (gateway.metrics), per utterance,
  from the arrival of its first input.text to its first audio frame sent.
- Errors in messages (not JSON, unknown type, bad fields, too large) are non-fatal `error`
  messages. The idle timeout (no message while the server waits for one, also between utterances)
  sends an `error` and closes the connection.
- Messages are read concurrently with synthesis (bounded queue, so a flooding client is slowed by
  TCP backpressure); they are handled in order. A client that disconnects mid-request cancels it,
  which cancels the Triton request.
- Drain (gateway.drain, `stop`): an idle session closes with 1001 (going away) after an `error`
  saying why; one with an utterance open finishes it (up to its `session.done`) first.
- Over several Triton endpoints (gateway.pool) the sentences of one utterance run on one endpoint
  (the one its first sentence went to, while it serves); the next utterance is balanced anew.
- Metrics: each TTS request is counted like a REST request of the route (gateway.metrics), timed
  from the arrival of the message that completed its text, with the status REST would have given
  (499: the client went away).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from ttscore.contract.errors import InvalidRequest

from . import errors
from .backend import ENDPOINT_AFFINITY, Affinity
from .errors import APIError
from .family import SpeechPlan, takes_open_text
from .metrics import STATUS_CLIENT_GONE, RequestTrace
from .protocol import (
    CLIENT_MESSAGES,
    AudioDone,
    AudioStart,
    InputCancel,
    SessionConfig,
    SessionConfigured,
    SessionDone,
)
from .services import Features, SpeechService, StreamAborted
from .settings import Settings
from .speech_fields import SpeechFields
from .text_split import TextSplitter

logger = logging.getLogger(__name__)
T = TypeVar("T")

CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001
CLOSE_INTERNAL_ERROR = 1011
QUEUE_MESSAGES = 64
MESSAGE_TYPES = ", ".join(CLIENT_MESSAGES)


class Disconnected(Exception):
    """The client went away (or the connection failed): stop, cancelling any work in flight."""


class Cancelled(Exception):
    """The client sent input.cancel while a request was generated: it was cancelled."""


class Transport(Protocol):
    async def receive(self) -> str | bytes | None:
        """The next message; None once the client has disconnected."""
        ...

    async def send_json(self, message: dict[str, Any]) -> None:
        """Raises Disconnected when the client is gone."""
        ...

    async def send_bytes(self, data: bytes) -> None: ...

    async def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None: ...


_GONE = object()
_STOP = object()


INCREMENTAL = "incremental"


class _Config:
    """An accepted session.config, with what was worked out from it once."""

    def __init__(self, message: SessionConfig, probe: SpeechPlan, features: Features | None, mode: str) -> None:
        self.message = message
        self.format = probe.output.format
        self.sample_rate = probe.output.sample_rate
        self.features = features  # inline ref_audio: computed once per config
        self.mode = mode  # the split_granularity in effect (incremental may fall back to sentence)

    def splitter(self) -> TextSplitter:
        """A fresh splitter of the mode in effect (incremental text is not split)."""
        return TextSplitter("none" if self.mode == INCREMENTAL else self.mode)

    def open_fields(self, text: str) -> SpeechFields:
        """An incremental generation's fields: always streamed (raw frames; pcm unless the config
        names a streamable format) in the streaming prompt mode."""
        fields = self.message.speech_fields(text)
        return replace(fields, non_streaming_mode=False, stream_format="audio", stream=None,
                       response_format=fields.response_format if self.message.stream_audio
                       else (self.message.response_format or "pcm"))


@dataclass
class _OpenText:
    """The running generation of an utterance in incremental mode."""

    key: str  # the Triton text key of the generation
    plan: SpeechPlan
    rid: str
    chars: int  # characters sent so far
    stop: asyncio.Event = field(default_factory=asyncio.Event)  # set: cancel it (the utterance is cancelled)
    task: asyncio.Future[None] | None = None


class StreamingSession:
    def __init__(self, service: SpeechService, transport: Transport, settings: Settings, request_id: str, *,
                 route: str, stop: asyncio.Event) -> None:
        """`route`: the metrics label of each TTS request; `stop`: set when the server drains."""
        self.service = service
        self.transport = transport
        self.route = route
        self.stop = stop
        self.idle_timeout_s = settings.ws_idle_timeout_s
        self.max_config_bytes = settings.ws_max_config_bytes
        self.max_text_bytes = settings.ws_max_text_bytes
        self.request_id = request_id
        self.config: _Config | None = None
        self.splitter = TextSplitter("none")
        self.utterance_index = 0
        self.sentence_index = 0
        self.utterance_open = False  # text arrived since the last input.done
        # Every sentence of one utterance goes to one Triton endpoint (gateway.pool), chosen at its first.
        self.affinity = Affinity()
        self._queue: asyncio.Queue[Any] = asyncio.Queue(QUEUE_MESSAGES)  # (arrival time, parsed message)
        # input.cancel messages received but not handled yet (the reader counts them on arrival).
        self._cancels = 0
        self._cancel = asyncio.Event()  # set while _cancels > 0
        self._gone = asyncio.Event()
        self._received_at = time.monotonic()  # arrival of the message being handled
        self._open: _OpenText | None = None  # incremental mode: the utterance's running generation
        self._utterance_at: float | None = None  # arrival of the utterance's first text
        self._audio_seen = False  # the utterance's first audio was sent (metrics)

    # --- the connection ----------------------------------------------------------------------------

    async def run(self) -> None:
        reader = asyncio.create_task(self._read())
        try:
            await self._serve()
        except Disconnected:
            logger.info("streaming session %s: client disconnected", self.request_id)
        finally:
            if self._open is not None and self._open.task is not None:
                self._open.task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await self._open.task
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader

    async def _read(self) -> None:
        try:
            while True:
                message = await self.transport.receive()
                if message is None:
                    break
                parsed = self._parse(message)
                if isinstance(parsed, InputCancel):  # seen now, not when the handler gets to it
                    self._cancels += 1
                    self._cancel.set()
                await self._queue.put((time.monotonic(), parsed))
        except Exception:  # a broken connection is a disconnect
            logger.debug("streaming session %s: receive failed", self.request_id, exc_info=True)
        self._gone.set()
        with contextlib.suppress(asyncio.QueueFull):
            self._queue.put_nowait((time.monotonic(), _GONE))  # full queue: the handler sees _gone at its next wait

    async def _next(self) -> Any:
        """The next message (_GONE: the client left; _STOP: the server drains between utterances)."""
        if self._gone.is_set() and self._queue.empty():
            return _GONE
        get = asyncio.ensure_future(self._queue.get())
        gone = asyncio.ensure_future(self._gone.wait())
        # An open utterance is finished first: during a drain its input.done is still awaited.
        stopping = None if self.utterance_open else asyncio.ensure_future(self.stop.wait())
        waits = {get, gone} if stopping is None else {get, gone, stopping}
        try:
            await asyncio.wait(waits, timeout=self.idle_timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits - {get}:
                waiting.cancel()
            if not get.done():
                get.cancel()
        if get.done() and not get.cancelled():  # (also when it completed just after the timeout)
            received_at, message = get.result()
            if message is not _GONE:
                self._received_at = received_at
            return message
        if self._gone.is_set():
            return _GONE
        if stopping is not None and self.stop.is_set():
            return _STOP
        raise TimeoutError

    async def _serve(self) -> None:
        while True:
            if self.stop.is_set() and not self.utterance_open:
                await self._error("The server is shutting down; reconnect to continue")
                await self.transport.close(CLOSE_GOING_AWAY, "server shutting down")
                return
            try:
                raw = await self._next()
            except TimeoutError:
                await self._error(f"Idle timeout: no message for {self.idle_timeout_s:g}s; closing the connection")
                await self.transport.close(CLOSE_NORMAL, "idle timeout")
                return
            if raw is _GONE:
                return
            if raw is _STOP:
                continue  # closes above
            if not await self._handle(raw):
                return

    async def _until_gone(self, work: Awaitable[T], cancellable: bool = False,
                          stop: asyncio.Event | None = None) -> T:
        """Run `work`; if the client disconnects first (or, `cancellable`, sends input.cancel, or
        `stop` is set), cancel it (cancelling the Triton request) and raise Disconnected (Cancelled)."""
        task = asyncio.ensure_future(work)
        gone = asyncio.ensure_future(self._gone.wait())
        waits = {task, gone}
        cancels = [asyncio.ensure_future(e.wait()) for e in ((self._cancel, stop) if cancellable else ()) if e]
        waits.update(cancels)
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            gone.cancel()
            for waiting in cancels:
                waiting.cancel()
        if task.done():
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        if self._gone.is_set() or not cancellable:
            raise Disconnected()
        raise Cancelled()

    # --- messages --------------------------------------------------------------------------------

    async def _error(self, message: str) -> None:
        await self.transport.send_json(errors.ws_error(message))

    def _parse(self, raw: str | bytes) -> BaseModel | str:
        """A client message, or the reason it is rejected."""
        if isinstance(raw, bytes):
            return "Binary messages are not accepted; send JSON text messages"
        size = len(raw.encode("utf-8", "surrogatepass"))
        if size > self.max_config_bytes:
            return f"Message too large ({size} bytes; at most {self.max_config_bytes})"
        try:
            data = json.loads(raw)
        except ValueError as exc:
            return f"Invalid JSON message: {exc}"
        if not isinstance(data, dict):
            return "Messages must be JSON objects with a 'type'"
        kind = data.get("type")
        model = CLIENT_MESSAGES.get(kind) if isinstance(kind, str) else None
        if model is None:
            return f"Unknown message type {kind!r}; expected one of: {MESSAGE_TYPES}"
        if kind != "session.config" and size > self.max_text_bytes:
            return f"{kind} message too large ({size} bytes; at most {self.max_text_bytes})"
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            details: list[dict[str, Any]] = [dict(e) for e in exc.errors()]
            return f"Invalid {kind}: {errors.validation_error(details).message}"

    async def _handle(self, msg: BaseModel | str) -> bool:
        """Handle one (parsed) message; False ends the connection."""
        if isinstance(msg, str):
            await self._error(msg)
            return True
        kind = getattr(msg, "type", "")
        if kind == "session.close":
            await self.transport.close(CLOSE_NORMAL, "session.close")
            return False
        if kind == "session.config":
            assert isinstance(msg, SessionConfig)
            await self._configure(msg)
            return True
        if kind == "input.cancel":
            self._cancels -= 1
            if not self._cancels:
                self._cancel.clear()
        if self.config is None:
            await self._error(f"Send session.config before {kind}")
            return True
        if kind == "input.cancel":
            await self._end_utterance(cancelled=True)
        elif self._cancels:
            pass  # input.text / input.done sent before an input.cancel: dropped with the utterance
        elif kind == "input.text":
            await self._text(getattr(msg, "text", ""))
        elif kind == "input.done":
            await self._flush()
        return True

    async def _configure(self, msg: SessionConfig) -> None:
        if self.utterance_open:
            await self._error(
                "session.config cannot change the configuration in the middle of an utterance; "
                "send input.done first (the previous configuration stays in force)"
            )
            return
        rid = f"{self.request_id}-config"
        try:
            probe = self.service.plan(msg.speech_fields("Hello."))
            features = None
            if probe.ref_audio is not None:  # inline reference: fetched and processed once
                features = await self._until_gone(self.service.reference_features(probe, rid))
        except (APIError, InvalidRequest) as exc:
            await self._error(f"Invalid session.config: {errors.ws_message(exc, rid)}")
            return
        mode, reason = msg.split_granularity, None
        if mode == INCREMENTAL and not takes_open_text(probe):
            mode, reason = "sentence", (f"{probe.checkpoint.name} cannot take text while it generates with this "
                                        "configuration; each sentence is one request")
        config = _Config(msg, probe, features, mode)
        if mode == INCREMENTAL:
            try:
                self.service.plan(config.open_fields("Hello."))
            except (APIError, InvalidRequest) as exc:
                await self._error(f"Invalid session.config: {errors.ws_message(exc, rid)}")
                return
        self.config = config
        self.splitter = config.splitter()
        if msg.split_granularity == INCREMENTAL:
            await self.transport.send_json(
                SessionConfigured(split_granularity=mode, reason=reason).model_dump(exclude_none=True))

    async def _text(self, text: str) -> None:
        if text and not self.utterance_open:
            self._utterance_at, self._audio_seen = self._received_at, False
        if self.config is not None and self.config.mode == INCREMENTAL:
            await self._open_text(text)
            return
        pending = len(self.splitter.pending)
        limit = self.service.deployment.max_input_chars
        if pending + len(text) > limit:
            await self._error(
                f"input.text ignored: the unsent text would be {pending + len(text)} characters, more than one "
                f"request takes ({limit}); send input.done (or use split_granularity) more often"
            )
            return
        if text:
            self.utterance_open = True
        for unit in self.splitter.feed(text):
            if self._cancels:
                return  # an input.cancel ends the utterance: the rest is dropped
            await self._speak(unit)

    async def _flush(self) -> None:
        if self._open is not None:
            await self._close_open()
            if not self._cancels:
                await self._end_utterance()
            return
        for unit in self.splitter.flush():
            if self._cancels:
                return  # the input.cancel behind this flush closes the utterance
            await self._speak(unit)
        if not self._cancels:
            await self._end_utterance()

    async def _end_utterance(self, cancelled: bool = False) -> None:
        """session.done for the current utterance; the next one starts. A cancelled one drops the
        text still buffered (and stops its generation in incremental mode)."""
        if self._open is not None:
            self._open.stop.set()
            await self._close_open(wait_only=True)
        await self.transport.send_json(SessionDone(
            utterance_index=self.utterance_index, total_sentences=self.sentence_index, cancelled=cancelled or None,
        ).model_dump(exclude_none=True))
        if cancelled and self.config is not None:
            self.splitter = self.config.splitter()
        self.utterance_index += 1
        self.sentence_index = 0
        self.utterance_open = False
        self.affinity = Affinity()

    # --- incremental text ------------------------------------------------------------------------------

    async def _open_text(self, text: str) -> None:
        """Start the utterance's generation with its first text, or extend it."""
        config = self.config
        assert config is not None
        if not text:
            return
        limit = self.service.deployment.max_input_chars
        sent = self._open.chars if self._open is not None else 0
        if sent + len(text) > limit:
            await self._error(
                f"input.text ignored: the utterance would be {sent + len(text)} characters, more than one request "
                f"takes ({limit}); send input.done more often"
            )
            return
        self.utterance_open = True
        if self._open is None:
            rid = f"{self.request_id}-u{self.utterance_index}-s{self.sentence_index}"
            rest = ""
            try:
                plan = self.service.plan(config.open_fields(text))
                if len(plan.texts) > 1:  # a long first text: one generation, the rest as an extension
                    first = plan.texts[0]
                    cut = text.find(first) + len(first) if first in text else len(text)
                    text, rest = text[:cut], text[cut:]
                    plan = self.service.plan(config.open_fields(text))
            except (APIError, InvalidRequest) as exc:
                await self._error(f"input.text ignored: {errors.ws_message(exc, rid)}")
                return
            self._open = _OpenText(uuid.uuid4().hex, plan, rid, len(text) + len(rest))
            self._open.task = asyncio.ensure_future(self._speak(text, self._open))
            await asyncio.sleep(0)  # let it send audio.start and its Triton request first
            if rest:
                await self._extend(self._open, rest, done=False)
            return
        self._open.chars += len(text)
        await self._extend(self._open, text, done=False)

    async def _extend(self, open_text: _OpenText, text: str, done: bool) -> None:
        if open_text.task is not None and open_text.task.done():
            return  # the generation already ended (its budget spent, failed, cancelled): nothing takes text
        token = ENDPOINT_AFFINITY.set(self.affinity)
        try:
            await self._until_gone(self.service.extend_text(open_text.plan, open_text.rid, open_text.key, text, done))
        except (APIError, InvalidRequest) as exc:
            # A generation that already ended (its budget spent, failed, cancelled) takes no more text.
            if open_text.task is not None and not open_text.task.done():
                await self._error(f"input.text could not extend the utterance: {errors.ws_message(exc, open_text.rid)}")
        finally:
            ENDPOINT_AFFINITY.reset(token)

    async def _close_open(self, wait_only: bool = False) -> None:
        """End the open generation's text (unless `wait_only`) and wait for its audio.done."""
        open_text = self._open
        if open_text is None:
            return
        if not wait_only and open_text.task is not None and not open_text.task.done():
            await self._extend(open_text, "", done=True)
        try:
            if open_text.task is not None:
                await open_text.task
        finally:
            self._open = None

    # --- one TTS request ----------------------------------------------------------------------------

    async def _send_audio(self, data: bytes) -> None:
        if not self._audio_seen and self._utterance_at is not None and self.config is not None and data:
            self._audio_seen = True
            self.service.metrics.first_text_to_audio(self.config.mode, time.monotonic() - self._utterance_at)
        await self.transport.send_bytes(data)

    async def _speak(self, text: str, open_text: _OpenText | None = None) -> None:
        """One TTS request of `text`: audio.start, its audio, audio.done. `open_text`: the
        utterance's incremental generation (this runs as its task; more text comes by extension)."""
        config = self.config
        assert config is not None
        index = self.sentence_index
        self.sentence_index += 1
        utterance = self.utterance_index
        rid = f"{self.request_id}-u{utterance}-s{index}"
        output = open_text.plan.output if open_text is not None else None
        await self.transport.send_json(AudioStart(
            utterance_index=utterance, sentence_index=index, sentence_text=text,
            format=output.format if output else config.format,
            sample_rate=output.sample_rate if output else config.sample_rate,
        ).model_dump())
        sent = [0]
        failed = False
        cancelled = False
        trace = RequestTrace(self.route, self._received_at)
        status = 200
        token = ENDPOINT_AFFINITY.set(self.affinity)  # (the work task below copies the context)
        try:
            await self._until_gone(self._generate(config, text, rid, sent, trace, open_text), cancellable=True,
                                   stop=open_text.stop if open_text is not None else None)
        except Disconnected:
            self.service.metrics.finished(trace, STATUS_CLIENT_GONE, client_gone=True)
            raise
        except Cancelled:
            cancelled = True
            logger.info("streaming request %s cancelled by input.cancel", rid)
        except (APIError, InvalidRequest, StreamAborted) as exc:
            failed = True
            if isinstance(exc, StreamAborted):  # the stream put its cause on the trace
                message, status = str(exc), trace.status or 500
            else:
                message = errors.ws_message(exc, rid)
                status, cause = errors.classify(exc)
                trace.fail(status, cause)
            logger.info("streaming request %s failed: %s", rid, message)
            await self._error(f"Generation failed for utterance {utterance}, sentence {index}: {message}")
        except Exception as exc:  # a bug fails this request only; the session goes on
            failed = True
            logger.exception("streaming request %s failed", rid)
            status, cause = errors.classify(exc)
            trace.fail(status, cause)
            await self._error(f"Generation failed for utterance {utterance}, sentence {index}: "
                              f"{errors.ws_message(exc, rid)}")
        finally:
            ENDPOINT_AFFINITY.reset(token)
        if cancelled:
            self.service.metrics.finished(trace, STATUS_CLIENT_GONE, client_gone=True)
        else:
            self.service.metrics.finished(trace, status)
        await self.transport.send_json(AudioDone(
            utterance_index=utterance, sentence_index=index, total_bytes=sent[0], error=failed,
            cancelled=cancelled or None,
        ).model_dump(exclude_none=True))

    async def _generate(self, config: _Config, text: str, rid: str, sent: list[int], trace: RequestTrace,
                        open_text: _OpenText | None = None) -> None:
        if open_text is not None:  # incremental: streamed whatever stream_audio says (the point is early audio)
            plan = open_text.plan
            stream = await self.service.open_stream(plan, rid, config.features, trace=trace, text_key=open_text.key)
            try:
                async for data in stream.body():
                    await self._send_audio(data)
                    sent[0] += len(data)
            finally:
                await stream.aclose()
            return
        plan = self.service.plan(config.message.speech_fields(text))
        if plan.output.stream is not None:
            stream = await self.service.open_stream(plan, rid, config.features, trace=trace)
            try:
                async for data in stream.body():
                    await self._send_audio(data)
                    sent[0] += len(data)
            finally:
                await stream.aclose()
        else:
            clip = await self.service.synthesize(plan, rid, config.features, trace=trace)
            await self._send_audio(clip.audio)
            sent[0] += len(clip.audio)
