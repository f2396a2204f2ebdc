"""speech_generation: the scheduler that feeds the engine from Triton's decoupled requests.

Keep-alives: the time between two chunks of a stream can be longer than the gateway's `stall_timeout_s` (OmniVoice
at real size computes a sentence chunk for tens of seconds, in one step or over many). While the server shows a
sign of life (a step loop iteration began, or an ONNX Runtime call returned, within `KEEPALIVE_PROGRESS_S`), every
admitted request that has already streamed and has been sent nothing for `keepalive_s` gets a keep-alive
(ttscore.contract.tensors.keepalive_outputs), which the gateway drops after restarting its stall clock. A wedged
step (no loop iteration, no graph returning) sends none, so the gateway's stall limit still cuts its streams."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ttscore.backend.settings import DEFAULT_KEEPALIVE_S, ModelSettingsError, SpeechGenerationSettings
from ttscore.backend.triton_metrics import NullMetrics, SchedulerMetrics
from ttscore.contract import tensors as triton_io
from ttscore.contract.errors import ArtifactError, InvalidRequest, UpstreamUnavailable
from ttscore.contract.tensors import CANCELLED, INTERNAL, INTERNAL_MESSAGE, UNAVAILABLE, WireError
from ttscore.runtime.onnx import OnnxGraph

log = logging.getLogger(__name__)


def request_decoder(settings: SpeechGenerationSettings) -> Callable[[Mapping[str, np.ndarray]], Any]:
    """The served checkpoint's family's request-from-tensors (ttscore.runtime.family.Family): turns
    a speech_generation request into what the family's `admit` takes; raises InvalidRequest naming
    the tensor."""
    from ttscore.contract.manifest import read_manifest
    from ttscore.runtime.families import FAMILIES

    try:
        family = read_manifest(settings.artifacts_dir).family
    except ArtifactError as exc:
        raise ModelSettingsError(f"speech_generation: {exc}") from None
    if family not in FAMILIES:
        raise ModelSettingsError(f"speech_generation: unknown model family {family!r} (known: {', '.join(FAMILIES)})")
    return FAMILIES[family].request_from_tensors


# --- speech_generation: the step loop -----------------------------------------------------------


class ResponseStream(Protocol):
    """One request's decoupled response sender, as the scheduler sees it."""

    def send(self, outputs: dict[str, np.ndarray] | None, error: WireError | None, final: bool) -> None: ...

    def is_cancelled(self) -> bool: ...


class GeneratorLike(Protocol):
    @property
    def num_active(self) -> int: ...

    def submit(self, req_id: str, request: Any) -> None: ...

    def step(self, emit: Callable[[list[Any]], None] | None = None) -> list[Any]: ...

    def cancel(self, req_id: str) -> bool: ...

    # Incremental text (ttscore.runtime.engine.Generator): `submit(..., text_open=True)` and
    # `extend`; a generator without them serves no open requests.
    def extend(self, req_id: str, text: str, done: bool) -> bool: ...


def _submit(generator: GeneratorLike, req_id: str, request: Any, text_open: bool) -> None:
    if text_open:
        generator.submit(req_id, request, text_open=True)  # type: ignore[call-arg]
    else:
        generator.submit(req_id, request)


