"""Prometheus metrics of the gateway (GET /metrics): one CollectorRegistry per app, no global state.

The interface the rest of the gateway uses is small:
- `MetricsMiddleware` (installed by create_app) gives every HTTP request and WebSocket connection a
  `RequestTrace` (`trace_of(scope)`) and counts the request when its response is over;
- `GatewayMetrics.requested(trace, model)` records the `model` a request named (routers);
- `GatewayMetrics.generation(model, trace, streamed)` meters one speech generation (one Triton
  speech request): the service calls `audio()` per chunk, `completed()` after the FINAL chunk and
  `close()` in every case;
- `GatewayMetrics.replayed(model)` / `replay_dropped(model, seconds)`: a generation run again after
  its Triton failed mid-stream, and the audio it generated again and dropped (gateway.replay);
- `RequestTrace.fail(status, cause)` records an error the client was told about (the HTTP error
  renderer, the SSE error event, batch items, WebSocket requests);
- `GatewayMetrics.aligned(seconds, audio_seconds)`: one forced alignment (word timestamps, gateway.word_timing)
  of a sentence's audio took `seconds`;
- `GatewayMetrics.finished(trace, status, client_gone)` counts a request (the middleware; the
  WebSocket session per TTS request).

Labels are bounded: `route` is a route template (or "other"), `status` an HTTP status, `model` a
served model id or one of MODEL_UNKNOWN / MODEL_MIXED / MODEL_NONE, `cause` an API error type
(gateway.errors). Request ids, texts and voice names never become labels.

Time to first audio and the real-time factor are measured from the request's receipt (the
middleware's first sight of it; for a WebSocket request, the arrival of the message that completed
its text). Audio seconds are the model's output (before a `speed` change). The README's
"Operations" section has the table of metrics.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .admission import REASONS, ModelLoad
from .backend import EndpointStats

TRACE_KEY = "gateway.trace"
ROUTE_OTHER = "other"  # a path no route matches
MODEL_UNKNOWN = "unknown"  # the request named a model that is not served
MODEL_MIXED = "mixed"  # a batch whose items ran on several models
MODEL_NONE = "none"  # no model: the route generates no speech, or the request failed before routing
# The client went away before the response started (nginx's convention): nobody saw a status.
STATUS_CLIENT_GONE = 499

TTFA_BUCKETS = (0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0)
ALIGN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0)
RTF_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)


class PlaybackClock:
    """Would a client playing a stream as it arrives have run out of audio? (pure)

    The client starts playing when the first audio arrives and plays in real time; when its buffer
    runs dry it resumes as soon as more audio arrives. A chunk handed over at `at` is an underrun
    when the buffer was already dry: the gap since the previous chunk was longer than the audio
    sent so far minus the audio played, i.e. `at` is past the moment the buffer ran out.
    """

    def __init__(self) -> None:
        self._dry_at: float | None = None  # when the client's buffer runs out

    def chunk(self, at: float, seconds: float) -> bool:
        """A chunk of `seconds` of audio handed to the client at time `at`; True: an underrun."""
        if self._dry_at is None:
            self._dry_at = at + seconds
            return False
        underrun = at > self._dry_at
        self._dry_at = max(self._dry_at, at) + seconds
        return underrun


@dataclass
class RequestTrace:
    """What the metrics learn about one request (an HTTP request or one WebSocket TTS request)."""

    route: str
    received_at: float = field(default_factory=time.monotonic)
    requested_model: str | None = None  # the label of the `model` the request named
    models: set[str] = field(default_factory=set)  # the served models its generations ran on
    errors: list[str] = field(default_factory=list)  # causes of the errors its client was told about
    status: int | None = None  # of a failure (WebSocket requests), or of a refused WebSocket connection

    def fail(self, status: int, cause: str) -> None:
        self.errors.append(cause)
        self.status = status

    def model_label(self) -> str:
        if len(self.models) == 1:
            return next(iter(self.models))
        if self.models:
            return MODEL_MIXED
        return self.requested_model or MODEL_NONE


def trace_of(scope: Scope) -> RequestTrace:
    """The trace MetricsMiddleware put in the request's scope."""
    return cast(RequestTrace, scope[TRACE_KEY])


