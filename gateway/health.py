"""Model health as the gateway sees it (pure: no FastAPI, no tritonclient).

Why the gateway tracks it: Triton 2.51 keeps a model "ready" after one of its python-backend stub
processes died; the requests in flight on that stub never end, every later one fails with
"Stub process ... is not healthy", and nothing restarts the stub (model_repository/README.md,
"Faults"). So gateway.monitor probes every model through its stub and feeds the results here.

`HealthBook`: one state machine per Triton model (the deployment's models, ensembles expanded into
their steps)::

    unknown | healthy --probe failed (or `timeout_threshold` timeouts in a row)--> broken
    broken --reload due (Backoff)--> reloading --done--> recovering --probe ok--> healthy
                                              \\--failed--> broken (backoff grows)
    recovering --probe failed--> broken (backoff grows)
    any --Triton unreachable--> unreachable --probe ok--> healthy, --probe failed--> broken

A model is usable when healthy or unknown (not probed yet: readiness then rests on Triton's own
answer). Entering broken or unreachable is reported to the caller, which ends the model's streams in
flight (`InflightStreams`) instead of letting them hang.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from .backend import ProbeResult

logger = logging.getLogger(__name__)

UNKNOWN = "unknown"
HEALTHY = "healthy"
BROKEN = "broken"
RELOADING = "reloading"
RECOVERING = "recovering"
UNREACHABLE = "unreachable"
USABLE = (UNKNOWN, HEALTHY)


@dataclass(frozen=True)
class Backoff:
    """Delay before repair attempt n+1 after n failed ones: none for the first, then doubling."""

    base_s: float = 1.0
    max_s: float = 30.0

    def delay(self, failures: int) -> float:
        if failures <= 0:
            return 0.0
        return float(min(self.max_s, self.base_s * 2 ** (failures - 1)))


@dataclass
class ModelHealth:
    state: str = UNKNOWN
    reason: str = ""
    timeouts: int = 0  # probe timeouts in a row
    failures: int = 0  # repairs in a row that did not bring the model back (drives the backoff)
    reload_at: float = 0.0  # broken: the next reload is due then


class HealthBook:
    """The health of a set of Triton models, driven by probe results and reload outcomes."""

    def __init__(self, *, timeout_threshold: int = 2, backoff: Backoff | None = None, reload: bool = True) -> None:
        # A dead stub answers a probe with an error at once; a timeout may only mean "busy", so it
        # takes `timeout_threshold` in a row.
        self.timeout_threshold = max(1, timeout_threshold)
        self.backoff = backoff or Backoff()
        self.reload = reload
        self.models: dict[str, ModelHealth] = {}

    def track(self, models: Iterable[str]) -> None:
        """Follow exactly these models (known ones keep their state)."""
        wanted = list(dict.fromkeys(models))
        self.models = {m: self.models.get(m) or ModelHealth() for m in wanted}

    def state(self, model: str) -> str:
        return self.models[model].state

    def observe(self, model: str, result: ProbeResult, now: float) -> bool:
        """Record a probe result; True when the model just stopped being usable."""
        h = self.models[model]
        if h.state == RELOADING:  # the model is being replaced: what its probe says is moot
            return False
        if result.ok:
            if h.state not in USABLE:
                logger.warning("model %s is healthy again", model)
            self.models[model] = ModelHealth(HEALTHY)
            return False
        if result.status == "unreachable":
            return self.unreachable(result.detail)
        if result.status == "timeout":
            h.timeouts += 1
            if h.state in (*USABLE, UNREACHABLE) and h.timeouts < self.timeout_threshold:
                return False
        return self._break(model, result.detail or result.status, now)

    def unreachable(self, detail: str) -> bool:
        """Triton does not answer: every model is unusable until probed again. True when that is news."""
        news = False
        for h in self.models.values():
            if h.state == RELOADING:  # its reload fails by itself, which lands it in broken
                continue
            news = news or h.state != UNREACHABLE
            h.state, h.reason, h.timeouts = UNREACHABLE, f"Triton is unreachable ({detail})", 0
        return news

    def _break(self, model: str, reason: str, now: float) -> bool:
        h = self.models[model]
        news = h.state != BROKEN
        if h.state == RECOVERING:
            h.failures += 1  # reloaded, yet still failing
        if news:
            h.reload_at = now + self.backoff.delay(h.failures)
            logger.error("model %s is broken: %s", model, reason)
        h.state, h.reason, h.timeouts = BROKEN, reason, 0
        return news

    def due_reloads(self, now: float) -> list[str]:
        if not self.reload:
            return []
        return [m for m, h in self.models.items() if h.state == BROKEN and h.reload_at <= now]

    def reload_started(self, model: str) -> None:
        h = self.models[model]
        h.state, h.reason = RELOADING, f"being reloaded after: {h.reason}"

    def reload_finished(self, model: str, error: str | None, now: float) -> None:
        """`error` None: reloaded (usable again once a probe passes); else why the reload failed."""
        h = self.models.get(model)
        if h is None:
            return
        if error is None:
            h.state, h.reason = RECOVERING, "reloaded; waiting for a health probe to pass"
            return
        h.failures += 1
        h.state, h.reason = BROKEN, f"reload failed: {error}"
        h.reload_at = now + self.backoff.delay(h.failures)

    def unusable(self) -> dict[str, str]:
        """Model -> why it cannot serve, for every model that cannot."""
        return {m: h.reason or h.state for m, h in self.models.items() if h.state not in USABLE}


class Ticket:
    """One stream in flight: `aborted` resolves (to the error to raise) when a model it needs breaks."""

    def __init__(self, models: Iterable[str], registry: InflightStreams) -> None:
        self.models = frozenset(models)
        self.aborted: asyncio.Future[Exception] = asyncio.get_running_loop().create_future()
        self._registry = registry

    def close(self) -> None:
        self._registry._open.discard(self)

    def __enter__(self) -> Ticket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class InflightStreams:
    """The streams in flight and the models each depends on (asyncio; one event loop)."""

    def __init__(self) -> None:
        self._open: set[Ticket] = set()

    def open(self, models: Iterable[str]) -> Ticket:
        ticket = Ticket(models, self)
        self._open.add(ticket)
        return ticket

    def abort(self, models: Iterable[str] | None, error: Exception) -> int:
        """End every stream that needs one of `models` (None: all) with `error`; how many."""
        wanted = None if models is None else set(models)
        n = 0
        for ticket in list(self._open):
            if (wanted is None or ticket.models & wanted) and not ticket.aborted.done():
                ticket.aborted.set_result(error)
                n += 1
        return n

    def __len__(self) -> int:
        return len(self._open)
