"""Per-step metrics of speech_generation (ttscore/backend/triton_metrics.py).

- unit: what the GenerationScheduler reports for every way a request ends, per step and per prefill;
- models: the publisher under the recording pb_utils fake, which behaves like Triton 2.51 (a second
  failed metric operation or unsorted buckets abort the real server: the fake raises ServerAborted);
- integration: the production model.py (FakeGenerator inside) in the real tritonserver, read back
  from its metrics port after known requests.
"""

from __future__ import annotations

import math
import queue
import re
import time
import urllib.request
from pathlib import Path

import pytest
from fakes.fake_generator import FakeGenerator

from ttscore.backend import triton_metrics
from ttscore.backend.generation import GenerationScheduler
from ttscore.backend.triton_metrics import GenerationMetrics, MetricSpec, TritonMetricsPublisher
from ttscore.contract import tensors as triton_io
from ttscore.contract.tensors import UNAVAILABLE, WireError
from ttscore.runtime.families import FAMILIES

request_from_tensors = FAMILIES["qwen3_tts"].request_from_tensors

TESTS = Path(__file__).resolve().parents[1]
FAKE_GENERATION_MODEL = TESTS / "data" / "fake_speech_generation_model.py"
LABELS = {"model": "speech_generation", "version": "1", "instance": "speech_generation_0_0"}


class Stream:
    def __init__(self, cancelled: bool = False, fail_sends: bool = False) -> None:
        self.sent: list[tuple[dict | None, WireError | None, bool]] = []
        self.cancelled = cancelled
        self.fail_sends = fail_sends

    def send(self, outputs, error, final) -> None:
        if self.fail_sends and not final:
            raise RuntimeError("client went away")
        self.sent.append((outputs, error, final))

    def is_cancelled(self) -> bool:
        return self.cancelled

    @property
    def error(self) -> WireError | None:
        return self.sent[-1][1] if self.sent else None


def request(text: str = "hello", frames: int = 3):
    return request_from_tensors(triton_io.request_tensors(text=text, max_new_tokens=frames))


def scheduler(metrics: GenerationMetrics, max_active: int = 2, max_pending: int = 4) -> GenerationScheduler:
    # No thread: the test drives run_once() itself, so every count is deterministic.
    return GenerationScheduler(FakeGenerator(max_batch=max_active), max_active, max_pending, metrics=metrics)


def run_until_idle(s: GenerationScheduler, limit: int = 100) -> None:
    for _ in range(limit):
        if not s.run_once():
            return
    raise AssertionError("scheduler never went idle")


# --- unit: what the scheduler reports ------------------------------------------------------------


@pytest.mark.unit
def test_steps_batch_sizes_prefill_and_completions():
    m = GenerationMetrics()
    s = scheduler(m, max_active=2)
    streams = [Stream() for _ in range(3)]
    for st, frames in zip(streams, (2, 4, 1), strict=True):
        s.submit(request(frames=frames), st)
    run_until_idle(s)
    assert all(st.sent[-1][2] and st.error is None for st in streams)
    assert m.outcomes == {"completed": 3, "cancelled": 0, "rejected": 0, "failed": 0}
    # 2 slots: [2f, 4f] run together; the 1-frame request joins when the first leaves.
    batches = m.drain().observations[triton_metrics.BATCH_SIZE.name]
    assert batches == [2.0, 2.0, 2.0, 1.0]
    assert m.steps == 4 and m.frames == 2 + 4 + 1 and m.max_batch_size == 2
    assert m.prefills == 3 and m.prefill_seconds >= 0
    assert (m.pending, m.active) == (0, 0)