class GatewayMetrics:
    """Every metric of one app, in its own registry."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, models: Sequence[str], resolve_model: Callable[[str], str | None],
                 uploaded_voices: Callable[[], int]) -> None:
        """`models`: the served model ids; `resolve_model`: a `model` field -> the id it names (None:
        not served); `uploaded_voices`: the voice store's size, asked at every scrape."""
        self.registry = CollectorRegistry()
        self._resolve = resolve_model
        r = self.registry
        self.requests = Counter(
            "tts_requests", "HTTP requests, and WebSocket TTS requests, by route template, status and model",
            ["route", "status", "model"], registry=r)
        self.ttfa = Histogram(
            "tts_time_to_first_audio_seconds",
            "Seconds from a request's receipt to its first audio produced (one per speech generation)",
            ["model"], buckets=TTFA_BUCKETS, registry=r)
        self.rtf = Histogram(
            "tts_real_time_factor",
            "Processing seconds (receipt to the last chunk) divided by the audio seconds produced, per completed "
            "generation; below 1 is faster than real time",
            ["model"], buckets=RTF_BUCKETS, registry=r)
        self.audio_seconds = Counter(
            "tts_audio_seconds", "Seconds of audio the model produced (before any speed change)", ["model"],
            registry=r)
        self.active = Gauge(
            "tts_active_requests", "Speech generations in progress (including the queued ones)", ["model"],
            registry=r)
        self.queued = Gauge(
            "tts_queued_requests",
            "Speech generations accepted but without audio yet (reference audio, Triton's queue, first frames)",
            ["model"], registry=r)
        self.underruns = Counter(
            "tts_stream_underruns",
            "Streamed chunks that arrived after a client playing the stream in real time would have run out of "
            "audio", ["model"], registry=r)
        self.replays = Counter(
            "tts_replayed_requests",
            "Generations run again on another Triton after theirs failed with audio already out (gateway.replay); "
            "a request replayed twice counts twice", ["model"], registry=r)
        self.replayed_audio = Counter(
            "tts_replayed_audio_seconds",
            "Seconds of audio generated again by replays and dropped (the client already had them): a replay's "
            "extra cost", ["model"], registry=r)
        self.cancelled = Counter(
            "tts_cancelled_requests",
            "Requests whose client went away (or sent a WebSocket input.cancel) before the response was complete "
            "(their Triton work is cancelled)",
            ["route"], registry=r)
        self.text_to_audio = Histogram(
            "tts_ws_first_text_to_audio_seconds",
            "WebSocket: seconds from an utterance's first input.text to its first audio frame sent, by the "
            "split_granularity in effect (none, sentence, clause, incremental)",
            ["split_granularity"], buckets=TTFA_BUCKETS, registry=r)
        self.finish_reasons = Counter(
            "tts_generation_finish_reasons",
            "Speech generations by why they ended: stop (the model ended it), length (max_new_tokens or the runaway "
            "guard), cancelled (the client went away or cancelled), error (it failed); a raw stream's is here",
            ["model", "reason"], registry=r)
        self.alignment = Histogram(
            "tts_alignment_seconds",
            "Seconds one forced alignment (word timestamps) of a sentence's audio took, the Triton call included",
            buckets=ALIGN_BUCKETS, registry=r)
        self.aligned_audio = Counter(
            "tts_aligned_audio_seconds", "Seconds of audio the forced aligner timed words in", registry=r)
        self.errors = Counter(
            "tts_errors", "Errors a client was told about (status, SSE/WebSocket error, batch item), by API error type",
            ["cause"], registry=r)
        # The Triton endpoints of a pool (gateway.pool), asked at every scrape; set by the app.
        self.endpoints: Callable[[], list[EndpointStats]] | None = None
        r.register(_EndpointCollector(self))
        # Admission control's load per model (gateway.admission.Admission.snapshot), asked at every scrape.
        self.admission: Callable[[], Mapping[str, ModelLoad]] | None = None
        r.register(_AdmissionCollector(self))
        voices = Gauge("tts_uploaded_voices", "Voices in the uploaded-voice store", registry=r)
        voices.set_function(lambda: float(uploaded_voices()))
        for model in models:  # the series exist (at 0) before the first request
            for metric in (self.ttfa, self.rtf, self.audio_seconds, self.active, self.queued, self.underruns,
                           self.replays, self.replayed_audio):
                metric.labels(model)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def model_label(self, model: str) -> str:
        return self._resolve(model) or MODEL_UNKNOWN

    def requested(self, trace: RequestTrace, model: str | None) -> None:
        """The request named `model` (None: it named none)."""
        trace.requested_model = self.model_label(model) if model is not None else None

    def generation(self, model: str, trace: RequestTrace, streamed: bool) -> Generation:
        """Meter one generation of served model `model`; `streamed`: its chunks go out as they come."""
        label = self.model_label(model)
        trace.models.add(label)
        return Generation(self, label, trace.received_at, streamed)

    def first_text_to_audio(self, split_granularity: str, seconds: float) -> None:
        self.text_to_audio.labels(split_granularity).observe(seconds)

    def replayed(self, model: str) -> None:
        """A generation of served model `model` is run again (gateway.replay)."""
        self.replays.labels(self.model_label(model)).inc()

    def replay_dropped(self, model: str, seconds: float) -> None:
        """A replay of served model `model` generated `seconds` of audio the client already had."""
        if seconds > 0:
            self.replayed_audio.labels(self.model_label(model)).inc(seconds)

    def aligned(self, seconds: float, audio_seconds: float) -> None:
        """One forced alignment of `audio_seconds` of audio took `seconds`."""
        self.alignment.observe(seconds)
        self.aligned_audio.inc(audio_seconds)

    def finished(self, trace: RequestTrace, status: int, client_gone: bool = False) -> None:
        self.requests.labels(trace.route, str(status), trace.model_label()).inc()
        for cause in trace.errors:
            self.errors.labels(cause).inc()
        if client_gone:
            self.cancelled.labels(trace.route).inc()


