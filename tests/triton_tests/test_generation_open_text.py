"""The speech_generation scheduler's incremental text (ttscore.backend.generation), driven without
Triton over the real tiny Qwen3-TTS generator: extensions that come before their request, while it
waits for a slot and while it runs are all applied in order and each answered with one FINAL; the
audio equals the whole text's; a request waiting for text does not make the loop spin; extensions
for an ended request are refused at once; the waits are in the metrics."""

from __future__ import annotations

import numpy as np

from gateway import encoding
from ttscore.backend import generation
from ttscore.backend.generation import GenerationScheduler
from ttscore.backend.triton_metrics import GenerationMetrics
from ttscore.runtime.engine import Generator
from ttscore.runtime.families.qwen3_tts.request import Qwen3TTSRequest

TEXT = "Hello there, the words come one at a time."
FRAMES = 40


class Sink:
    def __init__(self) -> None:
        self.sent: list[tuple[dict | None, object, bool]] = []
        self.cancelled = False

    def send(self, outputs, error, final) -> None:
        self.sent.append((outputs, error, final))

    def is_cancelled(self) -> bool:
        return self.cancelled

    @property
    def finals(self) -> list:
        return [(o, e) for o, e, f in self.sent if f]

    def audio(self) -> np.ndarray:
        return np.concatenate([o["audio"] for o, _, _ in self.sent if o is not None])


def request(text: str) -> Qwen3TTSRequest:
    return Qwen3TTSRequest(text=text, speaker="vivian", language="English", seed=7, max_new_tokens=FRAMES,
                           non_streaming_mode=False)


def test_extensions_in_every_state_are_applied_in_order(tiny_custom_voice_greedy):
    _, _, pipeline = tiny_custom_voice_greedy
    whole = np.concatenate([ev.pcm for ev in Generator(pipeline, max_batch=1).synthesize(request(TEXT))])
    metrics = GenerationMetrics()
    sched = GenerationScheduler(Generator(pipeline, max_batch=1), max_active=1, max_pending=4, metrics=metrics)
    words = TEXT.split(" ")
    pieces = [words[0]] + [" " + w for w in words[1:]]
    acks = [Sink() for _ in pieces[1:]] + [Sink()]
    # The slot is taken by another request, so the open one waits in the queue.
    other = Sink()
    sched.submit(request("Busy."), other, "busy")
    sched.run_once()
    sched.extend("key-1", pieces[1], False, acks[0])  # before its request arrived: kept
    main = Sink()
    sched.submit(request(pieces[0]), main, "open", text_key="key-1")
    sched.extend("key-1", pieces[2], False, acks[1])  # while it waits for a slot: held
    sched.run_once()
    assert acks[0].finals == [(None, None)] and acks[1].finals == [(None, None)]  # answered once held
    while not other.finals:
        sched.run_once()
    sent = 3
    idle_when_waiting = []
    for _ in range(10_000):
        sched.run_once()
        if main.finals:
            break
        if sched.generator.num_waiting:  # type: ignore[attr-defined]
            idle_when_waiting.append(sched.run_once())  # nothing to step: no spinning
            if sent < len(pieces):
                sched.extend("key-1", pieces[sent], False, acks[sent - 1])
                sent += 1
            elif not acks[-1].sent:
                sched.extend("key-1", "", True, acks[-1])
    (outputs, error), = main.finals
    assert error is None
    assert all(a.finals == [(None, None)] for a in acks)
    assert len(idle_when_waiting) >= len(pieces) - 2 and not any(idle_when_waiting)  # it sleeps on the inbox
    got = main.audio()
    assert got.shape == whole.shape
    assert np.max(np.abs(encoding.to_int16(got).astype(np.int32) - encoding.to_int16(whole).astype(np.int32))) <= 1
    # an extension for the ended request is refused at once (no orphan wait)
    late = Sink()
    sched.extend("key-1", " more", False, late)
    sched.run_once()
    ((_, late_error),) = late.finals
    assert late_error is not None and late_error.code == "INVALID_ARG"
    assert metrics.text_wait_seconds > 0 and metrics.waiting == 0
    assert metrics.outcomes["completed"] == 2


def test_an_extension_for_no_request_is_refused_after_a_while(tiny_custom_voice_greedy, monkeypatch):
    _, _, pipeline = tiny_custom_voice_greedy
    monkeypatch.setattr(generation, "ORPHAN_EXTENSION_S", 0.0)
    sched = GenerationScheduler(Generator(pipeline, max_batch=1), max_active=1, max_pending=4)
    sink = Sink()
    sched.extend("nobody", "text", False, sink)
    sched.run_once()
    ((_, error),) = sink.finals
    assert error is not None and error.code == "INVALID_ARG" and error.param == "text"


def test_cancelling_a_waiting_request_frees_its_slot(tiny_custom_voice_greedy):
    _, _, pipeline = tiny_custom_voice_greedy
    metrics = GenerationMetrics()
    sched = GenerationScheduler(Generator(pipeline, max_batch=1), max_active=1, max_pending=4, metrics=metrics)
    main = Sink()
    sched.submit(request("Hello there,"), main, "open", text_key="key-2")
    for _ in range(100):
        sched.run_once()
        if sched.generator.num_waiting:  # type: ignore[attr-defined]
            break
    assert sched.num_active == 1 and metrics.waiting == 1
    main.cancelled = True
    sched.run_once()
    ((_, error),) = main.finals
    assert error is not None and error.code == "CANCELLED"
    assert sched.num_active == 0 and metrics.outcomes["cancelled"] == 1
    assert metrics.waiting == 0 and metrics.text_wait_seconds > 0
