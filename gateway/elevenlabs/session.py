"""The ElevenLabs dialect's WebSocket protocol (`stream-input`: one context; `multi-stream-input`: many).

Transport-agnostic like gateway.streaming (a `Transport` of text frames; its `Inbox` reads the client
concurrently with the work), over the same SpeechService as the Speech API.

Obligations:
- At connect, the query (`model_id`, `output_format`, `inactivity_timeout`, `auto_mode`, `sync_alignment`,
  `language_code`, and this gateway's `max_new_tokens`) and the URL's voice are checked by planning a probe request: a refusal is an error
  message, then close 1008, before any text is taken.
- The key: a handshake without one (header `xi-api-key`, `Authorization: Bearer`, query `api_key`) must
  carry it in its first message (`xi_api_key` / `xi-api-key` / `authorization`), else error + close 1008.
- A context starts with its first message (ElevenLabs sends `text: " "` with `voice_settings` and
  `generation_config`); its settings hold for the context (`speed` as the Speech API's: a streamed
  request takes 1.0 only, else the context is refused).
- Text becomes audio in one of two modes, chosen per connection:
  * incremental (the family takes text while it generates, gateway.family.takes_open_text, and no aligner
    is deployed): the first
    text of a context starts ONE generation (the streaming prompt mode) and later text extends it while
    audio streams; `flush` ends its text; text after a flush starts the next generation (after the
    previous one's audio).
  * sentence (otherwise): text is split into sentences (gateway.text_split), each one request; with
    `auto_mode` false a buffer longer than the `chunk_length_schedule` step (default 120, 160, 250, 290
    characters) is cut at its last space; `try_trigger_generation` cuts the buffered complete words now;
    `flush` generates the rest.
  A context's requests run one after the other, so its audio is in text order; contexts run concurrently.
- Replies: `{"audio": base64, "isFinal": null, "alignment": ..., "normalizedAlignment": ...}` (+ `contextId`
  on multi-stream) per chunk as decoded; after each generation's audio, its alignment (times relative to
  that generation's start, spanning its audio) in a message with empty audio when the deployment has a
  forced aligner (gateway.word_timing: each sentence request asks for `word_timestamps`; incremental text
  is then not used, since words are timed a sentence at a time), else no alignment at all (null fields, as
  ElevenLabs with alignment off).
- stream-input ends with `{"text": ""}`: everything is flushed, its audio sent, then `{"isFinal": true}` and
  close 1000. A message after that end is an error, close 1008.
- multi-stream-input: `{"text": ""}` keeps a context alive; `flush` (with `context_id`) flushes one context;
  `close_context` closes it: a flushed context finishes its audio, an unflushed one (barge-in) is cancelled
  at once (its Triton requests with it), then `{"isFinal": true, "contextId": id}`; the id may be reused
  for a new context. A second `close_context` for a context still finishing its flushed audio cancels it
  at once: that is how pipecat interrupts a turn whose text was complete (it closes the context at the
  turn's end and again at the interruption). `close_socket`: flushed contexts finish, the others are cancelled, close 1000.
- Malformed messages (not JSON, wrong types, a multi-stream message without `context_id` where one is
  needed) are an error and close 1008. A failed generation is an error message (naming its context); the
  connection goes on. No message for `inactivity_timeout` seconds while nothing is generated: error, 1008.
- A client that disconnects cancels every context's work.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from ttscore.contract.errors import InvalidRequest

from .. import errors
from ..errors import APIError
from ..family import SpeechPlan, takes_open_text
from ..metrics import RequestTrace
from ..services import SpeechService, StreamAborted
from ..settings import Settings
from ..speech_fields import SpeechFields
from ..streaming.transport import CLOSE_NORMAL, GONE, STOP, Disconnected, Inbox, Transport
from ..text_split import TextSplitter
from ..word_timing import Word
from . import wire

logger = logging.getLogger(__name__)

DEFAULT_SCHEDULE = (120, 160, 250, 290)
SCHEDULE_RANGE = (50, 500)
DEFAULT_INACTIVITY_S = 20
MAX_INACTIVITY_S = 180
DEFAULT_CONTEXT = "default"  # stream-input's one context (never sent: its replies carry no contextId)
TRUE, FALSE = ("true", "1"), ("false", "0")


def _flag(query: dict[str, str], name: str, default: bool) -> bool:
    value = query.get(name)
    if value is None:
        return default
    if value.strip().lower() in TRUE:
        return True
    if value.strip().lower() in FALSE:
        return False
    raise wire.validation_error(("query", name), "Input should be a valid boolean", "bool_parsing", value)


@dataclass(frozen=True)
class SessionOptions:
    """The connection's query parameters, checked."""

    multi: bool
    fmt: str
    rate: int
    model_id: str | None = None
    language_code: str | None = None
    auto_mode: bool = False
    sync_alignment: bool = False  # accepted: alignment always follows the audio it times
    inactivity_timeout_s: float = DEFAULT_INACTIVITY_S
    max_new_tokens: int | None = None  # this gateway's extension (the Speech API's field)

    @classmethod
    def from_query(cls, query: dict[str, str], multi: bool) -> SessionOptions:
        fmt, rate = wire.output_format(query.get("output_format"))
        raw = query.get("inactivity_timeout")
        timeout: float = DEFAULT_INACTIVITY_S
        if raw is not None:
            try:
                timeout = int(raw)
            except ValueError:
                raise wire.validation_error(("query", "inactivity_timeout"), "Input should be a valid integer",
                                            "int_parsing", raw) from None
            if not 1 <= timeout <= MAX_INACTIVITY_S:
                raise wire.validation_error(("query", "inactivity_timeout"),
                                            f"Input should be between 1 and {MAX_INACTIVITY_S}", "range", raw)
        frames = query.get("max_new_tokens")
        if frames is not None and not frames.isdigit():
            raise wire.validation_error(("query", "max_new_tokens"), "Input should be a valid integer", "int_parsing",
                                        frames)
        return cls(multi=multi, fmt=fmt, rate=rate, model_id=query.get("model_id") or None,
                   max_new_tokens=int(frames) if frames is not None else None,
                   language_code=query.get("language_code") or None,
                   auto_mode=_flag(query, "auto_mode", False), sync_alignment=_flag(query, "sync_alignment", False),
                   inactivity_timeout_s=float(timeout))


