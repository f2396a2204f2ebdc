"""tests/procs.py, the one process and wait helper of the tests: a wait fails naming what it waited
for, with the log tail, as soon as the process dies or the time is up; stop escalates to SIGKILL."""

from __future__ import annotations

import signal
import sys
import time

import pytest
from procs import Proc, poll, wait_until

pytestmark = [pytest.mark.unit]


def python(tmp_path, code: str, name: str = "child") -> Proc:
    return Proc([sys.executable, "-c", code], tmp_path / f"{name}.log", cwd=tmp_path, name=name)


def test_a_dead_process_ends_the_wait_with_its_log_tail(tmp_path):
    proc = python(tmp_path, "import sys; print('listening failed: port taken', flush=True); sys.exit(4)").start()
    started = time.monotonic()
    with pytest.raises(AssertionError, match=r"(?s)waiting for the child's /health: child exited with 4.*port taken"):
        wait_until(lambda: False, 60, "the child's /health", logs=[proc])
    assert time.monotonic() - started < 30  # not the whole 60 s


def test_a_timeout_names_what_and_adds_the_detail(tmp_path):
    with pytest.raises(AssertionError, match=r"waiting for nothing: not within 0.2 s\nlast answer: 503"):
        wait_until(lambda: None, 0.2, "nothing", detail=lambda: "last answer: 503")
    assert poll(lambda: None, 0.1) is None


def test_the_first_truthy_value_is_returned(tmp_path):
    calls = iter([0, "", [], {"status": "ready"}])
    assert wait_until(lambda: next(calls), 5, "readiness", step=0.01) == {"status": "ready"}


def test_stop_escalates_to_sigkill_and_a_context_always_stops(tmp_path):
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(600)"
    stubborn = python(tmp_path, code, "stubborn").start()
    wait_until(lambda: "up" in stubborn.log_text(), 30, "the child to be up", logs=[stubborn])
    assert stubborn.stop(timeout_s=0.5) == -signal.SIGKILL and not stubborn.alive()

    with python(tmp_path, "import time; time.sleep(600)", "sleeper") as sleeper:
        assert sleeper.alive()
    assert sleeper.returncode == -signal.SIGTERM