@pytest.mark.unit
def test_every_way_a_request_ends_is_counted_once():
    m = GenerationMetrics()
    s = scheduler(m, max_active=1, max_pending=1)
    ok, invalid, crash = Stream(), Stream(), Stream()
    s.submit(request("invalid"), invalid)  # InvalidRequest at admission -> rejected
    s.submit(request(frames=2), ok)
    full = Stream()
    s.submit(request(), full)  # 2 waiting >= 1 pending + 1 free slot -> queue full -> rejected
    assert full.error is not None and full.error.code == UNAVAILABLE
    run_until_idle(s)
    s.submit(request("submit-crash"), crash)  # internal error at admission -> failed
    run_until_idle(s)
    gone = Stream(fail_sends=True)  # a send fails: the client went away -> cancelled
    s.submit(request(frames=5), gone)
    run_until_idle(s)
    early = Stream(cancelled=True)  # cancelled while pending -> cancelled
    s.submit(request(), early)
    run_until_idle(s)
    s.reject(Stream(), WireError("INVALID_ARG", "bad tensor"))  # undecodable -> rejected
    assert m.outcomes == {"completed": 1, "cancelled": 2, "rejected": 3, "failed": 1}
    assert sum(m.drain().counts.values()) == 7


@pytest.mark.unit
def test_failed_step_and_shutdown_count_as_failed_and_reset_the_load():
    m = GenerationMetrics()
    s = scheduler(m, max_active=1, max_pending=4)
    s.submit(request("step-crash"), Stream())
    run_until_idle(s)
    assert m.outcomes["failed"] == 1 and m.steps == 0  # a step that raised is not a step
    running, waiting = Stream(), Stream()
    s.submit(request(frames=50), running)
    s.submit(request(frames=50), waiting)
    s.run_once()
    assert (m.pending, m.active) == (1, 1)
    s.stop()
    assert running.error is not None and waiting.error is not None
    assert m.outcomes == {"completed": 0, "cancelled": 0, "rejected": 1, "failed": 2}
    assert (m.pending, m.active) == (0, 0)


@pytest.mark.unit
def test_observation_buffer_is_bounded_but_totals_are_exact():
    m = GenerationMetrics(max_buffered=3)
    for i in range(5):
        m.step(1, 0.01 * i)
    delta = m.drain()
    assert len(delta.observations[triton_metrics.STEP_SECONDS.name]) == 3 and delta.dropped == 4
    assert m.steps == 5 and math.isclose(m.step_seconds, 0.1)
    assert m.drain().observations == {}


@pytest.mark.unit
def test_unknown_outcome_never_becomes_a_label():
    m = GenerationMetrics()
    m.finished("exploded")
    assert m.outcomes["failed"] == 1 and "exploded" not in m.drain().counts


@pytest.mark.unit
@pytest.mark.parametrize("buckets", [(1.0, 1.0), (2.0, 1.0), (1.0, math.inf)])
def test_buckets_that_would_abort_triton_are_refused(buckets):
    with pytest.raises(ValueError, match="strictly increasing"):
        MetricSpec("x", triton_metrics.HISTOGRAM, "d", buckets)
    with pytest.raises(ValueError, match="only for them"):
        MetricSpec("x", triton_metrics.GAUGE, "d", (1.0,))


# --- models: the publisher under the recording fake ---------------------------------------------


