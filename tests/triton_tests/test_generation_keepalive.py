"""speech_generation's keep-alives (ttscore.backend.generation): while the server shows a sign of life (a step loop
iteration began or an ONNX Runtime call returned within KEEPALIVE_PROGRESS_S), an admitted request that has
streamed and has been sent nothing for `keepalive_s` gets a keep-alive (not final, no frames:
ttscore.contract.tensors.is_keepalive), whether its next chunk is one long step away or many short ones; none
before a request's first chunk, none without a sign of life (a real stall stays visible to the gateway's stall
limit), none after the final, none when off. Rounds are driven with explicit clocks."""

from __future__ import annotations

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


class QuietSteps:
    """One request: a chunk at step `first` (1: its first step; 0: none before the final), nothing at the steps
    after it (a non-autoregressive family unmasking its next chunk), its final chunk at step `last`."""

    def __init__(self, first: int = 1, last: int = 5) -> None:
        self.active: dict[str, Any] = {}
        self.first, self.last, self.steps = first, last, 0

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
        final = self.steps >= self.last
        if final:
            del self.active[req_id]
        elif self.steps != self.first:
            return []
        return [ChunkEvent(req_id, np.ones(4, np.float32), 1, final, "length" if final else None, Usage(1, 0, 1))]


def _scheduler(gen: QuietSteps, keepalive_s: float, life: list[float]) -> GenerationScheduler:
    sched = GenerationScheduler(gen, max_active=1, max_pending=1, keepalive_s=keepalive_s, progressed=lambda: life[0])
    sched._heartbeat = -1e9  # only `life` (the graphs' progress) speaks for the server here
    return sched


def test_keepalives_between_chunks_while_the_server_shows_life() -> None:
    life = [0.0]
    gen = QuietSteps()
    sched = _scheduler(gen, 1.0, life)
    sink = Sink()
    sched.submit(object(), sink, "r")
    sched.run_once()  # admitted, its first chunk out: it streams
    sent_at = time.monotonic()
    assert [f for _, _, f in sink.sent] == [False] and sink.keepalives() == 0
    sched.run_once()  # a step with nothing for it
    life[0] = sent_at + 1.0
    assert sched.send_keepalives(sent_at + 0.5) == 0  # sent something less than keepalive_s ago
    assert sched.send_keepalives(sent_at + 1.2) == 1
    assert sched.send_keepalives(sent_at + 1.7) == 0  # a keep-alive went out less than keepalive_s ago
    assert sched.send_keepalives(sent_at + 2.3) == 1
    # no sign of life for longer than KEEPALIVE_PROGRESS_S: none, so the gateway's stall limit can act
    assert sched.send_keepalives(life[0] + generation.KEEPALIVE_PROGRESS_S + 1.0) == 0
    life[0] = sent_at + 30.0  # the graphs return again
    assert sched.send_keepalives(sent_at + 31.0) == 1
    while gen.active:
        sched.run_once()
    assert sink.sent[-1][2] is True and int(sink.sent[-1][0]["frames"][0]) == 1  # the final chunk, last
    assert sched.send_keepalives(sent_at + 60.0) == 0  # done: nothing more
    assert sink.keepalives() == 3 == sched.keepalives_sent
    assert sum(1 for _, _, f in sink.sent if f) == 1
    # the loop's own iterations are a sign of life too (many short steps, no graph in this fake)
    life[0] = -1e9
    gen, sink = QuietSteps(), Sink()
    sched = _scheduler(gen, 1.0, life)
    sched.submit(object(), sink, "r")
    sched.run_once()
    sched._heartbeat = time.monotonic() + 5.0
    assert sched.send_keepalives(time.monotonic() + 6.0) == 1


def test_no_keepalive_before_the_first_chunk_or_when_off() -> None:
    for keepalive_s, first in ((1.0, 0), (0.0, 1)):
        life = [time.monotonic() + 1e6]  # always alive
        gen = QuietSteps(first=first)
        sched = _scheduler(gen, keepalive_s, life)
        sink = Sink()
        sched.submit(object(), sink, "r")
        sched.run_once()
        assert sched.send_keepalives(time.monotonic() + 10.0) == 0
        while gen.active:
            sched.run_once()
        assert sink.keepalives() == 0
