"""Keep tritonserver running under `triton-tts serve`: restart it when it dies, with backoff.

A dead tritonserver ends every gRPC stream at once (measured: within 10 ms, UNAVAILABLE "Socket
closed") and leaves its python-backend stubs behind; the gateway reports not-ready meanwhile and
its channel reconnects once the new server listens. `Supervisor.poll()` is called from the serve
loop and never blocks for long:

    running --process exited--> waiting (backoff) --> starting --ready--> running
                                                           \\--exited / not ready in time--> waiting

Each death or failed start counts as a failure; a server that stays up `stable_after_s` resets the
count. More than `max_failures` in a row: give up (serve exits non-zero), a crash loop is not
hidden. In Docker Compose or Kubernetes the container's restart policy plays this role instead.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

logger = logging.getLogger(__name__)

RUNNING = "running"
WAITING = "waiting"
STARTING = "starting"
FAILED = "failed"


class ServerLike(Protocol):
    """What the supervisor needs of ttscore.backend.triton_server.TritonServer."""

    def start(self) -> Any: ...

    def stop(self, timeout_s: float | None = None) -> int | None: ...

    def is_alive(self) -> bool: ...

    def is_ready(self) -> bool: ...

    def log_tail(self, max_lines: int = 60) -> str: ...


@dataclass(frozen=True)
class RestartPolicy:
    max_failures: int = 5  # deaths / failed starts in a row before giving up
    backoff_initial_s: float = 1.0
    backoff_max_s: float = 30.0
    ready_timeout_s: float = 300.0  # a restart that is not ready by then failed
    stable_after_s: float = 60.0  # up this long: earlier failures are forgiven

    def delay(self, failures: int) -> float:
        """Wait before restart number `failures` (1 = the first): 1, 2, 4, ... up to the cap."""
        return float(min(self.backoff_max_s, self.backoff_initial_s * 2 ** max(0, failures - 1)))


class Supervisor:
    """Watches a started, ready server; `poll()` restarts it when needed and returns False once it
    gave up (the server is then stopped)."""

    def __init__(
        self,
        server: ServerLike,
        policy: RestartPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
        announce: Callable[[str], None] | None = None,
    ) -> None:
        self.server = server
        self.policy = policy or RestartPolicy()
        self.clock = clock
        self.announce = announce or logger.warning
        self.state = RUNNING
        self.failures = 0
        self.restarts = 0  # successful restarts so far
        self._since = clock()  # when the current state began
        self._until = 0.0  # waiting: restart then; starting: give up then

    def poll(self) -> bool:
        now = self.clock()
        if self.state == RUNNING:
            if self.server.is_alive():
                if self.failures and now - self._since >= self.policy.stable_after_s:
                    self.failures = 0
                return True
            self._failed(now, f"tritonserver exited; log tail:\n{self.server.log_tail(20)}")
        elif self.state == WAITING:
            if now >= self._until:
                self._start(now)
        elif self.state == STARTING:
            if not self.server.is_alive():
                self._failed(now, f"the restarted tritonserver exited; log tail:\n{self.server.log_tail(20)}")
            elif self.server.is_ready():
                self.state, self._since = RUNNING, now
                self.restarts += 1
                self.announce(f"tritonserver restarted and ready (restart {self.restarts})")
            elif now >= self._until:
                self._failed(now, f"the restarted tritonserver was not ready within {self.policy.ready_timeout_s:g} s")
        return self.state != FAILED

    def _failed(self, now: float, why: str) -> None:
        self.failures += 1
        self.server.stop()  # reap what is left: the process group holds orphaned stubs
        if self.failures > self.policy.max_failures:
            self.state = FAILED
            self.announce(f"{why}\ngiving up after {self.failures} failures in a row")
            return
        delay = self.policy.delay(self.failures)
        self.state, self._since, self._until = WAITING, now, now + delay
        self.announce(f"{why}\nrestarting tritonserver in {delay:g} s (failure {self.failures} of at most "
                      f"{self.policy.max_failures} in a row)")

    def _start(self, now: float) -> None:
        try:
            self.server.start()
        except Exception as exc:
            self._failed(now, f"restarting tritonserver failed: {exc}")
            return
        self.state, self._since, self._until = STARTING, now, now + self.policy.ready_timeout_s