class _EndpointCollector(Collector):
    """Per Triton endpoint: requests started, failures by error code, requests in flight, in service.
    `endpoint` is an address:port (one per Triton pod: bounded by the pods a gateway has seen)."""

    def __init__(self, metrics: GatewayMetrics) -> None:
        self.metrics = metrics

    def describe(self) -> list[Metric]:
        return []  # no fixed series: they follow the endpoints

    def collect(self) -> list[Metric]:
        source = self.metrics.endpoints
        stats = source() if source is not None else []
        requests = CounterMetricFamily("tts_triton_endpoint_requests", "Triton requests started on an endpoint "
                                       "(speech streams, voice features; a retried request counts on each)",
                                       labels=["endpoint", "model"])
        errors = CounterMetricFamily("tts_triton_endpoint_errors", "Triton requests that failed on an endpoint, "
                                     "by error code (client cancellations are not failures)",
                                     labels=["endpoint", "model", "code"])
        outstanding = GaugeMetricFamily("tts_triton_endpoint_outstanding", "Triton requests in flight on an endpoint",
                                        labels=["endpoint", "model"])
        up = GaugeMetricFamily("tts_triton_endpoint_up", "1 while an endpoint takes new requests, 0 while it is out",
                               labels=["endpoint"])
        for ep in stats:
            up.add_metric([ep.endpoint], 1.0 if ep.up else 0.0)
            for model, n in sorted(ep.requests.items()):
                requests.add_metric([ep.endpoint, model], float(n))
            for (model, code), n in sorted(ep.errors.items()):
                errors.add_metric([ep.endpoint, model, code], float(n))
            for model, n in sorted(ep.outstanding.items()):
                outstanding.add_metric([ep.endpoint, model], float(n))
        return [requests, errors, outstanding, up]


class _AdmissionCollector(Collector):
    """Admission control per served model: generations running and queued in the gateway, refusals by reason."""

    def __init__(self, metrics: GatewayMetrics) -> None:
        self.metrics = metrics

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> list[Metric]:
        source = self.metrics.admission
        loads = source() if source is not None else {}
        running = GaugeMetricFamily("tts_admission_running", "Generations admitted and running (gateway.admission)",
                                    labels=["model"])
        queued = GaugeMetricFamily("tts_admission_queued", "Generations waiting in the gateway's queue for a slot",
                                   labels=["model"])
        refused = CounterMetricFamily("tts_admission_refused", "Generations refused before any work: queue_full "
                                      "(503), no_slot (503: a stream, not queued), queue_estimate (503), queue_timeout (503), key_limit (429)",
                                      labels=["model", "reason"])
        for model, load in sorted(loads.items()):
            running.add_metric([model], float(load.running))
            queued.add_metric([model], float(load.queued))
            for reason in REASONS:
                refused.add_metric([model, reason], float(load.refused.get(reason, 0)))
        return [running, queued, refused]


