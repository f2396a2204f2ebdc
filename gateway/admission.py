"""Admission control: bounded running and queued generations, per model, per deployment and per API key (pure
asyncio; no FastAPI, no Triton).

A generation (a speech request, a batch item, a WebSocket sentence or incremental utterance) takes a slot here
before any work is done for it (readiness, reference audio, Triton), and gives it back when it ends, however it
ends. It runs at once while its model runs fewer than `model_running` and the deployment fewer than `running`;
otherwise it waits in one first-come-first-served queue while its model has fewer than `model_queued` waiting and
the deployment fewer than `queued`; otherwise it is refused at once. A stream (raw audio, SSE, a WebSocket
utterance: taken with `stream=True`) waits in the queue only with `queue_streams`: a queued generation waits for a
running one to end, a whole generation, so a stream that cannot run at once is refused at once instead, and its
client can go elsewhere while its caller would still be hearing silence (measured on the demo deployment: the
streams queued behind 8 running waited 2-4 s for their first audio against 0.1-0.2 s for the running). With
`queue_wait_s` set, a request whose estimated wait is longer is refused at once too (the estimate: its place in its
model's queue x the model's measured generation time / its running bound, the rate slots free up at), and a queued
one still waiting after `queue_wait_s` is refused then; except a batch's items (taken within `patient()`), which
are not waiting for a first audio and wait their turn within the count bounds. A key that holds `per_key`
generations (running or queued) has its next refused at once, whatever the queue. 0 means "no limit" for every
bound.

A burst is decided as it is read. The decision is synchronous (`take`): the HTTP layer takes it for a speech
request as soon as its body is in (gateway.app's AdmissionMiddleware: the model name is all it needs), before the
request is validated and planned, and the route's generation then claims that ticket (`acquire`). A generation
admitted to run starts its work only once the requests that arrived with it are decided (`settled`: none
arriving, none arrived for SETTLE_QUIET_S, at most SETTLE_MAX_S): otherwise every refusal that came in the same
instant waits behind the admitted requests' planning and Triton calls in the one event loop (~3 ms each; with 32
admitted, the refusals of a 200-request burst on the demo deployment came after 95-136 ms).

Refusals are APIErrors built by gateway.errors (503 + Retry-After for the server's limits, 429 + Retry-After
for a key's), so a refused HTTP request gets the usual error body within the time it takes to count, and a
WebSocket session the in-band error. Why Triton's own queue is not enough: it refuses only when its pending
queue overflows, after the request crossed the network and waited its turn (0.65-1.8 s measured at 200
concurrent streams on the demo deployment), while every admitted request kept waiting longer.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from . import errors

# Why a generation was refused (the refusals metric's `reason` label).
QUEUE_FULL = "queue_full"
NO_SLOT = "no_slot"  # a stream, which does not queue (`queue_streams` off), found every slot busy
QUEUE_ESTIMATE = "queue_estimate"
QUEUE_TIMEOUT = "queue_timeout"
KEY_LIMIT = "key_limit"
REASONS = (QUEUE_FULL, NO_SLOT, QUEUE_ESTIMATE, QUEUE_TIMEOUT, KEY_LIMIT)

# The estimate of a model's generation time (from start to end, what a queued request waits for) follows each
# finished one with this weight.
HOLD_WEIGHT = 0.2

# An admitted generation starts its work once no request is arriving and none arrived for SETTLE_QUIET_S (polled
# every SETTLE_POLL_S), and at the latest after SETTLE_MAX_S (a request whose body is slow to arrive must not hold
# the others' work for long).
SETTLE_QUIET_S = 0.002
SETTLE_POLL_S = 0.0005
SETTLE_MAX_S = 0.05


@dataclass(frozen=True)
class AdmissionLimits:
    """The bounds (0: none); see the module docstring. The served defaults are gateway.settings'."""

    model_running: int = 0
    model_queued: int = 0
    running: int = 0
    queued: int = 0
    queue_wait_s: float = 0.0
    per_key: int = 0
    queue_streams: bool = True  # streams wait in the queue too (False: refused when no slot is free)


