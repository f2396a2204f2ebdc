"""The WebSocket session's protocol state machine (gateway.streaming: the obligations it keeps)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from typing import cast

from pydantic import BaseModel

from ttscore.contract.errors import InvalidRequest
from ttscore.contract.tensors import FINISH_CANCELLED, FINISH_ERROR, FINISH_STOP

from .. import errors
from ..admission import Admission
from ..backend import ENDPOINT_AFFINITY, Affinity
from ..errors import APIError
from ..family import takes_open_text
from ..metrics import STATUS_CLIENT_GONE, RequestTrace
from ..protocol import (
    AudioDone,
    AudioStart,
    AudioTimestamps,
    FinishReason,
    InputCancel,
    SessionConfig,
    SessionConfigured,
    SessionDone,
    WordTimestamp,
)
from ..services import SpeechService, StreamAborted
from ..settings import Settings
from ..text_split import TextSplitter
from ..word_timing import Word, as_wire, shifted
from .audio import Heard, OpenText, generate
from .messages import INCREMENTAL, SessionSetup, parse_message
from .transport import CLOSE_GOING_AWAY, CLOSE_NORMAL, GONE, STOP, Cancelled, Disconnected, Inbox, Transport

logger = logging.getLogger(__name__)


class StreamingSession:
    def __init__(self, service: SpeechService, transport: Transport, settings: Settings, request_id: str, *,
                 route: str, stop: asyncio.Event) -> None:
        """`route`: the metrics label of each TTS request; `stop`: set when the server drains."""
        self.service = service
        self.transport = transport
        self.route = route
        self.stop = stop
        self.idle_timeout_s = settings.ws_idle_timeout_s
        self.request_id = request_id
        self.inbox = Inbox(transport, lambda raw: parse_message(raw, settings.ws_max_config_bytes,
                                                               settings.ws_max_text_bytes),
                           lambda msg: isinstance(msg, InputCancel), request_id)
        self.config: SessionSetup | None = None
        self.splitter = TextSplitter("none")
        self.utterance_index = 0
        self.sentence_index = 0
        self.utterance_open = False  # text arrived since the last input.done
        # Every sentence of one utterance goes to one Triton endpoint (gateway.pool), chosen at its first.
        self.affinity = Affinity()
        self._open: OpenText | None = None  # incremental mode: the utterance's running generation
        self._utterance_at: float | None = None  # arrival of the utterance's first text
        self._audio_seen = False  # the utterance's first audio was sent (metrics)
        self._utterance_seconds = 0.0  # audio of the utterance sent so far (word timestamps' timeline)

    # --- the connection ----------------------------------------------------------------------------

    async def run(self) -> None:
        reader = asyncio.create_task(self.inbox.read())
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

    async def _serve(self) -> None:
        while True:
            if self.stop.is_set() and not self.utterance_open:
                await self._error("The server is shutting down; reconnect to continue")
                await self.transport.close(CLOSE_GOING_AWAY, "server shutting down")
                return
            try:
                # An open utterance is finished first: during a drain its input.done is still awaited.
                raw = await self.inbox.next(self.idle_timeout_s, None if self.utterance_open else self.stop)
            except TimeoutError:
                await self._error(f"Idle timeout: no message for {self.idle_timeout_s:g}s; closing the connection")
                await self.transport.close(CLOSE_NORMAL, "idle timeout")
                return
            if raw is GONE:
                return
            if raw is STOP:
                continue  # closes above
            if not await self._handle(raw):
                return

    # --- messages --------------------------------------------------------------------------------

    async def _error(self, message: str) -> None:
        await self.transport.send_json(errors.ws_error(message))

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
            self.inbox.cancel_handled()
        if self.config is None:
            await self._error(f"Send session.config before {kind}")
            return True
        if kind == "input.cancel":
            await self._end_utterance(cancelled=True)
        elif self.inbox.cancels:
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
                features = await self.inbox.until_gone(self.service.reference_features(probe, rid))
        except (APIError, InvalidRequest) as exc:
            await self._error(f"Invalid session.config: {errors.ws_message(exc, rid)}")
            return
        mode, reason = msg.split_granularity, None
        if mode == INCREMENTAL and not takes_open_text(probe):
            mode, reason = "sentence", (f"{probe.checkpoint.name} cannot take text while it generates with this "
                                        "configuration; each sentence is one request")
        config = SessionSetup(msg, probe, features, mode)
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
            self._utterance_at, self._audio_seen = self.inbox.received_at, False
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
            if self.inbox.cancels:
                return  # an input.cancel ends the utterance: the rest is dropped
            await self._speak(unit)

    async def _flush(self) -> None:
        if self._open is not None:
            await self._close_open()
            if not self.inbox.cancels:
                await self._end_utterance()
            return
        for unit in self.splitter.flush():
            if self.inbox.cancels:
                return  # the input.cancel behind this flush closes the utterance
            await self._speak(unit)
        if not self.inbox.cancels:
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
        self._utterance_seconds = 0.0
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
            self._open = OpenText(uuid.uuid4().hex, plan, rid, len(text) + len(rest))
            self._open.said.text = text
            self._open.task = asyncio.ensure_future(self._speak(text, self._open))
            await asyncio.sleep(0)  # let it send audio.start and its Triton request first
            if rest:
                await self._extend(self._open, rest, done=False)
            return
        self._open.chars += len(text)
        await self._extend(self._open, text, done=False)

    async def _extend(self, open_text: OpenText, text: str, done: bool) -> None:
        if open_text.task is not None and open_text.task.done():
            return  # the generation already ended (its budget spent, failed, cancelled): nothing takes text
        token = ENDPOINT_AFFINITY.set(self.affinity)
        said = open_text.said
        before = said.text
        # Word timestamps: the text is counted before the model has it, so the audio an alignment takes never
        # holds words its text lacks (a word without audio yet belongs at the clip's end, where it is not final).
        said.text += text
        try:
            await self.inbox.until_gone(self.service.extend_text(open_text.plan, open_text.rid, open_text.key, text, done))
            said.done = said.done or done
        except (APIError, InvalidRequest) as exc:
            said.text = before  # the generation did not take it
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

    async def _speak(self, text: str, open_text: OpenText | None = None) -> None:
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
        sent = 0

        async def send(data: bytes) -> None:
            nonlocal sent
            await self._send_audio(data)
            sent += len(data)

        offset = self._utterance_seconds
        heard = Heard()

        async def send_words(words: tuple[Word, ...]) -> None:
            # The service's char offsets index this request's input: the sentence's text, or the utterance's
            # text (its input.text texts joined) in incremental mode.
            await self.transport.send_json(AudioTimestamps(
                utterance_index=utterance, sentence_index=index,
                timestamps=[WordTimestamp(**w) for w in as_wire(shifted(words, offset))]).model_dump())

        failed = False
        cancelled = False
        reason = FINISH_STOP
        trace = RequestTrace(self.route, self.inbox.received_at)
        status = 200
        token = ENDPOINT_AFFINITY.set(self.affinity)  # (the work task below copies the context)
        try:
            with Admission.streamed():  # (copied into the work task too): a stream's generation, not queued
                work = generate(self.service, config, text, rid, trace, send, open_text, send_words, heard)
                reason = await self.inbox.until_gone(work, cancellable=True,
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
            self._utterance_seconds += heard.seconds  # what went out, also from a request that failed part-way
        if cancelled:
            self.service.metrics.finished(trace, STATUS_CLIENT_GONE, client_gone=True)
        else:
            self.service.metrics.finished(trace, status)
        if failed or cancelled:
            reason = FINISH_ERROR if failed else FINISH_CANCELLED
        await self.transport.send_json(AudioDone(
            utterance_index=utterance, sentence_index=index, total_bytes=sent, error=failed,
            cancelled=cancelled or None, finish_reason=cast(FinishReason, reason),
        ).model_dump(exclude_none=True))


__all__ = ["StreamingSession"]