def load_generator(settings: SpeechGenerationSettings) -> GeneratorLike:
    """The production generator: the checkpoint's family model (ONNX Runtime sessions) + continuous batching."""
    from ttscore.contract.manifest import read_manifest
    from ttscore.runtime.engine import Generator, RunawayGuard  # heavy imports below: only inside the server
    from ttscore.runtime.families import FAMILIES, load_model

    inline = settings.vocoder == "inline"
    if settings.thread_pool == "shared":
        from ttscore.runtime.onnx import share_thread_pool

        share_thread_pool(settings.intra_op_threads)  # before the first session of this stub process
    try:
        # Voice features come from the voice-features models, so this model never loads the
        # encoders; with a BLS vocoder it does not load the vocoder graph either.
        model = load_model(
            settings.artifacts_dir, threads=settings.intra_op_threads or None, vocoder=inline, encoders=False
        )
    except ArtifactError as exc:
        raise ModelSettingsError(f"speech_generation: {exc}") from None
    vocoder = None
    if not inline:
        from ttscore.backend.glue import BlsVocoder  # pb_utils: only inside the stub

        vocoder = BlsVocoder(settings.vocoder, model.vocoder_state_size, model.vocoder_feeds)
    memory = model.memory()
    if "kv_bytes_per_position" in memory:
        log.info(
            "KV arena: %d bytes per cached position per request; a request holds at most its prompt + "
            "max_new_tokens positions",
            memory["kv_bytes_per_position"],
        )
    rules = FAMILIES[read_manifest(settings.artifacts_dir).family].rules
    runaway = RunawayGuard(rules.seconds_per_text_token, settings.runaway_factor, settings.runaway_min_s)
    if runaway.seconds_per_text_token is not None and runaway.factor > 0:
        log.info("runaway guard: at most %g s + %g x %g s per text token of audio per generation",
                 runaway.min_s, runaway.factor, runaway.seconds_per_text_token)
    return Generator(
        model,
        max_batch=settings.max_active_requests,
        vocoder=vocoder,
        chunk_policy=settings.chunk_policy,
        prefill_budget=settings.prefill_token_budget,
        overlap_vocoder=settings.vocoder_overlap == "on",
        runaway=runaway,
    )


@dataclass
class _Entry:
    req_id: str  # our own unique id (Triton request ids may be empty or repeated)
    triton_id: str
    request: Any
    stream: ResponseStream
    done: bool = False
    streaming: bool = False  # a response went out (keep-alives only then: before, the gateway's total limit holds)
    last_sent: float = 0.0  # time.monotonic() of its last response
    text_key: str | None = None  # incremental text: the key its extensions name
    extensions: list[_Extension] = field(default_factory=list)  # arrived before it was admitted


@dataclass
class _Extension:
    """More text for the open request whose text key is `key` (incremental text); answered with an
    empty FINAL response once applied (or held for a request not admitted yet), an error otherwise."""

    key: str
    text: str
    done: bool
    stream: ResponseStream
    arrived: float = 0.0


ORPHAN_EXTENSION_S = 10.0  # an extension whose request has not arrived by then is refused
# A streaming request sent nothing for keepalive_s (settings.DEFAULT_KEEPALIVE_S) gets a keep-alive while a loop
# iteration began or a graph call returned within this long (none without such a sign of life: a real stall); a
# single graph call may then take up to the gateway's stall_timeout_s past the last keep-alive
KEEPALIVE_PROGRESS_S = 15.0
ENDED_KEYS = 1024  # text keys of ended requests remembered (their extensions are refused at once)

@dataclass
class SchedulerStats:
    steps: int = 0
    submitted: int = 0
    completed: int = 0
    cancelled: int = 0
    rejected: int = 0
    failed: int = 0
    step_seconds: float = 0.0
    outside_seconds: float = 0.0  # of step_seconds, outside model calls (StepProfile.outside_seconds)


