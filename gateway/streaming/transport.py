"""The WebSocket session's frames: the `Transport` a session talks through (routers.py adapts Starlette's
WebSocket to it) and the `Inbox` that reads the client's messages concurrently with the session's work.

The inbox reads into a bounded queue (a flooding client is slowed by TCP backpressure), counts
input.cancel messages as they arrive (so a cancel is seen while a request is generated or the queue is
full), and runs work that a disconnect or a cancel stops (`until_gone`: cancelling the work cancels
its Triton request).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

logger = logging.getLogger(__name__)
T = TypeVar("T")

CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001
CLOSE_INTERNAL_ERROR = 1011
QUEUE_MESSAGES = 64

GONE = object()  # Inbox.next: the client left
STOP = object()  # Inbox.next: the server drains


class Disconnected(Exception):
    """The client went away (or the connection failed): stop, cancelling any work in flight."""


class Cancelled(Exception):
    """The client sent input.cancel while a request was generated: it was cancelled."""


class Transport(Protocol):
    async def receive(self) -> str | bytes | None:
        """The next message; None once the client has disconnected."""
        ...

    async def send_json(self, message: dict[str, Any]) -> None:
        """Raises Disconnected when the client is gone."""
        ...

    async def send_bytes(self, data: bytes) -> None: ...

    async def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None: ...


class Inbox:
    """The client's messages, parsed (`parse`) as they arrive and handed out in order; `is_cancel` tells
    an input.cancel, counted on arrival in `cancels` (and `cancel` set while any is not handled yet)."""

    def __init__(self, transport: Transport, parse: Callable[[str | bytes], Any], is_cancel: Callable[[Any], bool],
                 request_id: str) -> None:
        self.transport = transport
        self.parse = parse
        self.is_cancel = is_cancel
        self.request_id = request_id
        self._queue: asyncio.Queue[Any] = asyncio.Queue(QUEUE_MESSAGES)  # (arrival time, parsed message)
        self.cancels = 0  # input.cancel messages received but not handled yet
        self.cancel = asyncio.Event()  # set while cancels > 0
        self.gone = asyncio.Event()
        self.received_at = time.monotonic()  # arrival of the message being handled

    async def read(self) -> None:
        """The reader: runs until the client disconnects (or the connection fails)."""
        try:
            while True:
                message = await self.transport.receive()
                if message is None:
                    break
                parsed = self.parse(message)
                if self.is_cancel(parsed):  # seen now, not when the handler gets to it
                    self.cancels += 1
                    self.cancel.set()
                await self._queue.put((time.monotonic(), parsed))
        except Exception:  # a broken connection is a disconnect
            logger.debug("streaming session %s: receive failed", self.request_id, exc_info=True)
        self.gone.set()
        with contextlib.suppress(asyncio.QueueFull):
            self._queue.put_nowait((time.monotonic(), GONE))  # full queue: the handler sees `gone` at its next wait

    def cancel_handled(self) -> None:
        self.cancels -= 1
        if not self.cancels:
            self.cancel.clear()

    async def next(self, idle_timeout_s: float, stop: asyncio.Event | None) -> Any:
        """The next message (GONE: the client left; STOP: `stop` was set first); TimeoutError after
        `idle_timeout_s` without one."""
        if self.gone.is_set() and self._queue.empty():
            return GONE
        get = asyncio.ensure_future(self._queue.get())
        gone = asyncio.ensure_future(self.gone.wait())
        stopping = None if stop is None else asyncio.ensure_future(stop.wait())
        waits = {get, gone} if stopping is None else {get, gone, stopping}
        try:
            await asyncio.wait(waits, timeout=idle_timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits - {get}:
                waiting.cancel()
            if not get.done():
                get.cancel()
        if get.done() and not get.cancelled():  # (also when it completed just after the timeout)
            received_at, message = get.result()
            if message is not GONE:
                self.received_at = received_at
            return message
        if self.gone.is_set():
            return GONE
        if stop is not None and stop.is_set():
            return STOP
        raise TimeoutError

    async def until_gone(self, work: Awaitable[T], cancellable: bool = False,
                         stop: asyncio.Event | None = None) -> T:
        """Run `work`; if the client disconnects first (or, `cancellable`, sends input.cancel, or
        `stop` is set), cancel it (cancelling the Triton request) and raise Disconnected (Cancelled)."""
        task = asyncio.ensure_future(work)
        gone = asyncio.ensure_future(self.gone.wait())
        waits = {task, gone}
        cancels = [asyncio.ensure_future(e.wait()) for e in ((self.cancel, stop) if cancellable else ()) if e]
        waits.update(cancels)
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            gone.cancel()
            for waiting in cancels:
                waiting.cancel()
        if task.done():
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        if self.gone.is_set() or not cancellable:
            raise Disconnected()
        raise Cancelled()


__all__ = ["CLOSE_GOING_AWAY", "CLOSE_INTERNAL_ERROR", "CLOSE_NORMAL", "GONE", "STOP", "Cancelled", "Disconnected",
           "Inbox", "Transport"]