class Refused(Exception):
    """The connection is refused: the error message is sent, then the socket closes with 1008."""

    def __init__(self, message: str, code: str, context_id: str | None = None) -> None:
        super().__init__(message)
        self.message, self.code, self.context_id = message, code, context_id


@dataclass
class OpenGeneration:
    """Incremental mode: the generation a context's text goes to until its flush."""

    key: str
    text: str
    done: bool = False  # flushed: its text is complete
    plan: SpeechPlan | None = None  # set when it starts
    started: asyncio.Event = field(default_factory=asyncio.Event)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # extensions go one at a time, in order


@dataclass
class Context:
    id: str
    voice_settings: wire.VoiceSettings | None
    schedule: tuple[int, ...]
    splitter: TextSplitter = field(default_factory=lambda: TextSplitter("sentence"))
    cut: int = 0  # schedule steps used
    jobs: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    worker: asyncio.Task[None] | None = None
    flushed: bool = False  # a flush was asked and nothing was sent since
    open: OpenGeneration | None = None
    busy: int = 0  # jobs queued or running

    @property
    def working(self) -> bool:
        """Audio is owed for text the client has finished (queued sentences, a flushed generation); an
        unflushed incremental generation waits for the client, so it does not hold off the inactivity
        timeout."""
        return self.busy - (1 if self.open is not None else 0) > 0


