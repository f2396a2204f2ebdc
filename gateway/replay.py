"""Mid-stream failover by deterministic replay (pure: no I/O, no asyncio).

A family whose audio is a function of its request (FamilyRules.reproducible: its sampling is seeded,
or greedy, and the gateway gives every request of a seeded family a seed: gateway.planning) gives the
same samples for the same request on any Triton and in any batch. So when a generation's Triton
fails after some of its audio was handed on (UNAVAILABLE: the server died, its gRPC stream dropped,
the health monitor ended a stream whose model broke; INTERNAL: a stream that ended without its final
response), the service (gateway.services, the one place every response draws its samples from)
runs the same request again, on another endpoint the pool picks, and hands on only what follows the
samples already handed on: the client's one sample stream continues with no gap, duplicate or error,
whatever the format, rate or encoder downstream.

- `SampleCursor`: counts a generation's samples (at the model's rate, before any encoding) across
  chunk boundaries; on a replay it drops the replayed samples up to that count. It keeps the last
  `CHECK_SAMPLES` samples handed on and compares the replay with them: a replay that does not
  reproduce them (beyond `CHECK_TOLERANCE`), or that ends before reaching them, is `Diverged`, and
  the stream ends with an error rather than splice audio that does not belong together.
- `ReplayBudget`: the replays one request may still make (`max_replays`, shared by the segments of a
  long text; only the segment in flight is replayed).
"""

from __future__ import annotations

import numpy as np

from .backend import RETRYABLE

CHECK_SAMPLES = 4096  # samples handed on last, which a replay must reproduce
CHECK_TOLERANCE = 1e-3  # float PCM (about 33 int16 steps): a replay is the same audio within this

# Failures of the endpoint rather than of the request: a replay elsewhere can succeed.
REPLAYABLE = RETRYABLE


class Diverged(Exception):
    """The replayed audio is not the audio the client already has."""


class SampleCursor:
    """The samples of one generation handed on so far (`sent`), through its attempts."""

    def __init__(self) -> None:
        self.sent = 0
        self.attempts = 1
        self._at = 0  # samples the current attempt has produced
        self._tail = np.zeros(0, np.float32)  # the last samples handed on, ending at `sent`

    @property
    def behind(self) -> int:
        """Samples the current attempt must still produce before it reaches `sent`."""
        return max(self.sent - self._at, 0)

    def restart(self) -> None:
        """A new attempt (a replay) starts producing the generation from its first sample."""
        self.attempts += 1
        self._at = 0

    def take(self, audio: np.ndarray) -> np.ndarray:
        """The part of the current attempt's next chunk that the client does not have yet; the rest
        is dropped after checking it against what was handed on (Diverged when it differs)."""
        start, self._at = self._at, self._at + audio.size
        drop = min(max(self.sent - start, 0), audio.size)
        if drop:
            self._check(start, audio[:drop])
        new = audio[drop:]
        if new.size:
            self.sent += new.size
            self._tail = np.concatenate([self._tail, new])[-CHECK_SAMPLES:]
        return new

    def finish(self) -> None:
        """The current attempt ended (its final chunk): Diverged if it ended before `sent`."""
        if self.behind:
            raise Diverged(f"the replay ended after {self._at} samples, before the {self.sent} already sent")

    def _check(self, start: int, replayed: np.ndarray) -> None:
        tail_start = self.sent - self._tail.size
        lo = max(start, tail_start)
        hi = start + replayed.size
        if hi <= lo:
            return
        got = replayed[lo - start:]
        want = self._tail[lo - tail_start:hi - tail_start]
        worst = float(np.max(np.abs(got - want)))
        if worst > CHECK_TOLERANCE:
            raise Diverged(f"the replay differs from the audio already sent by {worst:.4g} at sample {lo}")


class ReplayBudget:
    """How many replays one request may still make."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def take(self) -> bool:
        if self.used >= self.limit:
            return False
        self.used += 1
        return True


__all__ = ["CHECK_SAMPLES", "CHECK_TOLERANCE", "REPLAYABLE", "Diverged", "ReplayBudget", "SampleCursor"]
