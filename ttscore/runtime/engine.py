"""The continuous-batching frame loop, family-agnostic.

One `step()` is one iteration of the loop:
1. Prefill: joining requests' prompts run through the family's model in ONE batched call, at most
   `prefill_budget` prompt positions per iteration (a longer prompt continues in the next
   iterations), so a burst of joins costs the active streams one bounded call, never N serial
   prefills. A request whose prompt completes comes out with its first frame.
2. First chunks of the requests that just completed prefill are vocoded at once (they do not wait
   for the decode step).
3. Decode: every prefilled request advances by one frame in one batched call into the family's
   model (Qwen3-TTS: one talker call + one code-predictor call), so weights are read once per step.
4. Chunks that became ready are vocoded, streams batched by the exact streaming vocoder.
Requests join (`submit`: validation and prompt only) and leave (finish or `cancel`) between steps.

Incremental text (`submit(..., text_open=True)`, then `extend(req_id, text, done)`): for families
whose model takes text while it generates (FamilyModel.admit_open / extend_text; Qwen3-TTS in its
streaming prompt mode consumes one text token per frame). A sequence that has used all the text it
has so far is `waiting_for_text`: it keeps its slot (and KV row) but is neither prefilled nor
stepped until `extend` gives it more text or its end; its frames made so far are vocoded at once
(the client hears everything made while the sequence waits). How long sequences waited is kept
for the metrics (`drain_text_waits`).

Chunk schedule (`chunk_policy`): the first chunk comes after `initial_chunk_frames` frames; later
chunks are at most `chunk_frames` frames (both per request, the spec's fields), and in between:
- "fixed": every `chunk_frames` frames (the spec's literal reading; a slow stream underruns);
- "ramp": sizes double from `initial_chunk_frames` up to `chunk_frames`;
- "adaptive": a chunk is sent as soon as the audio already sent would run out before the next
  iteration plus a margin (measured iteration time), otherwise frames accumulate up to
  `chunk_frames`. A stream produced faster than real time therefore never underruns after its
  first chunk, and chunks grow as its playback buffer grows.
  A stream whose client has already played everything sent (slower than real time: overload) gets
  ramp's sizes instead of a chunk per frame, so the batch's vocoder calls stay few and large.
The exact streaming vocoder makes the audio the same for every schedule up to float rounding: ONNX
Runtime's kernels round differently for different chunk lengths (max 3e-6 measured on the tiny
checkpoint, below one 16-bit step), and the same boundaries give bit-identical audio. "adaptive"
follows the measured step time, so two runs of one request may differ by that rounding; "fixed"
and "ramp" repeat bit for bit.

Why a generation ended (`ChunkEvent.finish_reason` on its final event): "stop" (the family's model ended it:
its stop token, or a non-autoregressive family's planned length) or "length" (max_new_tokens, or the
runaway guard). The guard (`RunawayGuard`, on when the caller passes one) is checked here, the one place
every family's generation passes after each frame: a sequence whose frames reach its budget from its text
(ttscore.contract.rules.runaway_frames, recomputed as incremental text grows) ends with "length".
Cancellation and errors are the caller's (the scheduler reports them; the gateway names them "cancelled"
and "error").

Protocol: every submitted request yields exactly one ChunkEvent with final=True, unless cancelled
(cancel() removes it silently; the caller owns reporting that).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ttscore.contract.errors import InvalidRequest
from ttscore.contract.rules import DEFAULT_RUNAWAY_FACTOR, DEFAULT_RUNAWAY_MIN_S, runaway_frames
from ttscore.contract.usage import Usage
from ttscore.runtime.family import FamilyModel, Sequence, Vocoder
from ttscore.runtime.onnx import OnnxGraph

logger = logging.getLogger(__name__)

CHUNK_POLICIES = ("adaptive", "ramp", "fixed")
DEFAULT_CHUNK_POLICY = "adaptive"
DEFAULT_PREFILL_BUDGET = 256  # prompt positions per iteration
DEFAULT_VOCODER_OVERLAP = "off"  # the served default (ttscore.backend.settings vocoder_overlap)
ADAPTIVE_MARGIN = 2.0  # iterations of audio a stream keeps buffered before it is sent more


@dataclass
class ChunkEvent:
    req_id: str
    pcm: NDArray[Any]  # float32, 1-D, model sample rate
    frames: int  # codec frames in this chunk
    final: bool
    finish_reason: str | None  # "stop" | "length" on the final event
    usage: Usage
    # This chunk's frames, in-process only (offline tools, tests; chunk_outputs does not send them):
    # Qwen3-TTS codec codes [frames, G] int64, VoxCPM2 latent patches [frames, P, D] float32.
    codes: NDArray[Any] | None = None


@dataclass(frozen=True)
class RunawayGuard:
    """The runaway guard of one served family (ttscore.contract.rules.runaway_frames)."""

    seconds_per_text_token: float | None  # the family's rate (FamilyRules.seconds_per_text_token)
    factor: float = DEFAULT_RUNAWAY_FACTOR  # 0: off
    min_s: float = DEFAULT_RUNAWAY_MIN_S

    def frames(self, seq: Sequence, frame_seconds: float) -> int | None:
        return runaway_frames(self.seconds_per_text_token, seq.text_tokens, frame_seconds, self.factor, self.min_s)


@dataclass
class StepProfile:
    """Where the wall time of one `step()` went."""

    seconds: float = 0.0  # the whole iteration
    ort_seconds: float = 0.0  # inside ONNX Runtime sessions of this process
    external_seconds: float = 0.0  # inside an out-of-process vocoder (Triton BLS)
    batch: int = 0  # requests decoded
    prefill_tokens: int = 0  # prompt positions prefilled

    @property
    def outside_seconds(self) -> float:
        """The engine's and the family's own per-step work (Python, numpy)."""
        return max(0.0, self.seconds - self.ort_seconds - self.external_seconds)


@dataclass
class _Active:
    req_id: str
    seq: Sequence
    stream: Any  # the vocoder's per-stream state
    chunks_out: int = 0
    first_sent: float = 0.0  # clock() when the first chunk was made
    sent_seconds: float = 0.0  # audio seconds made so far
    no_frames: NDArray[Any] | None = None  # [0, *frame shape] in the family's dtype, once a frame was made
    waiting_since: float | None = None  # clock() when it began waiting for text
    vocoded: int = 0  # frames handed to the vocoder so far


_NO_AUDIO: NDArray[np.float32] = np.zeros(0, np.float32)


@dataclass
class _Plan:
    """Chunks taken for vocoding: their streams, the frames to decode (ttscore.runtime.engine.Generator._parts)
    and their events, whose audio the decode fills in."""

    ready: list[_Active]
    parts: list[list[tuple[Any, NDArray[Any], int]]]
    chunks: list[ChunkEvent]


class Generator:
    """Continuous batching over any family's model (see ttscore.runtime.family)."""

    def __init__(
        self,
        model: FamilyModel,
        *,
        max_batch: int = 8,
        vocoder: Vocoder | None = None,
        chunk_policy: str = DEFAULT_CHUNK_POLICY,
        prefill_budget: int = DEFAULT_PREFILL_BUDGET,
        runaway: RunawayGuard | None = None,
        clock: Callable[[], float] = time.perf_counter,
        overlap_vocoder: bool = False,
    ) -> None:
        if chunk_policy not in CHUNK_POLICIES:
            raise ValueError(f"chunk_policy must be one of {', '.join(CHUNK_POLICIES)}, got {chunk_policy!r}")
        if prefill_budget < 1:
            raise ValueError("prefill_budget must be >= 1")
        self.model = model
        self.max_batch = max_batch
        chosen = vocoder or model.vocoder
        if chosen is None:
            raise ValueError("the model was loaded without a vocoder: pass one")
        self.vocoder: Vocoder = chosen
        self.chunk_policy = chunk_policy
        self.prefill_budget = prefill_budget
        self.runaway = runaway
        self.runaway_stops = 0  # generations the guard ended, since the generator was made
        self.clock = clock
        self.last_step = StepProfile()
        self._iteration_s = 0.0  # moving average of step() wall time (adaptive chunks)
        self._active: dict[str, _Active] = {}
        self._text_waits: list[float] = []  # seconds of each finished wait for text, until drained
        # One worker that vocodes beside the model step (an in-process vocoder only: ONNX Runtime releases the GIL)
        self._overlap = (ThreadPoolExecutor(1, thread_name_prefix="vocoder")
                         if overlap_vocoder and not getattr(self.vocoder, "external", False) else None)

    @property
    def num_active(self) -> int:
        return len(self._active)

    @property
    def num_waiting(self) -> int:
        """Sequences kept in the batch while they wait for text."""
        return sum(1 for a in self._active.values() if a.seq.waiting_for_text)

    def drain_text_waits(self) -> list[float]:
        """Seconds each sequence waited for text, per wait that ended since the last call."""
        waits, self._text_waits = self._text_waits, []
        return waits

    # --- joining --------------------------------------------------------------------------------

    def submit(self, req_id: str, request: Any, text_open: bool = False) -> None:
        """Validate and queue for prefill (the family's admit). Raises InvalidRequest naming the bad field.
        `text_open`: the request's text is a beginning; `extend` gives the rest (incremental text)."""
        if req_id in self._active:
            raise InvalidRequest(f"request id {req_id!r} is already active", "request_id")
        if len(self._active) >= self.max_batch:
            # The caller (Triton's scheduler) admits at most max_batch requests; this is its bug.
            raise RuntimeError(f"generator already holds max_batch={self.max_batch} requests")
        if text_open:
            admit_open = getattr(self.model, "admit_open", None)
            if admit_open is None:
                raise InvalidRequest("this model cannot take more text while it generates", "text")
            seq = admit_open(request)
        else:
            seq = self.model.admit(request)
        stream = self.vocoder.new_stream()
        if seq.vocoder_prefix is not None:
            self.vocoder.decode([(stream, seq.vocoder_prefix)])
        a = _Active(req_id, seq, stream)
        self._active[req_id] = a
        self._note_wait(a)

    def extend(self, req_id: str, text: str, done: bool) -> bool:
        """More text for an open request (`done`: its text is complete). False: no such request."""
        a = self._active.get(req_id)
        if a is None:
            return False
        extend_text = getattr(self.model, "extend_text", None)
        if extend_text is None:
            raise InvalidRequest("this model cannot take more text while it generates", "text")
        extend_text(a.seq, text, done)
        self._note_wait(a)
        return True

    def _note_wait(self, a: _Active) -> None:
        """Track when a sequence starts and stops waiting for text."""
        if a.seq.waiting_for_text and a.waiting_since is None:
            a.waiting_since = self.clock()
        elif not a.seq.waiting_for_text and a.waiting_since is not None:
            self._text_waits.append(self.clock() - a.waiting_since)
            a.waiting_since = None

    def cancel(self, req_id: str) -> bool:
        """Drop a request now; its KV slot and batch slot are freed before the next step."""
        a = self._active.pop(req_id, None)
        if a is None:
            return False
        if a.waiting_since is not None:
            self._text_waits.append(self.clock() - a.waiting_since)
        self.model.release(a.seq)
        return True

    # --- the step -------------------------------------------------------------------------------

    def step(self, emit: Callable[[list[ChunkEvent]], None] | None = None) -> list[ChunkEvent]:
        """Prefill joining requests (within the budget), advance every prefilled request by one
        frame, and return the audio chunks that became ready. `emit`: receives the first chunks
        made by the prefill at once, before the decode call (they are then not returned), so a
        joining request's time to first audio does not include the batch's decode step."""
        t0, ort0, started = time.perf_counter(), OnnxGraph.seconds, self.clock()
        profile = StepProfile()
        events: list[ChunkEvent] = []
        work = self._prefill_work()
        if work:
            self.model.prefill(work)
            profile.prefill_tokens = sum(n for _, n in work)
            self._guard()
            first = self._vocode(profile)
            if emit is not None and first:
                emit(first)
            else:
                events += first
        running = [
            a.seq for a in self._active.values()
            if a.seq.finished is None and not a.seq.waiting_for_text and a.seq.prefilled >= a.seq.prompt_tokens
        ]
        behind = None
        if running and self._overlap is not None:
            # Streams already sent audio: their ready chunks are decoded beside this model step (the frames it
            # makes wait for the next step); first chunks are decoded right after it, so TTFA stays put.
            plan = self._plan(lambda a: a.chunks_out > 0)
            if plan is not None:
                behind = (plan, self._overlap.submit(self._decode, plan))
        if running:
            self.model.step(running)
            profile.batch = len(running)
            self._guard()
        for a in self._active.values():
            self._note_wait(a)
        if behind is not None:
            events += self._events(behind[0], behind[1].result())
        events += self._vocode(profile, (lambda a: a.chunks_out == 0) if running and self._overlap else None)
        profile.seconds = time.perf_counter() - t0
        profile.ort_seconds = OnnxGraph.seconds - ort0
        self.last_step = profile
        took = self.clock() - started
        self._iteration_s = took if self._iteration_s == 0 else 0.8 * self._iteration_s + 0.2 * took
        return events

    def _guard(self) -> None:
        """End ("length") every sequence whose frames reached its runaway budget."""
        if self.runaway is None:
            return
        frame_s = self.model.frame_seconds
        for a in self._active.values():
            seq = a.seq
            if seq.finished is not None or seq.frames_out == 0:
                continue
            budget = self.runaway.frames(seq, frame_s)
            if budget is not None and seq.frames_out >= budget:
                seq.finished = "length"
                self.runaway_stops += 1
                logger.info("request %s reached the runaway guard's %d frames (%d text tokens); ended as length",
                            a.req_id, budget, seq.text_tokens)

    def _prefill_work(self) -> list[tuple[Sequence, int]]:
        """Joining requests in arrival order, as many prompt positions as the budget allows."""
        budget = self.prefill_budget
        work: list[tuple[Sequence, int]] = []
        for a in self._active.values():
            left = a.seq.prompt_tokens - a.seq.prefilled
            if left <= 0 or a.seq.finished is not None or a.seq.waiting_for_text:
                continue
            n = min(left, budget)
            work.append((a.seq, n))
            budget -= n
            if budget == 0:
                break
        return work

    def _ready(self, a: _Active, now: float) -> bool:
        seq = a.seq
        n = len(seq.pending)
        if seq.finished is not None:
            return True
        if n == 0:
            return False
        if seq.waiting_for_text:
            return True  # no frame comes until more text does: send what was made
        if a.chunks_out == 0:
            return n >= seq.initial_chunk_frames
        if n >= seq.chunk_frames:
            return True
        ramp = min(seq.chunk_frames, seq.initial_chunk_frames << min(a.chunks_out, 16))
        if self.chunk_policy == "ramp":
            return n >= ramp
        if self.chunk_policy == "adaptive":
            buffered = a.sent_seconds - (now - a.first_sent)  # audio the client has not played yet
            if buffered <= 0:
                # The client has played everything: the stream is behind real time and no schedule keeps it fed.
                # Chunks then grow as ramp's do: fewer, larger vocoder calls (each call's fixed cost, e.g. reading a
                # codec's attention windows, is paid once per chunk) instead of one per frame, which would slow
                # every stream in the batch further.
                return n >= ramp
            # (a chunk vocoded beside the next step leaves one step later: one more step of margin)
            return buffered < (ADAPTIVE_MARGIN + (self._overlap is not None)) * self._iteration_s
        return False

    def _vocode(self, profile: StepProfile, which: Callable[[_Active], bool] | None = None) -> list[ChunkEvent]:
        """Vocode, now, the ready streams (those `which` picks) and return their chunks."""
        plan = self._plan(which)
        if plan is None:
            return []
        t0, ort0 = time.perf_counter(), OnnxGraph.seconds
        pcms = self._decode(plan)
        if getattr(self.vocoder, "external", False):
            profile.external_seconds += (time.perf_counter() - t0) - (OnnxGraph.seconds - ort0)
        return self._events(plan, pcms)

    def _plan(self, which: Callable[[_Active], bool] | None = None) -> _Plan | None:
        """Take the ready streams' pending frames (the loop thread's part of vocoding: everything the next
        model step may change is read here): what to decode, and each chunk's event but its audio."""
        now = self.clock()
        ready = [a for a in self._active.values() if (which is None or which(a)) and self._ready(a, now)]
        if not ready:
            return None
        parts = [self._parts(a) for a in ready]  # per stream: its frames, cut where the sequence breaks
        frame_s = self.model.frame_seconds
        chunks = []
        for a in ready:
            seq = a.seq
            n = len(seq.pending)
            if n:
                codes = np.stack(seq.pending)
                a.no_frames = codes[:0]
            else:  # an empty (final) chunk: no frames, of the family's frame shape and dtype
                codes = a.no_frames if a.no_frames is not None else np.zeros((0, self.model.num_codebooks), np.int64)
            seq.pending = []
            if a.chunks_out == 0:
                a.first_sent = now
            a.chunks_out += 1
            a.sent_seconds += n * frame_s
            chunks.append(ChunkEvent(
                req_id=a.req_id, pcm=_NO_AUDIO, frames=n, final=seq.finished is not None,
                finish_reason=seq.finished, usage=Usage(seq.text_tokens, seq.audio_tokens, seq.frames_out),
                codes=codes))
        return _Plan(ready, parts, chunks)

    def _decode(self, plan: _Plan) -> list[NDArray[Any]]:
        """The planned chunks' audio: the vocoder's part, which touches only the planned streams' vocoder state
        (so it may run beside the next model step)."""
        work = [(stream, frames) for p in plan.parts for stream, frames, _ in p if len(frames)]
        decoded = iter(self.vocoder.decode(work)) if work else iter(())
        return [self._joined(p, decoded) for p in plan.parts]

    def _events(self, plan: _Plan, pcms: list[NDArray[Any]]) -> list[ChunkEvent]:
        """The planned chunks with their audio; a final one's request leaves the batch."""
        for a, ev, pcm in zip(plan.ready, plan.chunks, pcms, strict=True):
            ev.pcm = np.asarray(pcm, np.float32)
            if ev.final and self._active.get(a.req_id) is a:
                del self._active[a.req_id]
                self.model.release(a.seq)
        return plan.chunks

    def _parts(self, a: _Active) -> list[tuple[Any, NDArray[Any], int]]:
        """(stream, frames, silence after) of a ready sequence's pending frames: one part, or one per segment of a
        sequence that `breaks` there (Sequence.breaks), each later one on a new vocoder stream."""
        seq = a.seq
        frames = np.stack(seq.pending) if seq.pending else np.zeros((0, 0))
        if not seq.breaks:
            a.vocoded += len(frames)
            return [(a.stream, frames, 0)]
        parts: list[tuple[Any, NDArray[Any], int]] = []
        start = 0
        for end in range(len(frames) + 1):
            pause = seq.breaks.pop(a.vocoded + end, None)
            if pause is None:
                continue
            parts.append((a.stream, frames[start:end], pause))
            a.stream = self.vocoder.new_stream()
            start = end
        parts.append((a.stream, frames[start:], 0))
        a.vocoded += len(frames)
        return parts

    @staticmethod
    def _joined(parts: list[tuple[Any, NDArray[Any], int]], decoded: Iterator[NDArray[Any]]) -> NDArray[Any]:
        """A sequence's chunk of audio: its parts' decoded audio, each followed by its silence."""
        pieces: list[NDArray[Any]] = []
        for _, frames, pause in parts:
            if len(frames):
                pieces.append(np.asarray(next(decoded), np.float32))
            if pause:
                pieces.append(np.zeros(pause, np.float32))
        return np.concatenate(pieces) if pieces else np.zeros(0, np.float32)

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
