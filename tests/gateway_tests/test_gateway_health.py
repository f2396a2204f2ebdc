"""The pure parts of fault handling: the health state machine and its backoff (gateway.health),
request deadlines and the bounded wait for a stream's next item (gateway.deadline), the probe
request built from a model config (gateway.triton_client.probe_tensors), and the health monitor's
rounds over a fake backend with a fake clock (gateway.monitor)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from gateway_fixtures import FakeBackend

from gateway.backend import UNAVAILABLE, BackendError, ProbeResult
from gateway.deadline import END, STALL, TOTAL, Deadline, next_within
from gateway.health import (
    BROKEN,
    HEALTHY,
    RECOVERING,
    RELOADING,
    UNKNOWN,
    UNREACHABLE,
    Backoff,
    HealthBook,
    InflightStreams,
)
from gateway.monitor import HealthMonitor
from gateway.triton_client import probe_tensors

pytestmark = pytest.mark.unit

OK = ProbeResult("ok")
DEAD = ProbeResult("failed", "Stub process 'm_0_0' is not healthy.")
SLOW = ProbeResult("timeout", "no answer to a health probe within 5 s")


# --- Backoff / HealthBook -----------------------------------------------------------------------------


@pytest.mark.parametrize("message", [
    "Request for unknown model: 'speech_generation' is not found",
    "ERROR: [request id: speech-1] Server is stopping, scheduler for model has stopped accepting new inference requests",
])
def test_a_model_triton_cannot_run_now_is_unavailable(message):
    """Triton's own messages for a model it cannot run now (a stopping server too) are UNAVAILABLE:
    retryable on another endpoint before any audio, not an internal error of the request."""
    from gateway.triton_client import _from_message

    assert _from_message(message).code == UNAVAILABLE


def test_backoff_first_repair_is_immediate_then_doubles_up_to_the_cap():
    b = Backoff(1.0, 30.0)
    assert [b.delay(n) for n in range(8)] == [0, 1, 2, 4, 8, 16, 30, 30]


def test_a_failed_probe_breaks_a_model_once_and_a_reload_is_due_at_once():
    book = HealthBook()
    book.track(["m", "other"])
    assert book.state("m") == UNKNOWN and book.unusable() == {}
    assert book.observe("m", DEAD, now=10.0) is True  # news: end its streams
    assert book.observe("m", DEAD, now=11.0) is False  # already known
    assert book.state("m") == BROKEN and book.unusable() == {"m": DEAD.detail}
    assert book.due_reloads(now=10.0) == ["m"]
    book.observe("other", OK, now=10.0)
    assert book.state("other") == HEALTHY


def test_the_repair_cycle():
    book = HealthBook()
    book.track(["m"])
    book.observe("m", DEAD, now=0.0)
    book.reload_started("m")
    assert book.state("m") == RELOADING and book.due_reloads(0.0) == []
    assert book.observe("m", DEAD, now=0.5) is False and book.state("m") == RELOADING  # moot while reloading
    book.reload_finished("m", None, now=1.0)
    assert book.state("m") == RECOVERING and "m" in book.unusable()  # not usable before a probe passes
    book.observe("m", OK, now=1.5)
    assert book.state("m") == HEALTHY and book.unusable() == {}


def test_failed_repairs_back_off():
    book = HealthBook(backoff=Backoff(1.0, 4.0))
    book.track(["m"])
    book.observe("m", DEAD, now=0.0)
    due = []
    now = 0.0
    for _ in range(5):
        [model] = book.due_reloads(now)
        due.append(now)
        book.reload_started(model)
        book.reload_finished(model, "load failed", now)
        assert book.state(model) == BROKEN and book.unusable()[model] == "reload failed: load failed"
        assert book.due_reloads(now) == []
        now = book.models[model].reload_at
    assert due == [0.0, 1.0, 3.0, 7.0, 11.0]  # waits 1, 2, 4, then the 4 s cap
    # A reload that "succeeds" but leaves the model failing counts as a failed repair too.
    book.reload_started("m")
    book.reload_finished("m", None, now)
    assert book.observe("m", DEAD, now) is True and book.models["m"].reload_at == now + 4.0
    # Healthy again: the next failure is repaired at once.
    book.reload_started("m")
    book.reload_finished("m", None, now)
    book.observe("m", OK, now)
    book.observe("m", DEAD, now + 100)
    assert book.due_reloads(now + 100) == ["m"]


def test_timeouts_break_a_model_only_when_repeated():
    book = HealthBook(timeout_threshold=2)
    book.track(["m"])
    assert book.observe("m", SLOW, 0.0) is False and book.state("m") == UNKNOWN
    book.observe("m", OK, 1.0)  # an answer resets the count
    assert book.observe("m", SLOW, 2.0) is False
    assert book.observe("m", SLOW, 3.0) is True and book.state("m") == BROKEN


def test_unreachable_triton_makes_every_model_unusable_until_probed_again():
    book = HealthBook()
    book.track(["a", "b", "c"])
    for m in "ab":
        book.observe(m, OK, 0.0)
    book.observe("c", DEAD, 0.0)
    book.reload_started("c")
    assert book.unreachable("connection refused") is True
    assert book.unreachable("connection refused") is False
    assert {m: book.state(m) for m in "abc"} == {"a": UNREACHABLE, "b": UNREACHABLE, "c": RELOADING}
    assert "Triton is unreachable (connection refused)" in book.unusable()["a"]
    assert book.due_reloads(1.0) == []  # nothing to reload on a server that is not there
    book.observe("a", OK, 2.0)
    assert book.observe("b", DEAD, 2.0) is True and book.state("b") == BROKEN  # came back without b
    assert book.observe("a", ProbeResult("unreachable", "gone"), 3.0) is True  # a probe can say so too


def test_reloads_can_be_left_to_someone_else():
    book = HealthBook(reload=False)
    book.track(["m"])
    book.observe("m", DEAD, 0.0)
    assert book.due_reloads(100.0) == [] and book.state("m") == BROKEN


def test_track_keeps_known_states():
    book = HealthBook()
    book.track(["voice_features", "code2wav"])
    book.observe("code2wav", DEAD, 0.0)
    book.track(["code2wav", "audio_preprocess"])
    assert book.state("code2wav") == BROKEN and book.state("audio_preprocess") == UNKNOWN
    assert set(book.models) == {"code2wav", "audio_preprocess"}
    book.reload_finished("voice_features", None, 0.0)  # a model no longer followed: ignored


# --- InflightStreams ------------------------------------------------------------------------------------


def test_abort_reaches_the_streams_that_need_the_model():
    async def main():
        streams = InflightStreams()
        a = streams.open(["sg_a", "code2wav"])
        b = streams.open(["sg_b", "code2wav"])
        with streams.open(["sg_b"]) as c:
            err = BackendError(UNAVAILABLE, "model sg_a failed")
            assert streams.abort(["sg_a"], err) == 1
            assert a.aborted.result() is err and not b.aborted.done() and not c.aborted.done()
            assert streams.abort(["code2wav"], err) == 1  # b (a already ended)
            assert streams.abort(None, err) == 1  # c
            assert len(streams) == 3
        assert len(streams) == 2
        a.close()
        b.close()
        assert len(streams) == 0

    asyncio.run(main())


# --- Deadline / next_within -----------------------------------------------------------------------------


def test_deadline_waits():
    d = Deadline(start=100.0, total_s=600.0, stall_s=30.0)
    assert d.wait_limit(100.0, streaming=False) == (600.0, TOTAL)  # before the first response: total only
    assert d.wait_limit(110.0, streaming=True) == (30.0, STALL)
    assert d.wait_limit(690.0, streaming=True) == (10.0, TOTAL)  # the total limit is nearer
    assert d.wait_limit(800.0, streaming=True) == (0.0, TOTAL)
    assert "30 s" in d.message(STALL) and "600 s" in d.message(TOTAL)


class Source:
    """An async generator over scripted items (None: wait forever) that records its cleanup."""

    def __init__(self, *items):
        self.items = items
        self.closed = False

    async def gen(self):
        try:
            for item in self.items:
                if item is None:
                    await asyncio.Event().wait()
                yield item
        finally:
            self.closed = True


def test_next_within_items_end_timeout_and_abort():
    async def main():
        src = Source(1, 2)
        gen = src.gen()
        assert await next_within(gen, 1.0) == 1
        assert await next_within(gen, 1.0) == 2
        assert await next_within(gen, 1.0) is END

        src = Source(1, None)
        gen = src.gen()
        assert await next_within(gen, 1.0) == 1
        with pytest.raises(asyncio.TimeoutError):
            await next_within(gen, 0.05)
        assert src.closed  # the pending read was cancelled and the generator cleaned up
        await gen.aclose()

        src = Source(None)
        gen = src.gen()
        abort: asyncio.Future[Exception] = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(0.05, abort.set_result, BackendError(UNAVAILABLE, "model x failed"))
        with pytest.raises(BackendError, match="model x failed"):
            await next_within(gen, 10.0, abort)
        assert src.closed

    asyncio.run(main())


def test_next_within_cancelled_caller_cancels_the_read():
    async def main():
        src = Source(None)
        gen = src.gen()
        task = asyncio.ensure_future(next_within(gen, 10.0))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert src.closed
        await gen.aclose()  # not "already running"

    asyncio.run(main())


def test_next_within_under_an_anyio_cancel_scope_finishes_the_read_before_the_stream_closes():
    """Starlette's streaming response cancels its body through an anyio cancel scope when the client leaves: the
    scope cancels the task again at every await, so the read must be finished before closing the stream (the
    stream's cleanup cancels the Triton call)."""
    import anyio

    class SlowCleanup(Source):
        async def gen(self):
            try:
                await asyncio.Event().wait()
                yield 1
            finally:
                await asyncio.sleep(0.01)  # (a Triton call being cancelled)
                self.closed = True

    async def main():
        src = SlowCleanup()
        gen = src.gen()
        with anyio.CancelScope() as scope:
            asyncio.get_running_loop().call_later(0.05, scope.cancel)
            await next_within(gen, 10.0)
        assert src.closed
        await gen.aclose()  # not "already running"

    asyncio.run(main())


# --- probe_tensors ----------------------------------------------------------------------------------------


def test_probe_tensors_fill_required_inputs_with_the_smallest_valid_value():
    config = {  # get_model_config(as_json=True)["config"]: int64 dims arrive as strings
        "max_batch_size": 8,
        "input": [
            {"name": "codes", "data_type": "TYPE_INT64", "dims": ["-1", "16"]},
            {"name": "state", "data_type": "TYPE_FP32", "dims": ["17540"]},
            {"name": "note", "data_type": "TYPE_STRING", "dims": ["1"], "optional": True},
        ],
    }
    t = probe_tensors(config)
    assert set(t) == {"codes", "state"}
    assert t["codes"].shape == (1, 1, 16) and t["codes"].dtype == np.int64 and not t["codes"].any()
    assert t["state"].shape == (1, 17540) and t["state"].dtype == np.float32
    t = probe_tensors({"input": [{"name": "text", "data_type": "TYPE_STRING", "dims": ["1"]},
                                 {"name": "seed", "data_type": "TYPE_INT64", "dims": ["1"], "optional": True}]})
    assert list(t) == ["text"] and t["text"].dtype == object and t["text"].tolist() == [b""]
    with pytest.raises(ValueError, match="unsupported data_type"):
        probe_tensors({"input": [{"name": "x", "data_type": "TYPE_BF16", "dims": ["1"]}]})


# --- HealthMonitor rounds (fake backend, fake clock) -------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_monitor_round_by_round():
    async def main():
        fake = FakeBackend(components={"voice_features": ["audio_preprocess", "speaker_encoder"]})
        clock = Clock()
        streams = InflightStreams()
        mon = HealthMonitor(fake, ["sg", "code2wav", "voice_features"], streams, clock=clock)
        via_vocoder = streams.open(["sg", "code2wav"])
        other = streams.open(["sg_other"])

        await mon.tick()
        assert set(mon.book.models) == {"sg", "code2wav", "audio_preprocess", "speaker_encoder"}
        assert mon.unusable() == {}

        fake.probe_results["code2wav"] = DEAD
        fake.probe_results["audio_preprocess"] = DEAD
        fake.hold_reloads = True
        await mon.tick()
        assert isinstance(via_vocoder.aborted.result(), BackendError) and not other.aborted.done()
        assert "code2wav failed" in via_vocoder.aborted.result().message
        await asyncio.sleep(0.01)  # the reload tasks start
        assert sorted(fake.reloads) == ["audio_preprocess", "code2wav"]
        unusable = mon.unusable()
        assert unusable["voice_features"].startswith("audio_preprocess: being reloaded after: Stub process")
        assert unusable["code2wav"].startswith("being reloaded")

        fake.hold_reloads = False
        await asyncio.sleep(0.05)
        assert mon.book.state("code2wav") == RECOVERING
        await mon.tick()
        assert mon.unusable() == {} and sorted(fake.reloads) == ["audio_preprocess", "code2wav"]

        fake.live = False
        await mon.tick()
        assert other.aborted.done() and set(mon.unusable()) == {"sg", "code2wav", "voice_features"}
        fake.live = True
        await mon.tick()
        assert mon.unusable() == {}
        await mon.stop()

    asyncio.run(main())


def test_monitor_retries_failed_reloads_with_backoff():
    async def main():
        fake = FakeBackend(reload_error="failed to load 'sg': bad artifacts")
        clock = Clock()
        mon = HealthMonitor(fake, ["sg"], InflightStreams(), clock=clock)
        fake.probe_results["sg"] = DEAD
        await mon.tick()
        await asyncio.sleep(0.01)
        assert fake.reloads == ["sg"] and mon.unusable()["sg"] == "reload failed: failed to load 'sg': bad artifacts"
        await mon.tick()
        assert fake.reloads == ["sg"]  # backing off
        clock.now = 1.0
        await mon.tick()
        await asyncio.sleep(0.01)
        assert fake.reloads == ["sg", "sg"]
        clock.now = 2.5
        await mon.tick()
        assert len(fake.reloads) == 2  # the next one waits 2 s
        fake.reload_error = None
        clock.now = 3.0
        await mon.tick()
        await asyncio.sleep(0.01)
        await mon.tick()
        assert mon.unusable() == {} and len(fake.reloads) == 3
        await mon.stop()

    asyncio.run(main())