@dataclass
class ModelLoad:
    running: int = 0
    queued: int = 0
    refused: dict[str, int] = field(default_factory=dict)  # reason -> count


class Ticket:
    """A generation's place: running, or queued until `Admission.acquire` sees it granted; `release`
    (idempotent) gives it back, or leaves the queue."""

    def __init__(self, admission: Admission, model: str, key: str | None, queued: bool, patient: bool = False,
                 stream: bool = False) -> None:
        self._admission = admission
        self.model = model
        self.key = key
        self.patient = patient  # no queue-time bound (a batch item)
        self.stream = stream  # taken for a stream
        # While queued: the future a free slot resolves (None: running).
        self.grant: asyncio.Future[None] | None = asyncio.get_running_loop().create_future() if queued else None
        self.claimed = False  # by the generation it was taken for (`Admission.acquire`)
        self.settled = False  # its burst was decided before its work began (`Admission.settled`)
        self.started_at: float | None = None if queued else admission.clock()  # when it began to run
        self._released = False

    @property
    def queued(self) -> bool:
        return self.grant is not None and not self.grant.done()

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._admission._release(self)


# The ticket the HTTP layer took for the request being handled (AdmissionMiddleware), for its generation to claim.
_TAKEN: ContextVar[Ticket | None] = ContextVar("gateway_admission_taken", default=None)
# Within `Admission.patient()`: generations taken wait their turn without the queue-time bound.
_PATIENT: ContextVar[bool] = ContextVar("gateway_admission_patient", default=False)
# Within `Admission.streamed()`: generations taken are streams' (a WebSocket session's, whatever their format).
_STREAMED: ContextVar[bool] = ContextVar("gateway_admission_streamed", default=False)


