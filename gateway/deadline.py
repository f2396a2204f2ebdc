"""Server-side time limits of a request, so that nothing waits on Triton forever.

- `request_timeout_s`: the whole request, from its start (planning, reference features, generation).
- `stall_timeout_s`: once audio is streaming, the longest wait for Triton's next response. Not
  applied before the first response: a request may legitimately queue behind long ones
  (max_pending_requests); a dead or wedged model is the health monitor's to catch meanwhile.

When a limit passes, the pending read is cancelled (which cancels the request inside Triton) and
the caller raises DEADLINE_EXCEEDED: a 504 before the response started, in-band after.
`next_within` also ends the wait when the stream's ticket is aborted (gateway.health).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

TOTAL = "total"
STALL = "stall"
END: Any = object()  # next_within: the stream is exhausted


@dataclass(frozen=True)
class Deadline:
    start: float  # time.monotonic() when the request started
    total_s: float
    stall_s: float

    def remaining(self, now: float) -> float:
        return max(0.0, self.start + self.total_s - now)

    def wait_limit(self, now: float, streaming: bool) -> tuple[float, str]:
        """How long the next wait for Triton may last, and which limit that is."""
        remaining = self.remaining(now)
        if streaming and self.stall_s < remaining:
            return self.stall_s, STALL
        return remaining, TOTAL

    def message(self, which: str) -> str:
        if which == STALL:
            return f"The speech service sent nothing for {self.stall_s:g} s; the request was cancelled."
        return f"The request did not finish within the server's limit of {self.total_s:g} s; it was cancelled."


async def _cancel(task: asyncio.Future[Any]) -> None:
    task.cancel()
    interrupted = False
    while not task.done():  # lets the stream run its cleanup (cancelling its Triton call)
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            # Starlette's streaming response cancels through an anyio cancel scope, which cancels this task again
            # at every await: the read must still finish first, else closing the stream finds its generator
            # running ("aclose(): asynchronous generator is already running") and the Triton call is not cancelled.
            interrupted = True
    if not task.cancelled():
        task.exception()  # retrieved: a failure while cancelling is moot
    if interrupted:
        raise asyncio.CancelledError


async def next_within(
    stream: AsyncIterator[T], timeout_s: float | None, abort: asyncio.Future[Exception] | None = None
) -> T:
    """The stream's next item, or END when it is exhausted. Raises asyncio.TimeoutError after
    `timeout_s` (None: no limit), or the error `abort` resolves to, whichever comes first; the pending read is then
    cancelled and finished before this returns, so the stream can be closed right away."""
    read: asyncio.Future[T] = asyncio.ensure_future(stream.__anext__())
    waiting: set[asyncio.Future[Any]] = {read} if abort is None else {read, abort}
    try:
        await asyncio.wait(waiting, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # our caller was cancelled (client gone): do not leave the read running
        await _cancel(read)
        raise
    if read.done():
        try:
            return read.result()
        except StopAsyncIteration:
            return END  # type: ignore[no-any-return]
    await _cancel(read)
    if abort is not None and abort.done():
        raise abort.result()
    raise asyncio.TimeoutError