@pytest.mark.models
def test_publisher_sends_everything_with_labels(fake_pb_utils):
    fam = fake_pb_utils.MetricFamily
    pub = TritonMetricsPublisher(fake_pb_utils, GenerationMetrics(), LABELS, interval_s=60)
    assert pub.enabled
    assert {n for n, _ in fam.metrics} == {spec.name for spec in triton_metrics.SPECS}
    for outcome in triton_metrics.OUTCOMES:  # every outcome exists from the start, at 0
        assert fam.get("tts_generation_requests_total", outcome=outcome, **LABELS).value() == 0
    m = pub.metrics
    m.step(3, 0.02)
    m.step(1, 0.01)
    m.prefill(0.5)
    m.load(pending=2, active=1)
    m.finished("completed")
    m.finished("completed")
    m.finished("cancelled")
    assert pub.flush()
    assert fam.get("tts_generation_batch_size", **LABELS).observations == [3.0, 1.0]
    assert fam.get("tts_generation_step_seconds", **LABELS).observations == [0.02, 0.01]
    assert fam.get("tts_generation_prefill_seconds", **LABELS).observations == [0.5]
    assert fam.get("tts_generation_pending_requests", **LABELS).value() == 2
    assert fam.get("tts_generation_active_requests", **LABELS).value() == 1
    assert fam.get("tts_generation_requests_total", outcome="completed").value() == 2
    assert fam.get("tts_generation_requests_total", outcome="cancelled").value() == 1
    ops = sum(x.operations for x in fam.metrics.values())
    assert pub.flush()  # nothing new: no IPC at all
    assert sum(x.operations for x in fam.metrics.values()) == ops
    m.finished("failed")
    pub.close()  # publishes the remainder
    assert fam.get("tts_generation_requests_total", outcome="failed").value() == 1
    assert fam.server_errors == []


@pytest.mark.models
def test_non_finite_values_are_not_sent(fake_pb_utils):
    pub = TritonMetricsPublisher(fake_pb_utils, GenerationMetrics(), LABELS, interval_s=60)
    pub.metrics.step(1, math.nan)
    pub.metrics.prefill(-1.0)
    pub.metrics.step(1, 0.25)
    assert pub.flush()
    assert fake_pb_utils.MetricFamily.get("tts_generation_step_seconds").observations == [0.25]
    assert fake_pb_utils.MetricFamily.get("tts_generation_prefill_seconds").observations == []


@pytest.mark.models
def test_first_failure_disables_publishing_so_triton_is_never_aborted(fake_pb_utils, monkeypatch):
    fam = fake_pb_utils.MetricFamily
    pub = TritonMetricsPublisher(fake_pb_utils, GenerationMetrics(), LABELS, interval_s=60)
    gauge = fam.get("tts_generation_active_requests")
    monkeypatch.setattr(gauge.family, "kind", fam.COUNTER)  # every set() now fails server-side
    pub.metrics.load(1, 1)
    assert not pub.flush() and not pub.enabled
    assert len(fam.server_errors) == 1
    ops = sum(x.operations for x in fam.metrics.values())
    for _ in range(3):  # would be a second failure -> ServerAborted, if anything were still sent
        pub.metrics.load(2, 2)
        pub.metrics.step(2, 0.1)
        assert not pub.flush()
    pub.close()
    assert sum(x.operations for x in fam.metrics.values()) == ops
    assert pub.metrics.drain().observations == {}  # drained even while disabled: memory stays bounded


@pytest.mark.models
def test_a_family_name_taken_by_another_kind_leaves_the_model_without_metrics(fake_pb_utils):
    fake_pb_utils.MetricFamily("tts_generation_pending_requests", "someone else's", fake_pb_utils.MetricFamily.COUNTER)
    pub = TritonMetricsPublisher(fake_pb_utils, GenerationMetrics(), LABELS, interval_s=60)
    assert not pub.enabled
    pub.start()
    pub.metrics.finished("completed")
    assert not pub.flush()
    pub.close()


@pytest.mark.models
def test_restarted_instance_continues_counters_and_resets_gauges(fake_pb_utils):
    fam = fake_pb_utils.MetricFamily
    first = TritonMetricsPublisher(fake_pb_utils, GenerationMetrics(), LABELS, interval_s=60)
    first.metrics.finished("completed")
    first.metrics.load(3, 2)
    first.flush()  # then the stub is SIGKILLed: no close(), the server keeps its metrics
    TritonMetricsPublisher(fake_pb_utils, GenerationMetrics(), LABELS, interval_s=60)
    assert fam.get("tts_generation_requests_total", outcome="completed").value() == 1
    assert fam.get("tts_generation_pending_requests").value() == 0
    assert fam.get("tts_generation_active_requests").value() == 0


