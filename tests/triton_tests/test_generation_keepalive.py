"""speech_generation's keep-alives (ttscore.backend.generation): during a step longer than `keepalive_s` that
still makes progress, a request that has streamed and has been sent nothing for `keepalive_s` gets a keep-alive
(not final, no frames: ttscore.contract.tensors.is_keepalive); none before a request's first chunk, none while the
step shows no sign of life for KEEPALIVE_PROGRESS_S (a real stall stays visible to the gateway's stall limit), none
after the final. Rounds are driven with explicit clocks while a scripted step is held open."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

from ttscore.backend import generation
from ttscore.backend.generation import GenerationScheduler
from ttscore.contract import tensors as triton_io
from ttscore.contract.usage import Usage
from ttscore.runtime.engine import ChunkEvent

pytestmark = pytest.mark.unit


class Sink:
    def __init__(self) -> None:
        self.sent: list[tuple[Any, Any, bool]] = []

    def send(self, outputs: Any, error: Any, final: bool) -> None:
        self.sent.append((outputs, error, final))

    def is_cancelled(self) -> bool:
        return False

    def keepalives(self) -> int:
        return sum(1 for o, _, f in self.sent
                   if o is not None and triton_io.is_keepalive(int(o["frames"][0]), f) and o["audio"].size == 0)


class SlowSecondStep:
    """One request: its first step makes a chunk at once; its second blocks until `release`, then ends it."""

    def __init__(self) -> None:
        self.active: dict[str, Any] = {}
        self.release = threading.Event()
        self.in_step = threading.Event()
        self.steps = 0

    @property
    def num_active(self) -> int:
        return len(self.active)

    def submit(self, req_id: str, request: Any) -> None:
        self.active[req_id] = request

    def cancel(self, req_id: str) -> bool:
        return self.active.pop(req_id, None) is not None

    def step(self, emit: Any = None) -> list[ChunkEvent]:
        self.steps += 1
        (req_id,) = self.active
        if self.steps > 1:
            self.in_step.set()
            assert self.release.wait(10)
            del self.active[req_id]
        final = self.steps > 1
        return [ChunkEvent(req_id, np.ones(4, np.float32), 1, final, "length" if final else None, Usage(1, 0, 1))]


def test_keepalives_during_a_long_step_that_makes_progress() -> None:
    progress = [0.0]
    gen = SlowSecondStep()
    sched = GenerationScheduler(gen, max_active=1, max_pending=1, keepalive_s=1.0, progressed=lambda: progress[0])
    sink = Sink()
    sched.submit(object(), sink, "r")
    assert sched.send_keepalives(time.monotonic()) == 0  # not in a step
    sched.run_once()  # admitted, its first chunk out: it streams
    assert [f for _, _, f in sink.sent] == [False] and sink.keepalives() == 0
    loop = threading.Thread(target=sched.run_once)
    loop.start()
    assert gen.in_step.wait(10)
    started = sched._step_started
    assert started is not None
    last_chunk = time.monotonic()
    progress[0] = started + 1.0  # a graph call returned a second into the step
    assert sched.send_keepalives(started + 0.5) == 0  # the step is not long yet
    assert sched.send_keepalives(max(started + 1.5, last_chunk + 1.0)) == 1
    assert sink.keepalives() == 1
    t = max(started + 1.5, last_chunk + 1.0)
    assert sched.send_keepalives(t + 0.5) == 0  # one went out less than keepalive_s ago
    assert sched.send_keepalives(t + 1.1) == 1
    # no sign of life for longer than KEEPALIVE_PROGRESS_S: none, so the gateway's stall limit can act
    assert sched.send_keepalives(progress[0] + generation.KEEPALIVE_PROGRESS_S + 1.0) == 0
    progress[0] = t + 30.0  # it moves again
    assert sched.send_keepalives(t + 31.0) == 1
    gen.release.set()
    loop.join(10)
    assert sink.sent[-1][2] is True and int(sink.sent[-1][0]["frames"][0]) == 1  # the final chunk, last
    assert sched.send_keepalives(time.monotonic() + 100) == 0  # between steps, and the request is done
    assert sink.keepalives() == 3 == sched.keepalives_sent
    assert sum(1 for _, _, f in sink.sent if f) == 1


def test_no_keepalive_before_the_first_chunk_or_when_off() -> None:
    for keepalive_s in (1.0, 0.0):
        gen = SlowSecondStep()
        gen.steps = 1  # its first step is already the slow one: no chunk before it
        sched = GenerationScheduler(gen, max_active=1, max_pending=1, keepalive_s=keepalive_s,
                                    progressed=time.monotonic)
        sink = Sink()
        sched.submit(object(), sink, "r")
        loop = threading.Thread(target=sched.run_once)
        loop.start()
        assert gen.in_step.wait(10)
        started = sched._step_started
        assert started is not None
        assert sched.send_keepalives(started + 5.0) == 0
        gen.release.set()
        loop.join(10)
        assert sink.keepalives() == 0 and [f for _, _, f in sink.sent] == [True]