class ElevenLabsSession:
    def __init__(self, service: SpeechService, transport: Transport, settings: Settings, request_id: str,
                 voice_id: str, options: SessionOptions, *, keys: Any | None, route: str,
                 stop: asyncio.Event) -> None:
        self.service = service
        self.transport = transport
        self.request_id = request_id
        self.voice_id = voice_id
        self.options = options
        self.keys = keys  # not None: the key must come in the first message (gateway.auth.DEFERRED_KEYS)
        self.aligned = service.deployment.aligner_model is not None  # words timed: alignment is sent
        self.route = route
        self.stop = stop
        self.max_message_bytes = settings.ws_max_config_bytes
        self.inbox = Inbox(transport, self._parse, lambda msg: False, request_id)
        self.contexts: dict[str, Context] = {}
        self.incremental = False
        self.ended = False  # stream-input: the empty text came
        self._send_lock = asyncio.Lock()
        self._closers: set[asyncio.Task[None]] = set()
        self._finishing: dict[str, Context] = {}  # closed contexts whose flushed audio is still coming
        self._requests = 0

    # --- the connection ----------------------------------------------------------------------------

    async def run(self) -> None:
        reader = asyncio.create_task(self.inbox.read())
        try:
            try:
                self._probe()
                await self._serve()
            except Refused as exc:
                await self._refuse(exc)
        except Disconnected:
            logger.info("elevenlabs session %s: client disconnected", self.request_id)
        finally:
            for ctx in list(self.contexts.values()):
                await self._cancel(ctx)
            for task in list(self._closers):
                task.cancel()
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader

    async def _refuse(self, exc: Refused) -> None:
        await self._send(wire.ws_error(exc.message, exc.code, wire.WS_POLICY, exc.context_id))
        await self.transport.close(wire.WS_POLICY, exc.message[:120])

    def _fields(self, text: str, settings: wire.VoiceSettings | None) -> SpeechFields:
        o = self.options
        return wire.speech_fields(text, self.voice_id, o.model_id, o.fmt, o.rate, streamed=True,
                                  voice_settings=settings, language_code=o.language_code,
                                  max_new_tokens=o.max_new_tokens, word_timestamps=self.aligned)

    def _plan(self, fields: SpeechFields) -> SpeechPlan:
        """Plan as the Speech API does; a refusal in the dialect's terms."""
        try:
            return self.service.plan(fields)
        except (APIError, InvalidRequest) as exc:
            mapped = wire.dialect_error(errors.from_invalid_request(exc) if isinstance(exc, InvalidRequest) else exc)
            code = mapped.code if isinstance(mapped, wire.ElevenLabsError) else "invalid_request"
            raise Refused(mapped.message, code) from None

    def _probe(self) -> None:
        """The voice, model and format of the URL, planned once; which text mode the model takes."""
        plan = self._plan(replace(self._fields("probe", None), non_streaming_mode=False, word_timestamps=None))
        # Words are timed a sentence at a time (gateway.word_timing): with an aligner, sentences.
        self.incremental = takes_open_text(plan) and not self.aligned

    async def _serve(self) -> None:
        while True:
            if self.stop.is_set() and not any(c.working for c in self.contexts.values()):
                raise Refused("The server is shutting down; reconnect to continue", "service_unavailable")
            try:
                raw = await self.inbox.next(self.options.inactivity_timeout_s, self.stop)
            except TimeoutError:
                if any(c.working for c in self.contexts.values()) or self._closers:
                    continue  # audio is being generated: the client waits for it
                raise Refused(f"Have not received a new text input within the timeout of "
                              f"{self.options.inactivity_timeout_s:g} seconds; closing the connection",
                              "input_timeout_exceeded") from None
            if raw is GONE:
                return
            if raw is STOP:
                continue
            if not await self._handle(raw):
                return

    # --- messages ----------------------------------------------------------------------------------

    def _parse(self, raw: str | bytes) -> wire.ClientMessage | Refused:
        if isinstance(raw, bytes):
            return Refused("Binary messages are not accepted; send JSON text messages", "invalid_message")
        if len(raw.encode("utf-8", "surrogatepass")) > self.max_message_bytes:
            return Refused(f"Message too large (at most {self.max_message_bytes} bytes)", "invalid_message")
        try:
            data = json.loads(raw)
        except ValueError as exc:
            return Refused(f"Invalid JSON message: {exc}", "invalid_message")
        if not isinstance(data, dict):
            return Refused("Messages must be JSON objects", "invalid_message")
        try:
            return wire.ClientMessage.model_validate(data)
        except ValidationError as exc:
            return Refused(f"Invalid message: {wire.from_validation(exc, 'message').message}", "invalid_message")

    async def _handle(self, msg: wire.ClientMessage | Refused) -> bool:
        """One message; False: the connection is over."""
        if isinstance(msg, Refused):
            raise msg
        if self.keys is not None:  # the first message carries the key
            presented = msg.api_key()
            if not presented or not self.keys.accepts(presented):
                raise Refused("Missing API key: send it as the xi-api-key header or the first message's xi_api_key"
                              if not presented else "Invalid API key", "invalid_api_key")
            self.keys = None
        if self.ended:
            raise Refused("Text received after the end of input (an empty text ends a stream-input connection)",
                          "invalid_message")
        if msg.close_socket:
            await self._close_socket()
            return False
        cid = msg.context_id if self.options.multi else DEFAULT_CONTEXT
        if cid is None:
            if msg.text == "" and not msg.flush and not msg.close_context:
                return True  # a connection-level keepalive
            raise Refused("Messages on multi-stream-input name their context_id", "invalid_message")
        if msg.close_context:
            ctx = self.contexts.pop(cid, None)
            if ctx is not None:
                self._close_context(ctx)
            elif cid in self._finishing:  # closed again while its flushed audio is still coming: barge-in
                await self._cancel(self._finishing[cid])
            else:
                await self._final(cid)
            return True
        ctx = self.contexts.get(cid)
        if ctx is None:
            ctx = await self._open_context(cid, msg)
        elif msg.voice_settings is not None and msg.voice_settings != ctx.voice_settings and msg.text != "":
            raise Refused("voice_settings may be sent only in a context's first message", "invalid_message", cid)
        text = msg.text or ""
        if not self.options.multi and msg.text == "" and not msg.flush:
            self.ended = True  # the end of stream-input: flush, then isFinal and close
            await self._flush(ctx)
            self._finish(ctx, close_socket=True)
            return True
        if text.strip() or (text and ctx.open is not None):
            await self._feed(ctx, text, msg.try_trigger_generation is True)
        if msg.flush:
            await self._flush(ctx)
        return True

    async def _open_context(self, cid: str, msg: wire.ClientMessage) -> Context:
        config = msg.generation_config or msg.generator_config
        schedule: tuple[int, ...] = DEFAULT_SCHEDULE
        if config is not None and config.chunk_length_schedule:
            values = [int(v) for v in config.chunk_length_schedule]
            if not all(SCHEDULE_RANGE[0] <= v <= SCHEDULE_RANGE[1] for v in values):
                raise Refused(f"chunk_length_schedule values must be between {SCHEDULE_RANGE[0]} and "
                              f"{SCHEDULE_RANGE[1]}", "invalid_message", cid if self.options.multi else None)
            schedule = tuple(values)
        ctx = Context(cid, msg.voice_settings, schedule)
        try:
            self._plan(self._fields("probe", ctx.voice_settings))  # its settings, as a request takes them
        except Refused as exc:
            exc.context_id = cid if self.options.multi else None
            raise
        ctx.worker = asyncio.ensure_future(self._work(ctx))
        self.contexts[cid] = ctx
        return ctx

    # --- text into requests --------------------------------------------------------------------------

    def _queue(self, ctx: Context, job: Any) -> None:
        ctx.busy += 1
        ctx.jobs.put_nowait(job)

    async def _feed(self, ctx: Context, text: str, trigger: bool) -> None:
        ctx.flushed = False
        if self.incremental:
            gen = ctx.open
            if gen is None:
                ctx.open = OpenGeneration(uuid.uuid4().hex, text)
                self._queue(ctx, ctx.open)
                return
            gen.text += text
            if gen.started.is_set():
                await self._extend(gen, text, done=False)
            return
        units = ctx.splitter.feed(text)
        pending = ctx.splitter.pending
        step = ctx.schedule[min(ctx.cut, len(ctx.schedule) - 1)]
        if (trigger or (not self.options.auto_mode and len(pending) >= step)) and " " in pending.strip():
            head, _, rest = pending.rstrip().rpartition(" ")
            units.append(head)
            ctx.splitter.reset()
            ctx.splitter.feed(rest + pending[len(pending.rstrip()):])
            ctx.cut += 1
        for unit in units:
            if unit.strip():
                self._queue(ctx, unit.strip())

    async def _flush(self, ctx: Context) -> None:
        ctx.flushed = True
        ctx.cut = 0
        if self.incremental:
            gen, ctx.open = ctx.open, None
            if gen is not None:
                if gen.started.is_set():
                    await self._extend(gen, "", done=True)
                else:
                    gen.done = True
            return
        for unit in ctx.splitter.flush():
            self._queue(ctx, unit)

    async def _extend(self, gen: OpenGeneration, text: str, done: bool) -> None:
        if gen.plan is None:
            return
        async with gen.lock:
            try:
                await self.inbox.until_gone(self.service.extend_text(gen.plan, self.request_id, gen.key, text, done))
            except (APIError, InvalidRequest) as exc:
                logger.info("elevenlabs session %s: extension refused: %s", self.request_id, exc)

    # --- contexts ending -----------------------------------------------------------------------------

    async def _final(self, cid: str) -> None:
        await self._send({"isFinal": True, **({"contextId": cid} if self.options.multi else {})})

    def _close_context(self, ctx: Context) -> None:
        if ctx.flushed and not (ctx.open is not None):
            self._finish(ctx, close_socket=False)
        else:  # barge-in: nothing flushed is waiting, so stop now
            self._finish(ctx, close_socket=False, cancel=True)

    def _finish(self, ctx: Context, close_socket: bool, cancel: bool = False) -> None:
        """isFinal once the context's audio is out (at once when cancelled); stream-input then closes."""

        if not cancel:
            self._finishing[ctx.id] = ctx
            self._queue(ctx, None)

        async def finish() -> None:
            try:
                if cancel:
                    await self._cancel(ctx)
                elif ctx.worker is not None:
                    await asyncio.wait({ctx.worker})  # (it may be cancelled by a second close_context)
            finally:
                if self._finishing.get(ctx.id) is ctx:
                    del self._finishing[ctx.id]
            await self._final(ctx.id)
            if close_socket:
                await self.transport.close(CLOSE_NORMAL, "end of input")

        task = asyncio.ensure_future(finish())
        self._closers.add(task)
        task.add_done_callback(self._closers.discard)

    async def _cancel(self, ctx: Context) -> None:
        if ctx.worker is not None and not ctx.worker.done():
            ctx.worker.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await ctx.worker
        ctx.busy = 0

    async def _close_socket(self) -> None:
        contexts, self.contexts = list(self.contexts.values()), {}
        for ctx in contexts:
            self._close_context(ctx)
        if self._closers:
            await self.inbox.until_gone(asyncio.gather(*list(self._closers), return_exceptions=True))
        await self.transport.close(CLOSE_NORMAL, "close_socket")

    # --- requests ------------------------------------------------------------------------------------

    async def _send(self, message: dict[str, Any]) -> None:
        async with self._send_lock:
            await self.transport.send_json(message)

    async def _audio(self, ctx: Context, data: bytes, alignment: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"audio": base64.b64encode(data).decode("ascii"), "isFinal": None,
                                   "normalizedAlignment": alignment, "alignment": alignment}
        if self.options.multi:
            message["contextId"] = ctx.id
        await self._send(message)

    async def _work(self, ctx: Context) -> None:
        """The context's requests, one at a time (None: the context is finished)."""
        while True:
            job = await ctx.jobs.get()
            if job is None:
                ctx.busy = max(0, ctx.busy - 1)
                return
            try:
                await self._speak(ctx, job)
            finally:
                ctx.busy = max(0, ctx.busy - 1)

    async def _speak(self, ctx: Context, job: str | OpenGeneration) -> None:
        rid = f"{self.request_id}-{self._requests}"
        self._requests += 1
        trace = RequestTrace(self.route, time.monotonic())
        status = 200
        try:
            if isinstance(job, OpenGeneration) and not job.done:
                plan = self._plan(replace(self._fields(job.text, ctx.voice_settings), non_streaming_mode=False))
                job.plan = plan
                stream = self.service.open_stream(plan, rid, trace=trace, text_key=job.key)
                opened = asyncio.ensure_future(stream)
                job.started.set()  # text from now on extends it (Triton holds an extension until its request)
                if job.done:
                    await self._extend(job, "", done=True)
                await self._stream(ctx, plan, opened, lambda: job.text)
            else:
                text = job.text if isinstance(job, OpenGeneration) else job
                plan = self._plan(self._fields(text, ctx.voice_settings))
                await self._stream(ctx, plan, self.service.open_stream(plan, rid, trace=trace), lambda: text)
        except Refused as exc:
            status = 400
            await self._send(wire.ws_error(exc.message, exc.code, wire.WS_POLICY,
                                           ctx.id if self.options.multi else None))
        except (APIError, StreamAborted) as exc:
            status = exc.status if isinstance(exc, APIError) else (trace.status or 500)
            mapped = wire.dialect_error(exc) if isinstance(exc, APIError) else None
            code = mapped.code if isinstance(mapped, wire.ElevenLabsError) else "generation_failed"
            logger.info("elevenlabs request %s failed: %s", rid, exc)
            await self._send(wire.ws_error(f"Generation failed: {errors.ws_message(exc, rid)}", code, wire.WS_POLICY,
                                           ctx.id if self.options.multi else None))
        except asyncio.CancelledError:
            self.service.metrics.finished(trace, 499, client_gone=True)
            raise
        self.service.metrics.finished(trace, status)

    async def _stream(self, ctx: Context, plan: SpeechPlan, opening: Awaitable[Any], spoken: Callable[[], str]) -> None:
        """Send a generation's audio as it comes, then its alignment (of `spoken()`, its whole text)."""
        stream = await opening
        words: list[Word] | None = None

        async def on_words(got: tuple[Word, ...]) -> None:
            nonlocal words
            words = [*(words or []), *got]

        stream.on_words = on_words
        try:
            async for data in stream.body():
                if data:
                    await self._audio(ctx, data)
        finally:
            await stream.aclose()
        aligned = wire.alignment(spoken(), words, stream.seconds)
        if aligned is not None:
            await self._audio(ctx, b"", aligned.ws())


__all__ = ["ElevenLabsSession", "SessionOptions"]
