"""A scripted stand-in for ttscore.runtime.engine.Generator (same interface, real ChunkEvent/Usage).

Behaviour is chosen by the request text:
  "invalid"      submit() raises InvalidRequest("text is not speakable", "input")
  "submit-crash" submit() raises RuntimeError
  "step-crash"   step() raises RuntimeError while this request is active
  "no-final"     the request vanishes from the generator without a final event
  "slow-step"    the step that makes its second frame (its first chunk already sent) sleeps `slow_step_s` at once:
                 one long family step (a non-autoregressive unmasking, a long vocoder call)
anything else: one frame per step up to max_new_tokens (default 3); a chunk every chunk_frames
(default 1) frames; PCM sample value = frame index; the last chunk is final ("length").
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ttscore.contract.errors import InvalidRequest
from ttscore.runtime.engine import ChunkEvent, Usage


@dataclass
class _Req:
    request: Any
    total: int
    chunk: int
    frames: int = 0
    pending: int = 0


@dataclass
class FakeGenerator:
    pipeline: Any = None
    max_batch: int = 8
    samples_per_frame: int = 4
    step_delay_s: float = 0.0
    slow_step_s: float = 0.0  # "slow-step"
    active: dict[str, _Req] = field(default_factory=dict)
    submitted: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    steps: int = 0
    max_seen_batch: int = 0
    thread_ids: set[int] = field(default_factory=set)

    @property
    def num_active(self) -> int:
        return len(self.active)

    def submit(self, req_id: str, request: Any) -> None:
        self.thread_ids.add(threading.get_ident())
        if request.text == "invalid":
            raise InvalidRequest("text is not speakable", "input")
        if request.text == "submit-crash":
            raise RuntimeError("boom in submit")
        if len(self.active) >= self.max_batch:
            raise RuntimeError("FakeGenerator: more requests than max_batch")
        total = request.max_new_tokens if request.max_new_tokens is not None else 3
        chunk = request.chunk_frames if request.chunk_frames is not None else 1
        self.active[req_id] = _Req(request, total, chunk)
        self.submitted.append(req_id)

    def cancel(self, req_id: str) -> bool:
        self.cancelled.append(req_id)
        return self.active.pop(req_id, None) is not None

    def step(self, emit: Any = None) -> list[ChunkEvent]:
        self.thread_ids.add(threading.get_ident())
        self.steps += 1
        self.max_seen_batch = max(self.max_seen_batch, len(self.active))
        if self.step_delay_s:
            time.sleep(self.step_delay_s)
        if any(r.request.text == "slow-step" and r.frames == 1 for r in self.active.values()):
            time.sleep(self.slow_step_s)
        if any(r.request.text == "step-crash" for r in self.active.values()):
            raise RuntimeError("boom in step")
        events = []
        for req_id, r in list(self.active.items()):
            if r.request.text == "no-final":
                del self.active[req_id]
                continue
            r.frames += 1
            r.pending += 1
            final = r.frames >= r.total
            if final or r.pending >= r.chunk:
                first = r.frames - r.pending
                pcm = np.repeat(np.arange(first, r.frames, dtype=np.float32), self.samples_per_frame)
                events.append(
                    ChunkEvent(
                        req_id=req_id,
                        pcm=pcm,
                        frames=r.pending,
                        final=final,
                        finish_reason="length" if final else None,
                        usage=Usage(len(r.request.text), 0, r.frames),
                    )
                )
                r.pending = 0
            if final:
                del self.active[req_id]
        return events
