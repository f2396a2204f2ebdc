"""Graceful drain: after SIGTERM the gateway takes no new work and lets the work in flight finish.

- `Drain` counts the requests in flight (HTTP requests until their last body byte, WebSocket
  connections until they close) and holds the draining switch; gateway.__main__ flips it on
  SIGTERM/SIGINT and stops the server once nothing is in flight or `drain_timeout_s` has passed.
- While draining: `/ready` answers 503 (the route asks `Drain.draining`) so load balancers stop
  sending; every other request but `/health` and `/metrics` gets 503 + Retry-After
  (errors.draining); a WebSocket connection is refused with close 1013 (try again later). An open
  WebSocket session finishes the utterance it has started (up to its `session.done`), then closes
  with 1001 (going away); an idle one closes at once.
"""

from __future__ import annotations

import asyncio
import logging

from starlette.types import ASGIApp, Receive, Scope, Send

from . import errors

logger = logging.getLogger(__name__)

# Answered while draining, and not work to wait for: liveness, readiness (its route reports the
# drain) and metrics.
EXEMPT_PATHS = frozenset({"/health", "/ready", "/metrics"})


class Drain:
    def __init__(self) -> None:
        self.draining = False
        self.in_flight = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = asyncio.Event()
        self._idle = asyncio.Event()

    def _bind(self) -> None:
        """asyncio events belong to the loop that first waits on them, and one app may be served by
        several loops in turn (a TestClient each): fresh events for each new loop."""
        loop = asyncio.get_running_loop()
        if loop is self._loop:
            return
        self._loop = loop
        self._started = asyncio.Event()
        self._idle = asyncio.Event()
        if self.draining:
            self._started.set()
        if self.in_flight == 0:
            self._idle.set()

    @property
    def started(self) -> asyncio.Event:
        """Set once draining began (for the serving loop)."""
        self._bind()
        return self._started

    def begin(self) -> None:
        """Stop taking work (idempotent). Call it in the serving loop."""
        if self.draining:
            return
        self.draining = True
        self.started.set()
        logger.info("draining: no new requests; %d in flight", self.in_flight)

    def enter(self) -> None:
        self._bind()
        self.in_flight += 1
        self._idle.clear()

    def leave(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self._idle.set()

    async def wait_idle(self, timeout_s: float) -> bool:
        """True once nothing is in flight; False if `timeout_s` passed first."""
        self._bind()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        except asyncio.TimeoutError:  # (not TimeoutError before Python 3.11)
            return False
        return True


class DrainMiddleware:
    """Counts requests in flight; refuses new ones while draining (the error renderer answers)."""

    def __init__(self, app: ASGIApp, drain: Drain, retry_after_s: int) -> None:
        self.app = app
        self.drain = drain
        self.retry_after_s = retry_after_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or scope["path"] in EXEMPT_PATHS:
            await self.app(scope, receive, send)
            return
        if self.drain.draining:
            raise errors.draining(self.retry_after_s)
        self.drain.enter()
        try:
            await self.app(scope, receive, send)
        finally:
            self.drain.leave()
