"""triton_tts.supervisor with a fake server and a fake clock: restarts with backoff, forgives a server
that stayed up, gives up on a crash loop (serve then exits 1), never blocks."""

from __future__ import annotations

import pytest

from triton_tts.supervisor import FAILED, RUNNING, STARTING, WAITING, RestartPolicy, Supervisor

pytestmark = pytest.mark.unit


class FakeServer:
    def __init__(self) -> None:
        self.alive = True
        self.ready = True
        self.fail_start = False
        self.starts = 0
        self.stops = 0

    def start(self) -> None:
        if self.fail_start:
            raise RuntimeError("port in use")
        self.starts += 1
        self.alive = True

    def stop(self, timeout_s: float | None = None) -> int | None:
        self.stops += 1
        self.alive = False
        return 0

    def is_alive(self) -> bool:
        return self.alive

    def is_ready(self) -> bool:
        return self.alive and self.ready

    def log_tail(self, max_lines: int = 60) -> str:
        return "E model failed"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make(**policy):
    server, clock, said = FakeServer(), Clock(), []
    sup = Supervisor(server, RestartPolicy(**policy), clock=clock, announce=said.append)
    return sup, server, clock, said


def test_backoff_doubles_to_its_cap():
    p = RestartPolicy(backoff_initial_s=1, backoff_max_s=10)
    assert [p.delay(n) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]


def test_a_dead_server_is_restarted_after_the_backoff():
    sup, server, clock, said = make()
    assert sup.poll() and server.starts == 0
    server.alive = False
    assert sup.poll() and sup.state == WAITING and server.stops == 1  # stubs reaped
    assert "tritonserver exited" in said[-1] and "E model failed" in said[-1] and "in 1 s" in said[-1]
    clock.now = 0.5
    assert sup.poll() and server.starts == 0
    clock.now = 1.0
    server.ready = False
    assert sup.poll() and sup.state == STARTING and server.starts == 1
    assert sup.poll() and sup.state == STARTING
    server.ready = True
    assert sup.poll() and sup.state == RUNNING and sup.restarts == 1 and "restarted and ready" in said[-1]


def test_a_server_that_stays_up_is_forgiven():
    sup, server, clock, _ = make(stable_after_s=60)
    for _ in range(3):  # three crashes in a row: backoff 1, 2, 4
        server.alive = False
        sup.poll()
        clock.now = sup._until
        sup.poll()
        sup.poll()
    assert sup.failures == 3 and sup.state == RUNNING
    clock.now += 59
    sup.poll()
    assert sup.failures == 3
    clock.now += 1
    sup.poll()
    assert sup.failures == 0
    server.alive = False
    sup.poll()
    assert sup._until - clock.now == 1.0  # back to the first delay


def test_a_crash_loop_gives_up_and_stops_the_server():
    sup, server, clock, said = make(max_failures=2)
    server.alive = False
    assert sup.poll()  # failure 1
    clock.now = sup._until
    sup.poll()  # restart...
    server.alive = False  # ...which dies while starting
    assert sup.poll() and sup.failures == 2 and sup.state == WAITING
    clock.now = sup._until
    server.fail_start = True
    assert not sup.poll() and sup.state == FAILED  # failure 3 > 2
    assert "giving up after 3 failures" in said[-1] and "port in use" in said[-1]
    assert not sup.poll() and not server.alive


def test_a_restart_that_never_gets_ready_counts_as_failed():
    sup, server, clock, said = make(ready_timeout_s=30)
    server.alive = False
    sup.poll()
    clock.now = sup._until
    server.ready = False
    sup.poll()
    assert sup.state == STARTING
    clock.now += 30
    assert sup.poll() and sup.state == WAITING and "not ready within 30 s" in said[-1] and sup.failures == 2
