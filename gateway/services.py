"""Speech API <-> inference backend: plans run as Triton streams, audio encoded, usage reported.

- `synthesize`: whole clip (collect every chunk until FINAL, then speed / resample / encode).
- `open_stream`: raw pcm/wav bytes or speech.audio.* SSE events as chunks arrive. The first
  chunk is awaited *before* the HTTP status is sent, so a request Triton rejects still gets a
  proper 4xx/5xx; after that, failures go in-band (SSE `speech.audio.error`) or cut the body.
- `batch`: items planned and run concurrently, each with its own result or error.
- Readiness: Triton and every model the deployment needs, cached briefly while healthy, and never
  while no endpoint can serve one of them (the endpoints' health monitors, gateway.pool).
- Faults and time limits: the backend (gateway.pool) ends a stream whose model breaks (gateway.health),
  and waits on Triton are bounded here (gateway.deadline). A reproducible generation whose Triton
  fails after its audio started is replayed here (gateway.replay): every response (whole clip, raw,
  SSE, WebSocket, batch items) draws its samples from `_segment`.

Closing a generator here closes the backend stream, which cancels the request in Triton: every
consumer uses `aclosing`, and `AudioStream.aclose` covers a response that never started.

Metrics (gateway.metrics): every generation is metered where its chunks pass (`_generate`), against
the `RequestTrace` of the request it serves; errors told in-band (SSE, batch items) go on the trace.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ttscore.contract.errors import InvalidRequest
from ttscore.contract.rules import RefAudioBounds
from ttscore.contract.tensors import (
    FINISH_CANCELLED,
    FINISH_ERROR,
    FINISH_LENGTH,
    FINISH_STOP,
    TEXT_DONE_PARAMETER,
    TEXT_EXTEND_PARAMETER,
    TEXT_KEY_PARAMETER,
)

from . import encoding, errors, longtext, refaudio, sse, word_timing
from .admission import Admission, AdmissionLimits
from .auth import API_KEY_ID
from .backend import DEADLINE_EXCEEDED, INTERNAL, UNAVAILABLE, BackendError, InferenceBackend, SpeechChunk
from .deadline import END, TOTAL, Deadline, next_within
from .errors import APIError
from .listings import Listings
from .metrics import GatewayMetrics, RequestTrace
from .planning import Deployment, SpeechFields, SpeechPlan, plan_speech
from .replay import REPLAYABLE, Diverged, ReplayBudget, SampleCursor
from .settings import Settings
from .usage import Usage
from .voices.sources import RefAudioSettings
from .word_timing import GrowingText, Word

logger = logging.getLogger(__name__)

# A plan's reference features, as its family's adapter computes and sends them (gateway.family).
Features = Any


def ref_audio_settings(settings: Settings) -> RefAudioSettings:
    return RefAudioSettings(
        max_bytes=settings.ref_audio_max_bytes,
        timeout_s=settings.ref_audio_timeout_s,
        connect_timeout_s=min(5.0, settings.ref_audio_timeout_s),
        max_redirects=settings.ref_audio_max_redirects,
        allow_private_urls=settings.allow_private_urls,
        allowed_local_media_path=settings.allowed_local_media_path,
        allowed_media_domains=settings.allowed_media_domains,
    )


class _FeatureEnv:
    """gateway.family.FeatureEnv of one request: the backend, ref_audio sources, the shared cache."""

    def __init__(self, service: SpeechService, request_id: str) -> None:
        self.service = service
        self.backend = service.backend
        self.request_id = request_id

    async def ref_audio(self, locator: str, bounds: RefAudioBounds) -> tuple[np.ndarray, int]:
        return await refaudio.resolve_ref_audio(locator, self.service.ref_settings, bounds)

    async def shared(self, key: tuple[Any, ...], compute: Callable[[], Awaitable[Any]]) -> Any:
        return await self.service.shared_features(key, compute)


class StreamAborted(Exception):
    """A raw audio stream failed after its first byte: the body ends without its last chunk."""


@dataclass(frozen=True)
class Clip:
    audio: bytes
    media_type: str
    usage: Usage
    finish_reason: str = FINISH_STOP  # "stop" | "length" (ttscore.contract.tensors.FINISH_REASONS)
    words: tuple[Word, ...] | None = None  # word_timestamps: on the clip's timeline (after `speed`)
    seconds: float = 0.0  # how long it plays (after `speed`)


FINISH_REASON_HEADER = "X-Finish-Reason"


def finish_reason(chunk: SpeechChunk | None) -> str:
    """Why a generation whose final chunk is `chunk` ended ("stop" when Triton named no reason)."""
    return chunk.finish_reason if chunk is not None and chunk.finish_reason else FINISH_STOP


class ReadinessMonitor:
    """Is Triton up with every needed model ready? A positive answer is trusted for `ttl_s`.

    `unusable` (the health monitor's verdicts: model -> reason) overrides Triton's own answer, which
    stays "ready" after a model's stub process died."""

    def __init__(self, backend: InferenceBackend, models: list[str], ttl_s: float, retry_after_s: int,
                 unusable: Callable[[], dict[str, str]] | None = None) -> None:
        self.backend = backend
        self.models = list(dict.fromkeys(models))
        self.ttl_s = ttl_s
        self.retry_after_s = retry_after_s
        self.unusable = unusable or dict
        self._ready_until = 0.0
        self._lock = asyncio.Lock()

    def invalidate(self) -> None:
        self._ready_until = 0.0

    def broken(self) -> dict[str, str]:
        """Needed models the health monitor holds broken, with the reason."""
        return {m: why for m, why in self.unusable().items() if m in self.models}

    async def check(self) -> tuple[bool, bool, dict[str, bool]]:
        """(ready, triton reachable and ready, readiness per model); always asks Triton."""
        triton = await self.backend.server_ready()
        broken = self.broken()
        models = {m: (await self.backend.model_ready(m)) and m not in broken if triton else False for m in self.models}
        ready = triton and all(models.values())
        self._ready_until = time.monotonic() + self.ttl_s if ready else 0.0
        return ready, triton, models

    async def require(self) -> None:
        broken = self.broken()
        if broken:
            raise errors.unavailable(
                f"The speech service is not ready (failed, being repaired: {', '.join(sorted(broken))}); retry later.",
                self.retry_after_s)
        if time.monotonic() < self._ready_until:
            return
        async with self._lock:  # one check for a burst of requests
            if time.monotonic() < self._ready_until:
                return
            ready, triton, models = await self.check()
        if not ready:
            missing = [m for m, ok in models.items() if not ok]
            what = "Triton is not reachable or not ready" if not triton else f"model(s) not ready: {', '.join(missing)}"
            raise errors.unavailable(f"The speech service is not ready ({what}); retry later.", self.retry_after_s)


class AudioStream:
    """The body of a streaming response; `first` was read before the status line was sent."""

    def __init__(self, plan: SpeechPlan, chunks: AsyncGenerator[SpeechChunk, None], first: SpeechChunk | None,
                 request_id: str, trace: RequestTrace) -> None:
        self.output = plan.output
        self.sse = plan.output.stream == "sse"
        self.media_type = sse.MEDIA_TYPE if self.sse else plan.output.media_type
        self._chunks = chunks
        self._first = first
        self._request_id = request_id
        self._trace = trace
        self.seconds = 0.0  # of audio handed to the body so far (a stream plays at speed 1.0)
        # word_timestamps outside SSE (the WebSocket): called with each sentence's words after its audio.
        self.on_words: Callable[[tuple[Word, ...]], Awaitable[None]] | None = None
        # Why the generation ended: known once the body is over ("error" when it failed, "cancelled" when
        # it was closed before its end), or before it starts when the first chunk is the final one.
        self.finish_reason: str | None = finish_reason(first) if first is None or first.final else None

    async def aclose(self) -> None:
        await self._chunks.aclose()

    async def body(self) -> AsyncIterator[bytes]:
        out = self.output
        enc = encoding.StreamEncoder(out.format, out.source_rate, out.sample_rate)
        usage = Usage()

        def emit(data: bytes) -> bytes:
            return sse.delta(data, out.format) if self.sse else data

        try:
            head = enc.start()
            if self._first is not None:
                head += enc.chunk(self._first.audio)
                usage = self._first.usage
                self.seconds += self._first.audio.size / out.source_rate
            if head:
                yield emit(head)
            reason = self.finish_reason
            async for chunk in self._chunks:
                usage = chunk.usage
                self.seconds += chunk.audio.size / out.source_rate
                if chunk.final:
                    reason = finish_reason(chunk)
                data = enc.chunk(chunk.audio)
                if data:
                    yield emit(data)
                if chunk.words is not None:  # after the audio they time
                    if self.sse:
                        yield sse.timestamps(word_timing.as_wire(chunk.words))
                    elif self.on_words is not None:
                        await self.on_words(chunk.words)
            tail = enc.finish()
            self.finish_reason = reason or FINISH_STOP
            if tail:
                yield emit(tail)
            if self.sse:
                yield sse.done(usage, self.finish_reason)
        except APIError as exc:
            self.finish_reason = FINISH_ERROR
            logger.warning("stream %s failed after it started: %s", self._request_id, exc.message)
            self._trace.fail(exc.status, exc.type)
            if not self.sse:
                raise StreamAborted(exc.message) from None
            detail = exc.body()["error"]
            if exc.status >= 500:
                detail["type"] = "server_error"
            yield sse.error(detail)
        except Exception:
            self.finish_reason = FINISH_ERROR
            logger.exception("stream %s failed after it started", self._request_id)
            internal = errors.internal(self._request_id)
            self._trace.fail(internal.status, internal.type)
            if not self.sse:
                raise StreamAborted("internal error") from None
            body = internal.body()["error"]
            yield sse.error({**body, "type": "server_error"})
        finally:
            if self.finish_reason is None:  # closed before its end (the client went away, input.cancel)
                self.finish_reason = FINISH_CANCELLED
            await self.aclose()


REF_FEATURES_CACHE = 64  # inline reference clips whose features are kept


def admission_limits(settings: Settings) -> AdmissionLimits:
    return AdmissionLimits(model_running=settings.max_running_per_model, model_queued=settings.max_queued_per_model,
                           running=settings.max_running, queued=settings.max_queued,
                           queue_wait_s=settings.max_queue_wait_s, per_key=settings.max_concurrent_per_key,
                           queue_streams=settings.queue_streams)


class SpeechService:
    def __init__(self, deployment: Deployment, backend: InferenceBackend, settings: Settings,
                 metrics: GatewayMetrics) -> None:
        self.deployment = deployment
        self.backend = backend
        self.settings = settings
        self.metrics = metrics
        self.ref_settings = ref_audio_settings(settings)
        self.listings = Listings(deployment)
        self.chunk_rule = word_timing.ChunkRule(settings.word_timestamps_chunk_s, settings.word_timestamps_margin_s)
        needed = settings.triton_models()
        # The backend over the endpoints (gateway.pool) watches each endpoint with its health monitor
        # and says which models none of them can serve.
        pooled: Callable[[], dict[str, str]] | None = getattr(backend, "unusable", None)
        self.endpoints: Callable[[], dict[str, dict[str, Any]]] | None = getattr(backend, "endpoint_status", None)
        # Whether some endpoint serves a speech model now: a replay goes nowhere else (gateway.replay).
        self.serving: Callable[[str], bool] = getattr(backend, "serving", lambda model: True)
        self.readiness = ReadinessMonitor(backend, needed, settings.readiness_ttl_s, settings.retry_after_s, pooled)
        # Every generation takes a slot first (gateway.admission): a full server says no at once.
        self.admission = Admission(admission_limits(settings), [c.name for c in deployment.checkpoints],
                                   settings.retry_after_s)
        metrics.admission = self.admission.snapshot
        # Features of inline reference audio, keyed by its decoded content: a batch or a client that
        # repeats one ref_audio runs the voice_features ensemble once (fetching/decoding still happens).
        self._ref_features: OrderedDict[tuple[str, int, str], asyncio.Future[Any]] = OrderedDict()

    # --- planning and errors ------------------------------------------------------------------

    def plan(self, fields: SpeechFields) -> SpeechPlan:
        return plan_speech(fields, self.deployment)

    def _api_error(self, exc: BackendError, request_id: str) -> APIError:
        if exc.code == UNAVAILABLE:
            self.readiness.invalidate()
        elif exc.code == DEADLINE_EXCEEDED:
            logger.warning("request %s cancelled: %s", request_id, exc.message)
        elif exc.code not in ("INVALID_ARG", "CANCELLED"):
            logger.error("request %s failed in Triton: %s", request_id, exc)
        return errors.from_backend(exc.code, exc.message, exc.param, request_id, self.settings.retry_after_s)

    # --- generation -----------------------------------------------------------------------------

    async def reference_features(self, plan: SpeechPlan, request_id: str) -> Features | None:
        """The reference features the plan's generation takes (None when it takes none), as its
        family's adapter computes them: from the stored voice, or from `ref_audio` fetched, decoded
        and run through the checkpoint's feature model. Callers that speak many texts with one
        reference (the WebSocket session) compute them once."""
        if not plan.needs_voice_features:
            return None
        return await self._voice_features(plan, request_id)

    async def _voice_features(self, plan: SpeechPlan, request_id: str) -> Features:
        try:
            return await plan.checkpoint.adapter.reference_features(plan, _FeatureEnv(self, request_id))
        except InvalidRequest as exc:
            raise errors.bad_request(exc.message, exc.param) from None
        except BackendError as exc:
            raise self._api_error(exc, request_id) from None

    async def shared_features(self, key: tuple[Any, ...], compute: Callable[[], Awaitable[Any]]) -> Any:
        """Features of inline reference audio, computed once for concurrent and recent callers
        with one key (gateway.family.audio_key); failures are not kept."""
        task: asyncio.Future[Any] | None = self._ref_features.get(key)
        if task is None:
            task = asyncio.ensure_future(compute())
            self._ref_features[key] = task
            while len(self._ref_features) > REF_FEATURES_CACHE:
                self._ref_features.popitem(last=False)
        else:
            self._ref_features.move_to_end(key)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            raise  # this caller went away; the shared computation goes on for the others
        except Exception:
            if self._ref_features.get(key) is task:
                del self._ref_features[key]  # failures are not cached
            raise

    async def _segment(self, plan: SpeechPlan, segment: int, request_id: str, features: Features | None,
                       budget: ReplayBudget, text_key: str | None = None) -> AsyncGenerator[SpeechChunk, None]:
        """One generation on Triton: the chunks of segment `segment` of `plan`, until Triton's FINAL one.
        Never waits forever: ends with an APIError when a limit passes (504; each segment of a long
        text has the whole `request_timeout_s`) or a model it needs breaks (503; the health monitor
        aborts it). An open-text generation (`text_key`, incremental text) pauses while it waits for
        text: it has no time limits (the WebSocket session's idle timeout and its cancellation bound it),
        and it is not replayed (its text arrived over time; the client's session holds it, not the plan).

        Replay (gateway.replay): when the generation's Triton fails after chunks were handed on and
        the family is reproducible, the same inputs (seed included) run again while `budget` allows
        and an endpoint serves the model (a failed one is out; none: the error goes on as before),
        on the endpoint the backend picks, and only the samples after those already handed on go on.
        Each chunk of Triton, replayed or not, resets the stall limit."""
        deadline = Deadline(time.monotonic(), self.settings.request_timeout_s, self.settings.stall_timeout_s)
        inputs = plan.generation_inputs(segment, features)
        model = plan.checkpoint.triton_model
        rate = plan.output.source_rate
        cursor = SampleCursor()
        started = False  # chunks were handed on: a failure from now on is a replay's business
        try:
            while True:
                try:
                    async for got in self._attempt(model, inputs, request_id, deadline, text_key):
                        audio = cursor.take(got.audio)
                        if audio.size < got.audio.size:
                            self.metrics.replay_dropped(plan.checkpoint.name, (got.audio.size - audio.size) / rate)
                            if audio.size == 0 and not got.final:
                                continue  # all of it was handed on already
                        if got.final:
                            cursor.finish()
                        started = True
                        yield got if audio.size == got.audio.size else replace(got, audio=audio)
                    return
                except BackendError as exc:
                    if not (started and text_key is None and exc.code in REPLAYABLE and plan.checkpoint.rules.reproducible
                            and self.serving(model) and budget.take()):
                        raise
                    self.metrics.replayed(plan.checkpoint.name)
                    logger.warning("request %s failed on Triton after %.2f s of audio (%s); replaying it with seed %s "
                                   "(replay %d of at most %d)", request_id, cursor.sent / rate, exc, plan.seed,
                                   budget.used, budget.limit)
                    cursor.restart()
        except Diverged as exc:
            logger.error("request %s: replay abandoned: %s", request_id, exc)
            raise self._api_error(BackendError(INTERNAL, "the speech service failed while streaming"),
                                  request_id) from None
        except BackendError as exc:
            raise self._api_error(exc, request_id) from None

    async def _attempt(self, model: str, inputs: dict[str, np.ndarray], request_id: str, deadline: Deadline,
                       text_key: str | None = None) -> AsyncGenerator[SpeechChunk, None]:
        """One Triton stream of a generation, every wait bounded by `deadline` (the stall limit once it
        streams; a replay waits for its first chunk like a new request); an open-text one is unbounded."""
        stream = (self.backend.stream_speech(model, inputs, request_id) if text_key is None
                  else self.backend.stream_speech(model, inputs, request_id, {TEXT_KEY_PARAMETER: text_key}))
        async with aclosing(stream):
            streaming = False
            while True:
                limit, which = deadline.wait_limit(time.monotonic(), streaming)
                try:
                    chunk = await next_within(stream, None if text_key is not None else limit)
                except asyncio.TimeoutError:
                    raise BackendError(DEADLINE_EXCEEDED, deadline.message(which)) from None
                if chunk is END:
                    return
                if chunk.keepalive:  # the model is still working: the stall clock restarts, nothing to send
                    continue
                streaming = True
                yield chunk

    async def _aligned(self, plan: SpeechPlan, segment: int, request_id: str, features: Features | None,
                       budget: ReplayBudget, text_key: str | None = None, said: GrowingText | None = None
                       ) -> AsyncGenerator[SpeechChunk, None]:
        """`_segment`'s chunks; with word timestamps, its final chunk goes on as audio and the words of the
        segment's audio (exactly what went on: replays hand on only new samples) follow as the segment's final
        chunk, with times from the segment's start and char offsets into the request's `input`. Per chunk
        (`chunk_rule`, gateway.word_timing): the words final in a partial alignment go on before, each on a chunk
        of its own (no audio, not final) right after the audio that alignment took, and the final chunk carries the
        rest; a response that is not streamed (a whole file, a batch item) gains nothing from it and is aligned once.
        An incremental generation (`text_key`) is aligned against `said`, its text so far."""
        gen = self._segment(plan, segment, request_id, features, budget, text_key)
        if plan.aligner_model is None:
            async with aclosing(gen):
                async for chunk in gen:
                    yield chunk
            return
        rate = plan.output.source_rate
        rule = self.chunk_rule if plan.output.stream is not None else word_timing.ChunkRule()
        heard: list[np.ndarray] = []
        samples = 0
        sent: tuple[Word, ...] = ()
        aligned_s = 0.0  # audio of the last partial alignment
        last: SpeechChunk | None = None
        async with aclosing(gen):
            async for got in gen:
                heard.append(got.audio)
                samples += got.audio.size
                if got.final:
                    last = got
                    yield replace(got, final=False, finish_reason="")
                    continue
                yield got
                if rule.due(samples / rate, aligned_s):
                    aligned_s = samples / rate
                    words = await self._align(plan, segment, np.concatenate(heard), request_id, said)
                    new = word_timing.settled(words, sent, aligned_s, rule.margin_s, complete=False,
                                              open_text=said is not None and not said.done)
                    if new:
                        sent += new
                        yield SpeechChunk(np.zeros(0, np.float32), 0, got.usage, False, words=new)
        if last is None:
            return
        audio = np.concatenate(heard) if heard else np.zeros(0, np.float32)
        words = await self._align(plan, segment, audio, request_id, said)
        rest = word_timing.settled(words, sent, audio.size / rate, rule.margin_s, complete=True)
        yield replace(last, audio=np.zeros(0, np.float32), frames=0, words=rest)

    async def _align(self, plan: SpeechPlan, segment: int, audio: np.ndarray, request_id: str,
                     said: GrowingText | None = None) -> tuple[Word, ...]:
        """The words of segment `segment` (or of `said`, an incremental generation's text so far) in its `audio`
        (model rate), from the plan's forced aligner. Bounded by `stall_timeout_s` (504); a failure of the aligner
        ends the request (the audio already went out)."""
        assert plan.aligner_model is not None
        rate = plan.output.source_rate
        duration = audio.size / rate
        text = plan.texts[segment] if said is None else said.text
        if not text.strip() or audio.size == 0:
            return ()
        # The audio as the client gets it (16-bit, clipped), so that its words are those of what it hears.
        inputs = word_timing.aligner_inputs(encoding.heard(audio), rate, text,
                                            word_timing.aligner_language(plan.language))
        started = time.monotonic()
        try:
            try:
                outputs = await asyncio.wait_for(self.backend.infer(plan.aligner_model, inputs, f"{request_id}-align"),
                                                 self.settings.stall_timeout_s)
            except asyncio.TimeoutError:
                raise BackendError(DEADLINE_EXCEEDED, f"word alignment took longer than "
                                   f"{self.settings.stall_timeout_s:g} s") from None
            except BackendError as exc:
                if exc.code == "INVALID_ARG":  # the gateway's request, not the client's: never a 400
                    raise BackendError(INTERNAL, f"word alignment refused: {exc.message}") from None
                raise
        except BackendError as exc:
            raise self._api_error(exc, request_id) from None
        self.metrics.aligned(time.monotonic() - started, duration)
        offsets = plan.text_offsets or (0,) * len(plan.texts)
        try:
            return word_timing.sentence_words(outputs, duration, offsets[segment] if said is None else 0)
        except ValueError as exc:
            logger.error("request %s: %s", request_id, exc)
            raise errors.internal(request_id) from None

    def _segments(self, plan: SpeechPlan, request_id: str, features: Features | None, text_key: str | None = None,
                  said: GrowingText | None = None) -> AsyncGenerator[SpeechChunk, None]:
        """Every segment's chunks in order as one stream: usage adds up across segments, and only
        the last segment's final chunk is final; words (on chunks of their own, see `_aligned`) on the request's
        timeline. Triton sees segment i as request `<id>-s<i>`.
        An open-text generation (`text_key`) is one request of the plan's whole text (aligned against `said`).
        The request's replays (max_replays) are shared by its segments; a segment replays alone."""
        count = len(plan.texts)
        budget = ReplayBudget(self.settings.max_replays)
        if text_key is not None:  # its text arrives over time
            return self._aligned(plan, 0, request_id, features, budget, text_key, said)
        if count == 1:
            return self._aligned(plan, 0, request_id, features, budget)

        def maker(i: int) -> Callable[[], AsyncGenerator[SpeechChunk, None]]:
            return lambda: self._aligned(plan, i, f"{request_id}-s{i}", features, budget)

        async def joined() -> AsyncGenerator[SpeechChunk, None]:
            done = Usage()  # of the segments already complete
            last = Usage()
            index = 0
            cut = False  # a segment ended at its frame budget: so did the request ("length")
            sent = start = 0  # samples: heard so far, heard before the current segment
            rate = plan.output.source_rate
            chunks = longtext.ordered([maker(i) for i in range(count)], self.settings.segment_lookahead)
            async with aclosing(chunks):
                async for chunk in chunks:
                    last = chunk.usage
                    final = chunk.final and index == count - 1
                    cut = cut or (chunk.final and chunk.finish_reason == FINISH_LENGTH)
                    reason = (FINISH_LENGTH if cut else finish_reason(chunk)) if final else ""
                    words = None if chunk.words is None else word_timing.shifted(chunk.words, start / rate)
                    yield replace(chunk, usage=done + last, final=final, finish_reason=reason, words=words)
                    sent += chunk.audio.size
                    if chunk.final:
                        done, last, index, start = done + last, Usage(), index + 1, sent

        return joined()

    async def _generate(self, plan: SpeechPlan, request_id: str, features: Features | None, trace: RequestTrace,
                        text_key: str | None = None, said: GrowingText | None = None
                        ) -> AsyncGenerator[SpeechChunk, None]:
        """The request's chunks, every segment's in order (see _segment for the time limits)."""
        # Metered from here: waiting for readiness and the reference features is time to first audio too.
        # A long text is one generation for the metrics, as for its client.
        # Admitted before anything else (and before it is metered): a refusal costs no work.
        ticket = await self.admission.acquire(plan.checkpoint.name, API_KEY_ID.get(), plan.output.stream is not None)
        try:
            meter = self.metrics.generation(plan.checkpoint.name, trace, streamed=plan.output.stream is not None)
        except BaseException:
            ticket.release()
            raise
        if plan.seed_drawn:  # recorded, so that the request can be replayed by anyone
            logger.info("request %s: seed %d drawn by the gateway", request_id, plan.seed)
        reason = FINISH_CANCELLED  # closed before its end (a BaseException: the consumer went away)
        try:
            await self.readiness.require()
            if plan.needs_voice_features and features is None:
                # Once for every segment, within the request's time limit.
                deadline = Deadline(time.monotonic(), self.settings.request_timeout_s, self.settings.stall_timeout_s)
                try:
                    features = await asyncio.wait_for(self._voice_features(plan, request_id),
                                                      deadline.remaining(time.monotonic()))
                except asyncio.TimeoutError:
                    raise self._api_error(BackendError(DEADLINE_EXCEEDED, deadline.message(TOTAL)), request_id) from None
            stream = self._segments(plan, request_id, features, text_key, said)
            last: SpeechChunk | None = None
            async with aclosing(stream):
                async for got in stream:
                    meter.audio(got.audio.size / plan.output.source_rate)
                    last = got
                    yield got
            meter.completed()
            reason = finish_reason(last)
        except Exception:
            reason = FINISH_ERROR
            raise
        finally:
            meter.close(reason)
            ticket.release()

    async def synthesize(self, plan: SpeechPlan, request_id: str, features: Features | None = None, *,
                         trace: RequestTrace) -> Clip:
        parts: list[np.ndarray] = []
        usage = Usage()
        words: list[Word] | None = None if plan.aligner_model is None else []
        last: SpeechChunk | None = None
        gen = self._generate(plan, request_id, features, trace)
        async with aclosing(gen):
            async for chunk in gen:
                parts.append(chunk.audio)
                usage = chunk.usage
                if chunk.words is not None and words is not None:
                    words.extend(chunk.words)
                last = chunk
        pcm = np.concatenate(parts) if parts else np.zeros(0, np.float32)
        out = plan.output
        audio = await asyncio.to_thread(encoding.render, pcm, out.source_rate, out.format, out.sample_rate, out.speed)
        timed = None if words is None else word_timing.at_speed(words, out.speed)
        return Clip(audio, out.media_type, usage, finish_reason(last), timed, pcm.size / out.source_rate / out.speed)

    async def open_stream(self, plan: SpeechPlan, request_id: str, features: Features | None = None, *,
                          trace: RequestTrace, text_key: str | None = None, said: GrowingText | None = None
                          ) -> AudioStream:
        """The request's audio stream, once its first chunk came. `text_key`: the generation's text is
        a beginning (incremental text, the WebSocket): `extend_text` with the key gives the rest, and `said`
        holds the text so far (its words, with word timestamps, index it)."""
        gen = self._generate(plan, request_id, features, trace, text_key, said)
        try:
            first: SpeechChunk | None = await gen.__anext__()
        except StopAsyncIteration:
            first = None
        except BaseException:
            await gen.aclose()
            raise
        return AudioStream(plan, gen, first, request_id, trace)

    async def extend_text(self, plan: SpeechPlan, request_id: str, text_key: str, text: str, done: bool) -> None:
        """More text for the open generation of `text_key` (done: its text is complete), applied by
        the same Triton model instance; APIError when Triton refuses it."""
        inputs = {"text": np.array([text.encode("utf-8")], dtype=np.object_)}
        params: dict[str, Any] = {TEXT_EXTEND_PARAMETER: text_key, TEXT_DONE_PARAMETER: done}
        stream = self.backend.stream_speech(plan.checkpoint.triton_model, inputs, request_id, params)
        try:
            async with aclosing(stream):
                async for _ in stream:
                    pass
        except BackendError as exc:
            raise self._api_error(exc, request_id) from None

    # --- batch ---------------------------------------------------------------------------------

    async def batch(self, request: Any, request_id: str, trace: RequestTrace) -> dict[str, Any]:
        """`request` is a protocol.BatchSpeechRequest; each item is a generation of the request `trace`
        follows, and each failed item an error on it."""
        items = list(request.items)
        limit = self.settings.batch_max_items
        if len(items) > limit:
            raise errors.bad_request(f"A batch holds at most {limit} items, got {len(items)}", "items")
        if request.model is not None and not self.deployment.knows_model(request.model):
            raise errors.model_not_found(request.model)

        async def one(index: int, item: Any) -> dict[str, Any]:
            item_id = f"{request_id}-{index}"
            try:
                plan = self.plan(request.item_fields(item))
                clip = await self.synthesize(plan, item_id, trace=trace)
            except APIError as exc:
                trace.fail(exc.status, exc.type)
                return {"index": index, "status": "error", "error": exc.message, "finish_reason": FINISH_ERROR}
            except Exception:
                logger.exception("batch item %s failed", item_id)
                internal = errors.internal(item_id)
                trace.fail(internal.status, internal.type)
                return {"index": index, "status": "error", "error": internal.message, "finish_reason": FINISH_ERROR}
            return {
                "index": index,
                "status": "success",
                "audio_data": base64.b64encode(clip.audio).decode("ascii"),
                "media_type": clip.media_type,
                "usage": clip.usage.as_dict(),
                "finish_reason": clip.finish_reason,
                **({} if clip.words is None else {"timestamps": word_timing.as_wire(clip.words)}),
            }

        with self.admission.patient():  # its items wait their turn in the queue, without the queue-time bound
            results = await asyncio.gather(*(one(i, item) for i, item in enumerate(items)))
        succeeded = sum(r["status"] == "success" for r in results)
        return {
            "id": f"speech-batch-{uuid.uuid4().hex}",
            "results": results,
            "total": len(results),
            "succeeded": succeeded,
            "failed": len(results) - succeeded,
        }