class Generation:
    """One speech generation: TTFA, RTF, audio seconds, underruns and the active/queued gauges."""

    def __init__(self, metrics: GatewayMetrics, model: str, received_at: float, streamed: bool,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._m = metrics
        self._model = model
        self._received_at = received_at
        self._clock = clock
        self._playback = PlaybackClock() if streamed else None  # a whole clip cannot underrun
        self._seconds = 0.0
        self._first = False
        self._closed = False
        metrics.active.labels(model).inc()
        metrics.queued.labels(model).inc()

    def audio(self, seconds: float) -> None:
        """A chunk of `seconds` of audio, handed on as it arrived."""
        if seconds <= 0:  # an empty (final) response is no audio
            return
        now = self._clock()
        model = self._model
        if not self._first:
            self._first = True
            self._m.ttfa.labels(model).observe(now - self._received_at)
            self._m.queued.labels(model).dec()
        self._m.audio_seconds.labels(model).inc(seconds)
        if self._playback is not None and self._playback.chunk(now, seconds):
            self._m.underruns.labels(model).inc()
        self._seconds += seconds

    def completed(self) -> None:
        """The FINAL chunk arrived: every chunk was produced."""
        if self._seconds > 0:
            self._m.rtf.labels(self._model).observe((self._clock() - self._received_at) / self._seconds)

    def close(self, finish_reason: str | None = None) -> None:
        """The generation is over, however it ended (idempotent); `finish_reason`: why (counted)."""
        if self._closed:
            return
        self._closed = True
        if finish_reason is not None:
            self._m.finish_reasons.labels(self._model, finish_reason).inc()
        self._m.active.labels(self._model).dec()
        if not self._first:
            self._m.queued.labels(self._model).dec()


def route_template(routes: Iterable[BaseRoute], scope: Scope) -> str:
    """The path template of the route `scope` goes to (a wrong method still names it)."""
    for route in routes:
        match, _ = route.matches(scope)
        if match is not Match.NONE:
            return str(getattr(route, "path", ROUTE_OTHER))
    return ROUTE_OTHER


class MetricsMiddleware:
    """Traces every request and counts it when its response is over.

    HTTP: the status is the one sent (STATUS_CLIENT_GONE when none was); the client went away when
    it disconnected (an `http.disconnect` seen by the app, or a failed send) before the last body
    chunk. WebSocket: connections are not requests; each TTS request of a session is counted by the
    session, and a connection refused at the handshake (trace.status set) is counted here.
    """

    def __init__(self, app: ASGIApp, metrics: GatewayMetrics, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self.metrics = metrics
        self.routes = routes
        self._fixed: dict[str, str] = {}  # path -> its route's template, for routes without parameters

    def template(self, scope: Scope) -> str:
        """route_template, remembered per path for the routes without path parameters (a bounded set)."""
        path = scope.get("path", "")
        known = self._fixed.get(path)
        if known is not None:
            return known
        template = route_template(self.routes, scope)
        if template != ROUTE_OTHER and "{" not in template:
            self._fixed[path] = template
        return template

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        trace = RequestTrace(self.template(scope))
        scope[TRACE_KEY] = trace
        if scope["type"] == "websocket":
            await self.app(scope, receive, send)
            if trace.status is not None:
                self.metrics.finished(trace, trace.status)
            return
        status: int | None = None
        complete = gone = False

        async def receive_watching() -> Message:
            nonlocal gone
            message = await receive()
            if message["type"] == "http.disconnect":
                gone = True
            return message

        async def send_watching(message: Message) -> None:
            nonlocal status, complete, gone
            if message["type"] == "http.response.start":
                status = int(message["status"])
            try:
                await send(message)
            except OSError:
                gone = True
                raise
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                complete = True

        try:
            await self.app(scope, receive_watching, send_watching)
        finally:
            client_gone = gone and not complete
            if status is None:
                status = STATUS_CLIENT_GONE if client_gone else 500
            self.metrics.finished(trace, status, client_gone)
