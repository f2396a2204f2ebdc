"""The continuous-batching frame loop, family-agnostic.

Every `step()` advances ALL active requests by one codec frame with one batched call into the
family's model (Qwen3-TTS: one talker decode + one code-predictor call), so weights are read once
per step for the whole batch. Requests join (`submit`, which runs the family's prefill) and leave
(finish or `cancel`) between steps. Audio is
decoded by the exact streaming vocoder as soon as a request has `initial_chunk_frames` frames, then
every `chunk_frames`, and on finish.

Protocol: every submitted request yields exactly one ChunkEvent with final=True, unless cancelled
(cancel() removes it silently; the caller owns reporting that).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ttscore.contract.errors import InvalidRequest
from ttscore.contract.usage import Usage
from ttscore.runtime.family import FamilyModel, Sequence, Vocoder

logger = logging.getLogger(__name__)


@dataclass
class ChunkEvent:
    req_id: str
    pcm: NDArray[Any]  # float32, 1-D, model sample rate
    frames: int  # codec frames in this chunk
    final: bool
    finish_reason: str | None  # "stop" | "length" on the final event
    usage: Usage
    codes: NDArray[Any] | None = None  # [frames, G] codec frames of this chunk


@dataclass
class _Active:
    req_id: str
    seq: Sequence
    stream: Any  # the vocoder's per-stream state
    chunks_out: int = 0


class Generator:
    """Continuous batching over any family's model (see ttscore.runtime.family)."""

    def __init__(self, model: FamilyModel, *, max_batch: int = 8, vocoder: Vocoder | None = None) -> None:
        self.model = model
        self.max_batch = max_batch
        chosen = vocoder or model.vocoder
        if chosen is None:
            raise ValueError("the model was loaded without a vocoder: pass one")
        self.vocoder: Vocoder = chosen
        self._active: dict[str, _Active] = {}

    @property
    def num_active(self) -> int:
        return len(self._active)

    # --- joining --------------------------------------------------------------------------------

    def submit(self, req_id: str, request: Any) -> None:
        """Validate and prefill (the family's admit). Raises InvalidRequest naming the bad field."""
        if req_id in self._active:
            raise InvalidRequest(f"request id {req_id!r} is already active", "request_id")
        if len(self._active) >= self.max_batch:
            # The caller (Triton's scheduler) admits at most max_batch requests; this is its bug.
            raise RuntimeError(f"generator already holds max_batch={self.max_batch} requests")
        seq = self.model.admit(request)
        stream = self.vocoder.new_stream()
        if seq.vocoder_prefix is not None:
            self.vocoder.decode([(stream, seq.vocoder_prefix)])
        self._active[req_id] = _Active(req_id, seq, stream)

    def cancel(self, req_id: str) -> bool:
        """Drop a request now; its KV cache and batch slot are freed before the next step."""
        return self._active.pop(req_id, None) is not None

    # --- the step -------------------------------------------------------------------------------

    def step(self) -> list[ChunkEvent]:
        """Advance every active request by one frame; return the audio chunks that became ready."""
        running = [a.seq for a in self._active.values() if a.seq.finished is None]
        if running:
            self.model.step(running)
        events = self._vocode(list(self._active.values()))
        for ev in events:
            if ev.final:
                self._active.pop(ev.req_id, None)
        return events

    def _vocode(self, actives: list[_Active]) -> list[ChunkEvent]:
        ready: list[_Active] = []
        for a in actives:
            seq = a.seq
            threshold = seq.initial_chunk_frames if a.chunks_out == 0 else seq.chunk_frames
            if seq.finished is not None or len(seq.pending) >= threshold:
                ready.append(a)
        if not ready:
            return []
        work = [(a.stream, np.stack(a.seq.pending)) for a in ready if a.seq.pending]
        pcms = iter(self.vocoder.decode(work)) if work else iter(())
        events = []
        for a in ready:
            seq = a.seq
            n = len(seq.pending)
            pcm = next(pcms) if n else np.zeros(0, np.float32)
            codes = np.stack(seq.pending) if n else np.zeros((0, self.model.num_codebooks), np.int64)
            seq.pending = []
            a.chunks_out += 1
            events.append(
                ChunkEvent(
                    req_id=a.req_id,
                    pcm=np.asarray(pcm, np.float32),
                    frames=n,
                    final=seq.finished is not None,
                    finish_reason=seq.finished,
                    usage=Usage(seq.text_tokens, seq.audio_tokens, seq.frames_out),
                    codes=codes,
                )
            )
        return events

    # --- convenience ----------------------------------------------------------------------------

    def synthesize(self, request: Any, req_id: str = "offline") -> Iterator[ChunkEvent]:
        """Run one request to completion (offline use), yielding its chunks as they are decoded."""
        self.submit(req_id, request)
        try:
            while req_id in self._active:
                for ev in self.step():
                    if ev.req_id == req_id:
                        yield ev
        finally:
            self.cancel(req_id)
