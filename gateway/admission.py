"""Admission control: bounded running and queued generations, per model, per deployment and per API key (pure
asyncio; no FastAPI, no Triton).

A generation (a speech request, a batch item, a WebSocket sentence or incremental utterance) takes a slot here
before any work is done for it (readiness, reference audio, Triton), and gives it back when it ends, however it
ends. It runs at once while its model runs fewer than `model_running` and the deployment fewer than `running`;
otherwise it waits in one first-come-first-served queue while its model has fewer than `model_queued` waiting
and the deployment fewer than `queued`; otherwise it is refused at once. A queued one that has waited
`queue_wait_s` (when set) is refused then. A key that holds `per_key` generations (running or queued) has its
next refused at once, whatever the queue. 0 means "no limit" for every bound.

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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from . import errors

# Why a generation was refused (the refusals metric's `reason` label).
QUEUE_FULL = "queue_full"
QUEUE_TIMEOUT = "queue_timeout"
KEY_LIMIT = "key_limit"
REASONS = (QUEUE_FULL, QUEUE_TIMEOUT, KEY_LIMIT)


@dataclass(frozen=True)
class AdmissionLimits:
    """The bounds (0: none); see the module docstring and gateway.settings."""

    model_running: int = 16
    model_queued: int = 16
    running: int = 64
    queued: int = 64
    queue_wait_s: float = 0.0
    per_key: int = 0


@dataclass
class _Waiter:
    model: str
    key: str | None
    future: asyncio.Future[None]


@dataclass
class ModelLoad:
    running: int = 0
    queued: int = 0
    refused: dict[str, int] = field(default_factory=dict)  # reason -> count


class Ticket:
    """A generation's slot; `release` (idempotent) gives it back."""

    def __init__(self, admission: Admission, model: str, key: str | None) -> None:
        self._admission = admission
        self.model = model
        self.key = key
        self._released = False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._admission._release(self)


class Admission:
    def __init__(self, limits: AdmissionLimits, models: Iterable[str], retry_after_s: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self.retry_after_s = retry_after_s
        self.clock = clock
        self._load: dict[str, ModelLoad] = {m: ModelLoad() for m in models}
        self._running = 0
        self._queue: deque[_Waiter] = deque()
        self._keys: dict[str, int] = {}  # API key identity -> its generations (running or queued)

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

    # --- taking and giving back --------------------------------------------------------------------

    async def acquire(self, model: str, key: str | None = None) -> Ticket:
        """A slot for a generation of served model `model` for API key `key` (its identity; None: no key): at
        once, after waiting its turn, or an APIError (429 for the key's limit, 503 for the server's)."""
        load = self._load.setdefault(model, ModelLoad())
        if key is not None and not self._below(self._keys.get(key, 0), self.limits.per_key):
            self._refused(load, KEY_LIMIT)
            raise errors.rate_limited(
                f"This API key already has {self.limits.per_key} speech generations in progress (its limit); "
                "retry when one has finished.", self.retry_after_s)
        ticket = Ticket(self, model, key)
        if self._can_run(model) and not any(w.model == model for w in self._queue):
            self._start(ticket)
            return ticket
        if not self._can_queue(model):
            self._refused(load, QUEUE_FULL)
            raise errors.overloaded("The request queue is full; retry later.", self.retry_after_s)
        waiter = _Waiter(model, key, asyncio.get_running_loop().create_future())
        self._queue.append(waiter)
        load.queued += 1
        self._count_key(key, 1)
        timeout = self.limits.queue_wait_s if self.limits.queue_wait_s > 0 else None
        try:
            await asyncio.wait_for(asyncio.shield(waiter.future), timeout)
        except asyncio.TimeoutError:
            if not waiter.future.done():  # (granted in the same instant: it runs)
                self._dequeue(waiter)
                self._count_key(key, -1)
                self._refused(load, QUEUE_TIMEOUT)
                raise errors.overloaded(
                    f"The request waited {self.limits.queue_wait_s:g} s in the queue without a free slot; retry later.",
                    self.retry_after_s) from None
        except BaseException:  # the client went away while it waited
            if waiter.future.done():
                self._release(ticket)  # it was granted a slot it will not use
            else:
                self._dequeue(waiter)
                self._count_key(key, -1)
            raise
        return ticket

    def _start(self, ticket: Ticket) -> None:
        self._load[ticket.model].running += 1
        self._running += 1
        self._count_key(ticket.key, 1)

    def _dequeue(self, waiter: _Waiter) -> None:
        self._queue.remove(waiter)
        self._load[waiter.model].queued -= 1

    def _release(self, ticket: Ticket) -> None:
        self._load[ticket.model].running -= 1
        self._running -= 1
        self._count_key(ticket.key, -1)
        self._grant()

    def _grant(self) -> None:
        """Start the waiters that can run now, first come first served (a model at its bound lets the others
        behind it go)."""
        for waiter in list(self._queue):
            if not self._below(self._running, self.limits.running):
                return
            if not self._can_run(waiter.model) or waiter.future.done():
                continue
            self._dequeue(waiter)
            # Counted as running now: the key's count moves from queued to running (unchanged).
            self._load[waiter.model].running += 1
            self._running += 1
            waiter.future.set_result(None)

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
                       "queue_wait_s": self.limits.queue_wait_s, "per_key": self.limits.per_key},
            "models": {m: {"running": load.running, "queued": load.queued, "refused": sum(load.refused.values())}
                       for m, load in models.items()},
        }


__all__ = ["KEY_LIMIT", "QUEUE_FULL", "QUEUE_TIMEOUT", "REASONS", "Admission", "AdmissionLimits", "ModelLoad",
           "Ticket"]