@pytest.mark.models
def test_publisher_thread_publishes_without_being_asked(fake_pb_utils):
    pub = TritonMetricsPublisher(fake_pb_utils, GenerationMetrics(), LABELS, interval_s=0.02)
    pub.start()
    pub.metrics.finished("completed")
    deadline = time.monotonic() + 5
    metric = fake_pb_utils.MetricFamily.get("tts_generation_requests_total", outcome="completed")
    while metric.value() != 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert metric.value() == 1
    pub.close()
    assert pub._thread is not None and not pub._thread.is_alive()


# --- integration: the real tritonserver's metrics port --------------------------------------------


def scrape(url: str) -> dict[tuple[str, frozenset], float]:
    """Prometheus text -> {(sample name, labels): value}."""
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    samples = {}
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)$", line)
        if m and not line.startswith("#"):
            labels = frozenset(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
            samples[(m.group(1), labels)] = float(m.group(3))
    return samples


def sample(samples: dict, name: str, **labels: str) -> float:
    found = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]
    assert len(found) == 1, f"{name}{labels}: {len(found)} samples"
    return found[0]


@pytest.mark.integration
def test_metrics_port_shows_steps_batches_and_outcomes(triton_server, dummy_artifacts):
    import tritonclient.grpc as grpcclient
    from grpc_inputs import to_inputs

    server = triton_server(
        models=["code2wav", "speech_generation"],
        artifacts_dir=dummy_artifacts,
        model_overrides={"speech_generation": FAKE_GENERATION_MODEL},
        env={"TTS_FAKE_STEP_DELAY_S": "0.01", "TTS_FAKE_SPF": "1920"},
    )
    client = grpcclient.InferenceServerClient(server.grpc_url)
    events: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: events.put((result, error)))
    try:
        for rid, text in (("ok", "hello"), ("bad", "invalid")):  # one after the other: known steps
            inputs = to_inputs(triton_io.request_tensors(text=text, max_new_tokens=5))
            client.async_stream_infer("speech_generation", inputs, request_id=rid, enable_empty_final_response=True)
            while True:
                result, error = events.get(timeout=30)
                if error is not None or result.get_response().parameters["triton_final_response"].bool_param:
                    break
            assert (error is None) == (rid == "ok"), error
    finally:
        client.stop_stream()
        client.close()

    labels = {"model": "speech_generation", "version": "1"}
    deadline = time.monotonic() + 15  # the publisher flushes every 0.5 s
    while True:
        samples = scrape(server.metrics_url)
        try:
            assert sample(samples, "tts_generation_requests_total", outcome="completed", **labels) == 1
            assert sample(samples, "tts_generation_requests_total", outcome="rejected", **labels) == 1
            break
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    assert sample(samples, "tts_generation_requests_total", outcome="cancelled", **labels) == 0
    assert sample(samples, "tts_generation_requests_total", outcome="failed", **labels) == 0
    # FakeGenerator makes one frame per step: 5 steps of batch size 1, each >= the 10 ms delay.
    assert sample(samples, "tts_generation_batch_size_count", **labels) == 5
    assert sample(samples, "tts_generation_batch_size_sum", **labels) == 5
    assert sample(samples, "tts_generation_batch_size_bucket", le="1", **labels) == 5
    assert sample(samples, "tts_generation_step_seconds_count", **labels) == 5
    assert 0.05 <= sample(samples, "tts_generation_step_seconds_sum", **labels) < 5
    assert sample(samples, "tts_generation_prefill_seconds_count", **labels) == 1
    assert sample(samples, "tts_generation_active_requests", **labels) == 0
    assert sample(samples, "tts_generation_pending_requests", **labels) == 0
    instance = {dict(ls).get("instance") for (n, ls) in samples if n == "tts_generation_active_requests"}
    assert instance == {"speech_generation_0_0"}
    assert "failed metric" not in server.log_tail(400)