class GenerationScheduler:
    """Feeds a Generator from a thread-safe inbox and streams its chunks back.

    Protocol obligation: EXACTLY ONE response with the FINAL flag per request on every path --
    the final chunk (success), INVALID_ARG (rejected at submit), CANCELLED (client cancelled),
    UNAVAILABLE (queue full / shutting down), INTERNAL (unexpected exception, logged) or, for a
    health probe, an empty response (or UNAVAILABLE when the loop cannot serve). `_finish`
    is the only place that sends FINAL and it refuses to send twice.

    Threading: `submit` is called from Triton's execute(); everything else runs on the loop
    thread, which alone touches the Generator (it is not thread-safe).
    """

    def __init__(
        self,
        generator: GeneratorLike,
        max_active: int,
        max_pending: int,
        idle_wait_s: float = 0.05,
        metrics: SchedulerMetrics | None = None,
        stuck_after_s: float = 120.0,
        keepalive_s: float = DEFAULT_KEEPALIVE_S,
        progressed: Callable[[], float] | None = None,
    ) -> None:
        self.generator = generator
        self.metrics: SchedulerMetrics = metrics or NullMetrics()  # ttscore.backend.triton_metrics
        self.max_active = max_active
        self.max_pending = max_pending
        self.idle_wait_s = idle_wait_s
        # A loop iteration (one batched step) that takes this long means the loop is wedged: health
        # probes then fail, so the gateway reloads the model instead of letting its streams stall.
        self.stuck_after_s = stuck_after_s
        self._heartbeat = time.monotonic()  # last loop iteration
        self.stats = SchedulerStats()
        self._inbox: queue.Queue[_Entry] = queue.Queue()
        self._pending: deque[_Entry] = deque()
        self._active: dict[str, _Entry] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ids = 0
        self._lock = threading.Lock()
        self._waiting = 0  # inbox + pending, for admission control from execute()
        self._orphans: list[_Extension] = []  # extensions whose request has not arrived yet
        self._ended_keys: OrderedDict[str, None] = OrderedDict()  # text keys of requests that ended
        self._keys_lock = threading.Lock()
        # Keep-alives (module docstring): 0 turns them off; `progressed` is the model's last sign of life
        # (default: when an ONNX Runtime call last returned).
        self.keepalive_s = keepalive_s
        self._progressed = progressed or (lambda: OnnxGraph.progressed)
        self._send_lock = threading.Lock()  # responses go out from the loop and the keep-alive thread
        self.keepalives_sent = 0

    # --- called from execute() ------------------------------------------------------------------

    def submit(self, request: Any, stream: ResponseStream, triton_id: str = "", text_key: str | None = None) -> str:
        """Queue a request. `text_key`: its text is a beginning (incremental text); `extend` calls
        naming the key give the rest."""
        entry = _Entry("", triton_id, request, stream, text_key=text_key)
        error: WireError | None = None
        # Under the lock, so stop() cannot drain the inbox between the check and the put.
        with self._lock:
            self._ids += 1
            entry.req_id = f"r{self._ids}"
            free_slots = max(0, self.max_active - len(self._active))
            if self._stop.is_set():
                error = WireError(UNAVAILABLE, "server is shutting down")
            elif self._waiting >= self.max_pending + free_slots:
                error = WireError(UNAVAILABLE, "too many requests in the queue; retry later")
            else:
                self._waiting += 1
                self._inbox.put(entry)
        if error is not None:
            self._ended("rejected")
            self._finish(entry, error=error)
        return entry.req_id

    def extend(self, key: str, text: str, done: bool, stream: ResponseStream) -> None:
        """More text for the open request of `key` (from execute(); applied by the loop thread)."""
        self._inbox.put(_Extension(key, text, done, stream, time.monotonic()))  # type: ignore[arg-type]

    def reject(self, stream: ResponseStream, error: WireError) -> None:
        """FINAL error for a request that never reached the queue (e.g. undecodable tensors)."""
        self._ended("rejected")
        self._finish(_Entry("-", "", None, stream), error=error)

    def probe(self, stream: ResponseStream) -> None:
        """Answer a health probe at once, bypassing the queue (a full queue is not a fault): an empty
        FINAL response while the step loop runs, UNAVAILABLE + FINAL when it cannot serve."""
        problem = self.health_problem()
        self._finish(_Entry("probe", "", None, stream), error=WireError(UNAVAILABLE, problem) if problem else None)

    def health_problem(self, now: float | None = None) -> str | None:
        """Why this scheduler cannot serve (None: it can)."""
        if self._stop.is_set():
            return "server is shutting down"
        if self._thread is None or not self._thread.is_alive():
            return "the step loop is not running"
        idle = (time.monotonic() if now is None else now) - self._heartbeat
        if idle > self.stuck_after_s:
            return f"the step loop has not advanced for {idle:.0f} s"
        return None

    # --- loop thread ----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="speech-generation-steps", daemon=True)
        self._thread.start()
        if self.keepalive_s > 0:
            threading.Thread(target=self._keep_alive, name="speech-generation-keepalive", daemon=True).start()

    def _keep_alive(self) -> None:
        while not self._stop.wait(self.keepalive_s / 4):
            try:
                self.send_keepalives(time.monotonic())
            except Exception:  # never let a keep-alive take the thread down
                log.exception("keep-alive round failed")

    def send_keepalives(self, now: float) -> int:
        """One round (the keep-alive thread's, every keepalive_s / 4): a keep-alive to every admitted request that
        has streamed and has been sent nothing for keepalive_s, while the server shows a sign of life. Returns how
        many."""
        if self.keepalive_s <= 0 or now - max(self._heartbeat, self._progressed()) > KEEPALIVE_PROGRESS_S:
            return 0  # off, or no sign of life: let the gateway's stall limit see it
        sent = 0
        for entry in list(self._active.values()):
            with self._send_lock:
                if entry.done or not entry.streaming or now - entry.last_sent < self.keepalive_s:
                    continue
                try:
                    entry.stream.send(triton_io.keepalive_outputs(), None, False)
                except Exception:
                    log.warning("keep-alive send failed for %s", entry.triton_id or entry.req_id, exc_info=True)
                    continue
                entry.last_sent = now
                sent += 1
        self.keepalives_sent += sent
        return sent

    def stop(self, timeout_s: float = 30.0) -> None:
        """Signal, join, then fail whatever is left (UNAVAILABLE + FINAL)."""
        with self._lock:
            self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.error("step loop did not stop within %.0f s", timeout_s)
                return  # it still owns the generator; the process is going away
        self._drain_inbox()
        for ext in self._orphans:
            self._finish(_Entry("ext", "", None, ext.stream), error=WireError(UNAVAILABLE, "server is shutting down"))
        self._orphans.clear()
        for entry in list(self._active.values()) + list(self._pending):
            self._ended("failed" if entry.req_id in self._active else "rejected")
            self._abort(entry, WireError(UNAVAILABLE, "server is shutting down"))
        self._pending.clear()
        self.metrics.load(0, 0)

    @property
    def num_active(self) -> int:
        return len(self._active)

    @property
    def num_pending(self) -> int:
        return len(self._pending) + self._inbox.qsize()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._heartbeat = time.monotonic()
            try:
                busy = self.run_once()
            except Exception:  # a bug in the loop itself must not kill the thread silently
                log.exception("step loop iteration failed")
                self._fail_active()
                busy = False
            if not busy:
                try:
                    item = self._inbox.get(timeout=self.idle_wait_s)
                except queue.Empty:
                    continue
                self._take(item)

    def run_once(self) -> bool:
        """One iteration: admit, drop cancelled, one generator step, stream its chunks.
        Returns False when there was nothing to do."""
        self._drain_inbox()
        self._admit()
        self._apply_extensions()
        self._drop_cancelled()
        self.metrics.load(self.num_pending, len(self._active))
        self._report_text_waits()
        if not self._active:
            return bool(self._pending)
        if self._all_waiting():
            return False  # every request waits for text: sleep on the inbox, do not spin
        batch = len(self._active)
        t0 = time.perf_counter()
        try:
            # First chunks made by a prefill go out at once, before the batch's decode step.
            events = self.generator.step(self._dispatch)
        except UpstreamUnavailable as exc:  # e.g. the shared code2wav's stub died: retryable
            log.error("generator step failed (%s); failing its %d active requests", exc, len(self._active))
            self._fail_active(WireError(UNAVAILABLE, "the vocoder is unavailable; retry later"))
            return True
        except Exception:
            log.exception("generator step failed; failing its %d active requests", len(self._active))
            self._fail_active()
            return True
        seconds = time.perf_counter() - t0
        self.stats.steps += 1
        self.stats.step_seconds += seconds
        self.metrics.step(batch, seconds)
        # The production Generator profiles its steps (ttscore.runtime.engine.StepProfile); test
        # doubles need not.
        profile = getattr(self.generator, "last_step", None)
        if profile is not None:
            self.stats.outside_seconds += profile.outside_seconds
            memory = getattr(getattr(self.generator, "model", None), "memory", None)
            kv = memory().get("kv_arena_bytes", 0) if callable(memory) else 0
            self.metrics.profile(profile.outside_seconds, kv)
        self._dispatch(events)
        if self._active and self.generator.num_active == 0:
            # Safety net: the generator dropped requests without a final event.
            log.error("generator lost %d requests", len(self._active))
            self._fail_active()
        self.metrics.load(self.num_pending, len(self._active))
        self._report_text_waits()
        return True

    def _all_waiting(self) -> bool:
        waiting = getattr(self.generator, "num_waiting", 0)
        return isinstance(waiting, int) and waiting >= len(self._active) > 0

    def _report_text_waits(self) -> None:
        drain = getattr(self.generator, "drain_text_waits", None)
        if drain is not None:
            self.metrics.text_waits(int(getattr(self.generator, "num_waiting", 0)), drain())

    def _dispatch(self, events: list[Any]) -> None:
        """Send each chunk event to its request's stream (FINAL for the last one)."""
        for event in events:
            entry = self._active.get(event.req_id)
            if entry is None:  # cancelled meanwhile
                continue
            try:
                outputs = triton_io.chunk_outputs(event)
            except Exception:
                log.exception("bad chunk event for %s", entry.triton_id or entry.req_id)
                self._ended("failed")
                self._abort(entry, WireError(INTERNAL, INTERNAL_MESSAGE))
                continue
            if event.final:
                self._active.pop(entry.req_id, None)
                self._ended("completed")
                self._finish(entry, outputs=outputs)
            elif not self._send(entry, outputs):
                self._ended("cancelled")  # the client went away
                self._abort(entry, None)

    def _drain_inbox(self) -> None:
        while True:
            try:
                self._take(self._inbox.get_nowait())
            except queue.Empty:
                return

    def _take(self, item: _Entry | _Extension) -> None:
        if isinstance(item, _Extension):
            self._orphans.append(item)  # matched with its request by _apply_extensions
        else:
            self._pending.append(item)

    def _apply_extensions(self) -> None:
        """Give each extension to its request: applied to an admitted one, held by a pending one,
        kept a while for one that has not arrived, refused for one that is gone or complete."""
        if not self._orphans:
            return
        left: list[_Extension] = []
        now = time.monotonic()
        for ext in self._orphans:
            target = next((e for e in self._active.values() if e.text_key == ext.key), None)
            if target is not None:
                self._extend(target, ext)
                continue
            waiting = next((e for e in self._pending if e.text_key == ext.key), None)
            if waiting is not None:
                waiting.extensions.append(ext)
                self._finish(_Entry("ext", "", None, ext.stream))
            elif not self._key_ended(ext.key) and now - ext.arrived < ORPHAN_EXTENSION_S:
                left.append(ext)
            else:
                self._finish(_Entry("ext", "", None, ext.stream),
                             error=WireError(triton_io.INVALID_ARG, "no open request takes this text", "text"))
        self._orphans = left

    def _key_ended(self, key: str) -> bool:
        with self._keys_lock:
            return key in self._ended_keys

    def _extend(self, entry: _Entry, ext: _Extension, answered: bool = False) -> None:
        error: WireError | None = None
        try:
            if not self.generator.extend(entry.req_id, ext.text, ext.done):
                error = WireError(triton_io.INVALID_ARG, "no open request takes this text", "text")
        except InvalidRequest as exc:
            error = triton_io.invalid_request_error(exc)
        except Exception:
            log.exception("extending %s failed", entry.triton_id or entry.req_id)
            self._ended("failed")
            self._abort(entry, WireError(INTERNAL, INTERNAL_MESSAGE))
            error = WireError(INTERNAL, INTERNAL_MESSAGE)
        if not answered:
            self._finish(_Entry("ext", "", None, ext.stream), error=error)

    def _admit(self) -> None:
        while self._pending and len(self._active) < self.max_active:
            entry = self._pending.popleft()
            with self._lock:
                self._waiting -= 1
            if self._cancelled(entry):
                self._ended("cancelled")
                self._finish(entry, error=WireError(CANCELLED, "request cancelled"))
                continue
            t0 = time.perf_counter()
            try:
                _submit(self.generator, entry.req_id, entry.request, entry.text_key is not None)  # prompt + prefill
            except InvalidRequest as exc:
                self._ended("rejected")
                self._finish(entry, error=triton_io.invalid_request_error(exc))
                continue
            except Exception:
                log.exception("submit failed for %s", entry.triton_id or entry.req_id)
                self._ended("failed")
                self._finish(entry, error=WireError(INTERNAL, INTERNAL_MESSAGE))
                continue
            self.metrics.prefill(time.perf_counter() - t0)
            self.stats.submitted += 1
            self._active[entry.req_id] = entry
            for ext in entry.extensions:  # text that came while it waited for a slot (already answered)
                if entry.req_id in self._active:
                    self._extend(entry, ext, answered=True)
            entry.extensions.clear()

    def _drop_cancelled(self) -> None:
        for entry in list(self._active.values()):
            if self._cancelled(entry):
                self._ended("cancelled")
                log.info("request %s cancelled by the client; released", entry.triton_id or entry.req_id)
                self._abort(entry, WireError(CANCELLED, "request cancelled"))

    def _fail_active(self, error: WireError | None = None) -> None:
        for entry in list(self._active.values()):
            self._ended("failed")
            self._abort(entry, error or WireError(INTERNAL, INTERNAL_MESSAGE))

    def _abort(self, entry: _Entry, error: WireError | None) -> None:
        """Remove from the generator (frees its KV cache now) and send the FINAL error."""
        self._active.pop(entry.req_id, None)
        try:
            self.generator.cancel(entry.req_id)
        except Exception:
            log.exception("generator.cancel failed for %s", entry.req_id)
        self._finish(entry, error=error or WireError(INTERNAL, INTERNAL_MESSAGE))

    def _ended(self, outcome: str) -> None:
        """Count how a request ended (stats + metrics; outcomes: ttscore.backend.triton_metrics.OUTCOMES)."""
        setattr(self.stats, outcome, getattr(self.stats, outcome) + 1)
        self.metrics.finished(outcome)

    @staticmethod
    def _cancelled(entry: _Entry) -> bool:
        try:
            return bool(entry.stream.is_cancelled())
        except Exception:
            log.exception("is_cancelled failed; treating the request as cancelled")
            return True

    def _send(self, entry: _Entry, outputs: dict[str, np.ndarray]) -> bool:
        try:
            with self._send_lock:
                entry.stream.send(outputs, None, False)
                entry.streaming, entry.last_sent = True, time.monotonic()
            return True
        except Exception:
            log.warning("send failed for %s; dropping it", entry.triton_id or entry.req_id, exc_info=True)
            return False

    def _finish(
        self, entry: _Entry, outputs: dict[str, np.ndarray] | None = None, error: WireError | None = None
    ) -> None:
        if entry.text_key is not None:  # its later extensions are refused at once, not kept as orphans
            with self._keys_lock:  # (submit() may refuse a request from execute()'s thread)
                self._ended_keys[entry.text_key] = None
                while len(self._ended_keys) > ENDED_KEYS:
                    self._ended_keys.popitem(last=False)
        with self._send_lock:
            if entry.done:
                log.error("refusing a second FINAL for %s", entry.triton_id or entry.req_id)
                return
            entry.done = True
        try:
            entry.stream.send(outputs, error, True)
        except Exception:
            log.warning("final send failed for %s", entry.triton_id or entry.req_id, exc_info=True)