class Admission:
    def __init__(self, limits: AdmissionLimits, models: Iterable[str], retry_after_s: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self.retry_after_s = retry_after_s
        self.clock = clock
        self._load: dict[str, ModelLoad] = {m: ModelLoad() for m in models}
        self._running = 0
        self._queue: deque[Ticket] = deque()
        self._keys: dict[str, int] = {}  # API key identity -> its generations (running or queued)
        self._hold: dict[str, float] = {}  # model -> its generations' time, running (HOLD_WEIGHT)
        self._arriving = 0  # requests read and not yet decided (`arrival`)
        self._last_arrival = float("-inf")

    # --- the bounds ----------------------------------------------------------------------------------

    @staticmethod
    def _below(count: int, limit: int) -> bool:
        return limit <= 0 or count < limit

    def _can_run(self, model: str) -> bool:
        return (self._below(self._load[model].running, self.limits.model_running)
                and self._below(self._running, self.limits.running))

    def _can_queue(self, model: str) -> bool:
        return (self._below(self._load[model].queued, self.limits.model_queued)
                and self._below(len(self._queue), self.limits.queued))

    # --- deciding ----------------------------------------------------------------------------------------

    def take(self, model: str, key: str | None = None, stream: bool = False) -> Ticket:
        """The decision for a generation of served model `model` for API key `key` (its identity; None: no key),
        at once: a running ticket, a queued one, or the refusal (an APIError: 429 for the key's limit, 503 for
        the server's). `stream`: its client waits for a first audio (see the module docstring)."""
        stream = stream or _STREAMED.get()
        load = self._load.setdefault(model, ModelLoad())
        if key is not None and not self._below(self._keys.get(key, 0), self.limits.per_key):
            self._refused(load, KEY_LIMIT)
            raise errors.rate_limited(
                f"This API key already has {self.limits.per_key} speech generations in progress (its limit); "
                "retry when one has finished.", self.retry_after_s)
        if self._can_run(model) and not any(t.model == model for t in self._queue):
            ticket = Ticket(self, model, key, queued=False)
            load.running += 1
            self._running += 1
        elif stream and not self.limits.queue_streams and not _PATIENT.get():
            self._refused(load, NO_SLOT)
            raise errors.overloaded(
                f"Every generation slot of model '{model}' is busy and a stream is not queued (it would wait for "
                "a whole generation to end); retry later or elsewhere.", self.retry_after_s)
        elif self._can_queue(model):
            wait = None if _PATIENT.get() else self.expected_wait(model)
            if wait is not None and self.limits.queue_wait_s > 0 and wait > self.limits.queue_wait_s:
                self._refused(load, QUEUE_ESTIMATE)
                raise errors.overloaded(
                    f"The request would wait about {wait:.1f} s for a free slot (this server's bound: "
                    f"{self.limits.queue_wait_s:g} s); retry later.", self.retry_after_s)
            ticket = Ticket(self, model, key, queued=True, patient=_PATIENT.get(), stream=stream)
            self._queue.append(ticket)
            load.queued += 1
        else:
            self._refused(load, QUEUE_FULL)
            raise errors.overloaded("The request queue is full; retry later.", self.retry_after_s)
        self._count_key(key, 1)
        return ticket

    def expected_wait(self, model: str) -> float | None:
        """How long a request queued for `model` now would wait for its slot (None: nothing measured yet)."""
        hold = self._hold.get(model)
        if hold is None:
            return None
        slots = self.limits.model_running if self.limits.model_running > 0 else max(1, self._load[model].running)
        return (self._load[model].queued + 1) * hold / slots

    @contextmanager
    def taken(self, ticket: Ticket) -> Iterator[None]:
        """Within: `acquire` for `ticket`'s model and key claims `ticket` instead of deciding again (the HTTP
        layer decided first). Released on the way out (a generation that ended released it already)."""
        token = _TAKEN.set(ticket)
        try:
            yield
        finally:
            _TAKEN.reset(token)
            ticket.release()

    @staticmethod
    @contextmanager
    def patient() -> Iterator[None]:
        """Within (and in the tasks started within): generations queue without the queue-time bound (a batch's
        items: a whole batch is awaited, not a first audio; the count bounds and the request's time limit hold)."""
        token = _PATIENT.set(True)
        try:
            yield
        finally:
            _PATIENT.reset(token)

    @staticmethod
    @contextmanager
    def streamed() -> Iterator[None]:
        """Within (and in the tasks started within): generations are taken as streams' (a WebSocket session's
        sentences: its client waits for each one's first audio, whatever the format it asked for)."""
        token = _STREAMED.set(True)
        try:
            yield
        finally:
            _STREAMED.reset(token)

    @contextmanager
    def arrival(self) -> Iterator[None]:
        """Around a request read and not yet decided (see `settled`)."""
        self._arriving += 1
        self._last_arrival = self.clock()
        try:
            yield
        finally:
            self._arriving -= 1

    async def settled(self) -> None:
        """Returns once no request is arriving and none arrived for SETTLE_QUIET_S, at the latest after
        SETTLE_MAX_S; one turn of the event loop at least (requests read in the same turn start in the next)."""
        now = self.clock()
        deadline = now + SETTLE_MAX_S
        await asyncio.sleep(0)
        while (self._arriving > 0 or now - self._last_arrival < SETTLE_QUIET_S) and now < deadline:
            await asyncio.sleep(SETTLE_POLL_S)
            now = self.clock()

    async def acquire(self, model: str, key: str | None = None, stream: bool = False) -> Ticket:
        """A slot for a generation (see `take`): at once once the burst it came in is decided (`settled`), or
        after waiting its turn in the queue; or the refusal. The ticket the HTTP layer took for this request is
        claimed (once) rather than a second one taken."""
        stream = stream or _STREAMED.get()
        ticket = _TAKEN.get()
        if ticket is not None and ticket.claimed:  # claimed once: a request's further generations take their own
            ticket = None
        elif ticket is not None:
            ticket.claimed = True
            # Decided again when planned elsewhere than decided, or a stream the body did not say it was.
            if ticket.model != model or ticket.key != key or (stream and ticket.queued and not ticket.stream):
                ticket.release()
                ticket = None
        if ticket is None:
            ticket = self.take(model, key, stream)
            ticket.claimed = True
        try:
            if ticket.grant is None:
                if not ticket.settled:
                    await self.settled()
            else:
                await self._granted(ticket)
        except BaseException:
            ticket.release()
            raise
        return ticket

    async def _granted(self, ticket: Ticket) -> None:
        """Waits for the queued `ticket`'s slot; refused after `queue_wait_s` (when set)."""
        assert ticket.grant is not None
        timeout = self.limits.queue_wait_s if self.limits.queue_wait_s > 0 and not ticket.patient else None
        try:
            await asyncio.wait_for(asyncio.shield(ticket.grant), timeout)
        except asyncio.TimeoutError:
            if not ticket.grant.done():  # (granted in the same instant: it runs)
                ticket.release()
                self._refused(self._load[ticket.model], QUEUE_TIMEOUT)
                raise errors.overloaded(
                    f"The request waited {self.limits.queue_wait_s:g} s in the queue without a free slot; retry later.",
                    self.retry_after_s) from None

    # --- giving back -----------------------------------------------------------------------------------

    def _release(self, ticket: Ticket) -> None:
        load = self._load[ticket.model]
        if ticket.queued:  # it leaves the queue
            self._queue.remove(ticket)
            load.queued -= 1
            assert ticket.grant is not None
            ticket.grant.cancel()
            self._count_key(ticket.key, -1)
            return
        load.running -= 1
        self._running -= 1
        self._count_key(ticket.key, -1)
        if ticket.started_at is not None and ticket.claimed:  # a generation ran (not a request refused later)
            held = self.clock() - ticket.started_at
            last = self._hold.get(ticket.model)
            self._hold[ticket.model] = held if last is None else last + HOLD_WEIGHT * (held - last)
        self._grant()

    def _grant(self) -> None:
        """Start the queued tickets that can run now, first come first served (a model at its bound lets the
        others behind it go)."""
        for ticket in list(self._queue):
            if not self._below(self._running, self.limits.running):
                return
            if not self._can_run(ticket.model):
                continue
            self._queue.remove(ticket)
            load = self._load[ticket.model]
            load.queued -= 1
            # Counted as running now: the key's count moves from queued to running (unchanged).
            load.running += 1
            self._running += 1
            ticket.started_at = self.clock()
            assert ticket.grant is not None
            ticket.grant.set_result(None)

    def _count_key(self, key: str | None, delta: int) -> None:
        if key is None:
            return
        n = self._keys.get(key, 0) + delta
        if n > 0:
            self._keys[key] = n
        else:
            self._keys.pop(key, None)

    def _refused(self, load: ModelLoad, reason: str) -> None:
        load.refused[reason] = load.refused.get(reason, 0) + 1

    # --- what operators see --------------------------------------------------------------------------

    def snapshot(self) -> dict[str, ModelLoad]:
        """Per served model: generations running, queued, refused by reason (for /ready and /metrics)."""
        return {m: ModelLoad(load.running, load.queued, dict(load.refused)) for m, load in self._load.items()}

    def status(self) -> dict[str, Any]:
        """/ready's `admission`: the deployment's totals and each model's, with the limits in force."""
        models = self.snapshot()
        return {
            "running": self._running,
            "queued": len(self._queue),
            "refused": sum(sum(m.refused.values()) for m in models.values()),
            "limits": {"running_per_model": self.limits.model_running, "queued_per_model": self.limits.model_queued,
                       "running": self.limits.running, "queued": self.limits.queued,
                       "queue_wait_s": self.limits.queue_wait_s, "per_key": self.limits.per_key,
                       "queue_streams": self.limits.queue_streams},
            "models": {m: {"running": load.running, "queued": load.queued, "refused": sum(load.refused.values())}
                       for m, load in models.items()},
        }


__all__ = ["KEY_LIMIT", "NO_SLOT", "QUEUE_ESTIMATE", "QUEUE_FULL", "QUEUE_TIMEOUT", "REASONS", "Admission", "AdmissionLimits",
           "ModelLoad", "Ticket"]
