"""Per-step metrics of the speech_generation model, published on Triton's metrics port (:8002).

Two halves, so the step loop never waits on Triton:
- `GenerationMetrics`: what the GenerationScheduler reports into (batch size and time of every step,
  prefill time of every admitted request, pending/active load, how each request ended). Pure,
  in-memory and thread-safe; it is also the recording implementation unit tests read. `NullMetrics`
  is the no-op for code that does not care.
- `TritonMetricsPublisher`: a background thread that copies what accumulated into Triton's custom
  metrics API (`pb_utils.MetricFamily` / `.Metric`) every `interval_s`. The pb_utils module is passed
  in (model.py owns the import), so this module stays importable and testable without Triton.

Why a publisher thread rather than calling pb_utils in the step loop: every metric operation is a
synchronous IPC round trip from the stub to the server process (about 20 us measured on 2.51, more
when the server is busy), and a scrape can wait up to `interval_s` for fresh values at no cost.

Facts about Triton 2.51's python backend (python_backend r24.10; verified against the real server
that ships in nvidia-pytriton 0.7.0, see the module tests):
- COUNTER, GAUGE and HISTOGRAM are supported (HISTOGRAM since r24.09, `Metric(labels, buckets)`,
  `observe(value)`); a counter cannot be `set` or decremented, a histogram has no `value()`.
- Buckets that are not strictly increasing make tritonserver abort (boost lock_exception), and so
  does a SECOND failed metric operation of a stub: the first failure returns an exception, the next
  one takes the whole server down. Hence buckets are checked here, values are sanitised before they
  are sent, and the first pb_utils error disables publishing for the life of the stub.
- A family name is global to the server (same name + same kind = the same family, so every
  speech_generation model shares each family and is told apart by labels; a different kind fails).
  Families are never removed from the registry, and metrics of a killed stub stay registered, so a
  restarted instance continues the same counters; its gauges are reset to 0 on start.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

log = logging.getLogger(__name__)

COUNTER, GAUGE, HISTOGRAM = "counter", "gauge", "histogram"

# How a request ended. Exactly one per request that reached the model:
#   completed: its final chunk was sent
#   cancelled: the client cancelled it, or went away (a send failed)
#   rejected:  refused before generation: queue full, shutting down, invalid request
#   failed:    an internal error, or the server shut down while it was generating
OUTCOMES = ("completed", "cancelled", "rejected", "failed")


@dataclass(frozen=True)
class MetricSpec:
    name: str
    kind: str
    description: str
    buckets: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in (COUNTER, GAUGE, HISTOGRAM):
            raise ValueError(f"{self.name}: unknown metric kind {self.kind!r}")
        if (self.kind == HISTOGRAM) != bool(self.buckets):
            raise ValueError(f"{self.name}: buckets are required for histograms and only for them")
        # Triton 2.51 aborts the server on unsorted buckets: refuse them here, at import time.
        if any(not math.isfinite(b) for b in self.buckets) or any(
            b >= c for b, c in zip(self.buckets, self.buckets[1:], strict=False)
        ):
            raise ValueError(f"{self.name}: buckets must be finite and strictly increasing")


BATCH_SIZE = MetricSpec(
    "tts_generation_batch_size",
    HISTOGRAM,
    "Requests advanced together by one generator step (continuous batching); the count is the number of steps",
    (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64),
)
STEP_SECONDS = MetricSpec(
    "tts_generation_step_seconds",
    HISTOGRAM,
    "Wall time of one generator step: one frame for every active request plus vocoding the chunks that became ready",
    (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)
PREFILL_SECONDS = MetricSpec(
    "tts_generation_prefill_seconds",
    HISTOGRAM,
    "Wall time to admit one request into the batch: validation, prompt and reference codes (its talker prefill "
    "runs batched with other joins inside the next steps)",
    (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
STEP_OUTSIDE_SECONDS = MetricSpec(
    "tts_generation_step_outside_model_seconds",
    HISTOGRAM,
    "Wall time of one generator step spent outside model calls (ONNX Runtime sessions, an out-of-process vocoder): "
    "the engine's own per-step work; compare with tts_generation_step_seconds",
    (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5),
)
KV_BYTES = MetricSpec("tts_generation_kv_arena_bytes", GAUGE, "Bytes held by the preallocated KV arena of the batch")
PENDING = MetricSpec(
    "tts_generation_pending_requests", GAUGE, "Requests accepted and waiting for a slot in the running batch"
)
ACTIVE = MetricSpec("tts_generation_active_requests", GAUGE, "Requests in the running batch")
WAITING = MetricSpec(
    "tts_generation_waiting_for_text_requests", GAUGE,
    "Requests of the running batch that have used all their text and wait for more (incremental text): they hold "
    "their slot but are not stepped",
)
TEXT_WAIT_SECONDS = MetricSpec(
    "tts_generation_text_wait_seconds",
    HISTOGRAM,
    "How long a request waited for more text (incremental text), per wait",
    (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
REQUESTS = MetricSpec(
    "tts_generation_requests_total",
    COUNTER,
    "Requests that ended, by outcome (completed, cancelled, rejected, failed)",
)
SPECS = (BATCH_SIZE, STEP_SECONDS, PREFILL_SECONDS, STEP_OUTSIDE_SECONDS, PENDING, ACTIVE, KV_BYTES, REQUESTS,
         WAITING, TEXT_WAIT_SECONDS)


class SchedulerMetrics(Protocol):
    """What the GenerationScheduler reports. Calls must be cheap and must never raise."""

    def step(self, batch_size: int, seconds: float) -> None: ...

    def prefill(self, seconds: float) -> None: ...

    def load(self, pending: int, active: int) -> None: ...

    def profile(self, outside_seconds: float, kv_bytes: int) -> None: ...

    def finished(self, outcome: str) -> None: ...

    def text_waits(self, waiting: int, waits: Sequence[float]) -> None: ...


class NullMetrics:
    """Reports nothing (the scheduler's default)."""

    def step(self, batch_size: int, seconds: float) -> None:
        pass

    def prefill(self, seconds: float) -> None:
        pass

    def load(self, pending: int, active: int) -> None:
        pass

    def profile(self, outside_seconds: float, kv_bytes: int) -> None:
        pass

    def finished(self, outcome: str) -> None:
        pass

    def text_waits(self, waiting: int, waits: Sequence[float]) -> None:
        pass


@dataclass
class MetricsDelta:
    """What accumulated since the previous drain (what a publisher sends)."""

    counts: dict[str, int] = field(default_factory=dict)  # outcome -> requests that ended so
    gauges: dict[str, float] = field(default_factory=dict)  # spec name -> latest value
    observations: dict[str, list[float]] = field(default_factory=dict)  # histogram name -> values
    dropped: int = 0  # observations discarded because nobody drained them in time


class GenerationMetrics:
    """The in-memory side: running totals (for tests and logs) plus a delta buffer for publishing.

    Observations are buffered only up to `max_buffered` per histogram between drains, so a stalled
    or disabled publisher cannot grow memory without bound (totals stay exact)."""

    def __init__(self, max_buffered: int = 10_000) -> None:
        self.max_buffered = max_buffered
        self._lock = threading.Lock()
        self.outcomes: dict[str, int] = dict.fromkeys(OUTCOMES, 0)
        self.steps = 0
        self.frames = 0  # sum of batch sizes: one codec frame per request per step
        self.step_seconds = 0.0
        self.prefills = 0
        self.prefill_seconds = 0.0
        self.pending = 0
        self.active = 0
        self.max_batch_size = 0
        self.outside_seconds = 0.0
        self.kv_bytes = 0
        self.waiting = 0
        self.text_wait_seconds = 0.0
        self._delta = MetricsDelta()

    # --- SchedulerMetrics -----------------------------------------------------------------------

    def step(self, batch_size: int, seconds: float) -> None:
        with self._lock:
            self.steps += 1
            self.frames += batch_size
            self.step_seconds += seconds
            self.max_batch_size = max(self.max_batch_size, batch_size)
            self._observe(BATCH_SIZE.name, float(batch_size))
            self._observe(STEP_SECONDS.name, seconds)

    def prefill(self, seconds: float) -> None:
        with self._lock:
            self.prefills += 1
            self.prefill_seconds += seconds
            self._observe(PREFILL_SECONDS.name, seconds)

    def load(self, pending: int, active: int) -> None:
        with self._lock:
            self.pending, self.active = pending, active
            self._delta.gauges[PENDING.name] = float(pending)
            self._delta.gauges[ACTIVE.name] = float(active)

    def profile(self, outside_seconds: float, kv_bytes: int) -> None:
        with self._lock:
            self.outside_seconds += outside_seconds
            self.kv_bytes = kv_bytes
            self._observe(STEP_OUTSIDE_SECONDS.name, outside_seconds)
            self._delta.gauges[KV_BYTES.name] = float(kv_bytes)

    def finished(self, outcome: str) -> None:
        if outcome not in self.outcomes:  # a caller bug must not become a new label value
            log.error("unknown request outcome %r counted as failed", outcome)
            outcome = "failed"
        with self._lock:
            self.outcomes[outcome] += 1
            self._delta.counts[outcome] = self._delta.counts.get(outcome, 0) + 1

    def text_waits(self, waiting: int, waits: Sequence[float]) -> None:
        """Requests waiting for text now, and the waits that ended (seconds each)."""
        with self._lock:
            self.waiting = waiting
            self.text_wait_seconds += sum(waits)
            self._delta.gauges[WAITING.name] = float(waiting)
            for w in waits:
                self._observe(TEXT_WAIT_SECONDS.name, w)

    # --- publishing -----------------------------------------------------------------------------

    def _observe(self, name: str, value: float) -> None:
        values = self._delta.observations.setdefault(name, [])
        if len(values) >= self.max_buffered:
            self._delta.dropped += 1
        else:
            values.append(value)

    def drain(self) -> MetricsDelta:
        with self._lock:
            delta, self._delta = self._delta, MetricsDelta()
        return delta


def model_labels(args: Mapping[str, Any]) -> dict[str, str]:
    """Labels of one model instance from the python backend's initialize() args. `instance` keeps
    the gauges of several instances of one model apart (each has its own batch)."""
    return {
        "model": str(args.get("model_name", "speech_generation")),
        "version": str(args.get("model_version", "1")),
        "instance": str(args.get("model_instance_name", "")),
    }


def _finite(values: Sequence[float], non_negative: bool = True) -> list[float]:
    return [v for v in values if math.isfinite(v) and (v >= 0 or not non_negative)]


class TritonMetricsPublisher:
    """Copies a GenerationMetrics into Triton's custom metrics every `interval_s` (a daemon thread).

    Never raises into the model: if a family or metric cannot be created, or any later operation
    fails, it logs once and stops touching pb_utils (see the module docstring for why a second
    failure must never happen). `close()` publishes what is left and releases the metrics before
    their families, the order Triton requires."""

    def __init__(
        self,
        pb_utils: Any,
        metrics: GenerationMetrics,
        labels: Mapping[str, str],
        interval_s: float = 0.5,
    ) -> None:
        self.pb_utils = pb_utils
        self.metrics = metrics
        self.labels = dict(labels)
        self.interval_s = interval_s
        self.enabled = False
        self.published = 0  # successful flushes (tests and logs)
        self._families: dict[str, Any] = {}
        self._metrics: dict[tuple[str, str], Any] = {}  # (spec name, outcome or "") -> pb_utils Metric
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._flush_lock = threading.Lock()
        self._warned_dropped = False
        try:
            self._create()
            self.enabled = True
        except Exception:
            log.exception("custom metrics unavailable; speech_generation runs without them")
            self._release()

    @classmethod
    def for_model(cls, pb_utils: Any, args: Mapping[str, Any], interval_s: float = 0.5) -> TritonMetricsPublisher:
        return cls(pb_utils, GenerationMetrics(), model_labels(args), interval_s)

    def _create(self) -> None:
        kinds = {
            COUNTER: self.pb_utils.MetricFamily.COUNTER,
            GAUGE: self.pb_utils.MetricFamily.GAUGE,
            HISTOGRAM: self.pb_utils.MetricFamily.HISTOGRAM,
        }
        for spec in SPECS:
            family = self.pb_utils.MetricFamily(name=spec.name, description=spec.description, kind=kinds[spec.kind])
            self._families[spec.name] = family
            if spec.kind == HISTOGRAM:
                self._metrics[(spec.name, "")] = family.Metric(
                    labels=self.labels, buckets=[float(b) for b in spec.buckets]
                )
            elif spec is REQUESTS:
                for outcome in OUTCOMES:  # every outcome from 0, so rates exist before the first event
                    self._metrics[(spec.name, outcome)] = family.Metric(labels={**self.labels, "outcome": outcome})
            else:
                metric = family.Metric(labels=self.labels)
                metric.set(0.0)  # a restarted instance must not show its predecessor's load
                self._metrics[(spec.name, "")] = metric

    def start(self) -> None:
        if not self.enabled:
            return
        self._thread = threading.Thread(target=self._run, name="speech-generation-metrics", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.flush()

    def flush(self) -> bool:
        """Publish what accumulated; False when publishing is disabled or just failed."""
        with self._flush_lock:
            if not self.enabled:
                self.metrics.drain()  # keep the buffer bounded even when nothing is published
                return False
            delta = self.metrics.drain()
            try:
                self._publish(delta)
            except Exception:
                # The next failure could abort tritonserver: never call pb_utils metrics again.
                self.enabled = False
                log.exception("publishing custom metrics failed; they are disabled for this instance")
                return False
            self.published += 1
            return True

    def _publish(self, delta: MetricsDelta) -> None:
        if delta.dropped and not self._warned_dropped:
            self._warned_dropped = True
            log.warning("%d metric observations were dropped (publisher too slow)", delta.dropped)
        for outcome, n in delta.counts.items():
            if n > 0:
                self._metrics[(REQUESTS.name, outcome)].increment(float(n))
        for name, value in delta.gauges.items():
            if math.isfinite(value):
                self._metrics[(name, "")].set(float(value))
        for name, values in delta.observations.items():
            metric = self._metrics[(name, "")]
            for value in _finite(values):
                metric.observe(float(value))

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the thread, publish the remainder, release metrics then families."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self.flush()
        self._release()

    def _release(self) -> None:
        self.enabled = False
        # Triton requires every Metric to be deleted before its MetricFamily.
        self._metrics.clear()
        self._families.clear()
