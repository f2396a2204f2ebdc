"""The processes the tests start, and waiting for things, done one way.

- `Proc`: a command started with its output in a log file (appended), in a session of its own unless
  told otherwise; `stop()` sends SIGTERM (or the given signal), waits, then SIGKILLs what is left.
  A context manager: the process is stopped however the block ends.
- `wait_until(predicate, timeout_s, what, logs=...)`: the predicate's first truthy value; past the
  deadline, or as soon as a process in `logs` has exited, an AssertionError naming `what`, with the
  tail of every log given and `detail()`. `poll` is the same loop for tests that measure instead of fail (None on
  timeout).
- `processes`, `descendants`, `child_with`: the process tree from /proc, to find the process a fault test stops
  or kills (a Python backend stub under tritonserver, tritonserver under `triton-tts serve`).

The real tritonserver is started by ttscore.backend.triton_server.TritonServer (product code, with its own
readiness wait); the `triton_server` fixture in conftest.py wraps it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
TAIL_CHARS = 3000
T = TypeVar("T")


class Proc:
    def __init__(self, cmd: Sequence[str], log: Path, *, env: Mapping[str, str] | None = None,
                 cwd: Path = ROOT, name: str | None = None, new_session: bool = True) -> None:
        self.cmd = [str(c) for c in cmd]
        self.log = Path(log)
        self.env = dict(os.environ if env is None else env)
        self.cwd = cwd
        self.name = name or Path(self.cmd[0]).name
        self.new_session = new_session
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.cmd, cwd=self.cwd, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=self.new_session)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"{self.name} was never started"
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def log_tail(self, chars: int = TAIL_CHARS) -> str:
        return self.log_text()[-chars:]

    def send(self, sig: int) -> None:
        assert self.proc is not None, f"{self.name} was never started"
        self.proc.send_signal(sig)

    def wait(self, timeout_s: float) -> int:
        assert self.proc is not None, f"{self.name} was never started"
        return self.proc.wait(timeout_s)

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 15) -> int | None:
        """Whatever state it is in: `sig`, then SIGKILL if it has not exited within `timeout_s`."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def __enter__(self) -> Proc:
        return self if self.proc is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def poll(predicate: Callable[[], T], timeout_s: float, *, step: float = 0.05) -> T | None:
    """The predicate's first truthy value within `timeout_s`, else None."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            return None
        time.sleep(step)


def wait_until(predicate: Callable[[], T], timeout_s: float, what: str, *, logs: Sequence[Proc] = (),
               detail: Callable[[], str] | None = None, step: float = 0.05) -> T:
    """The predicate's first truthy value; fails when `timeout_s` is up or a process in `logs` exits,
    with the tail of each log and `detail()` (what else there is to see, e.g. the last answer)."""
    exited: list[Proc] = []

    def done() -> Any:
        value = predicate()
        if value:
            return value
        exited.extend(p for p in logs if p.proc is not None and p.proc.poll() is not None)
        return exited  # truthy once a process has died: stop waiting

    value = poll(done, timeout_s, step=step)
    if value is not None and value is not exited:
        return value
    why = ", ".join(f"{p.name} exited with {p.returncode}" for p in dict.fromkeys(exited)) or \
        f"not within {timeout_s:g} s"
    tails = "".join(f"\n--- {p.name} ({p.log}):\n{p.log_tail()}" for p in logs)
    more = f"\n{detail()}" if detail is not None else ""
    raise AssertionError(f"waiting for {what}: {why}{more}{tails}")


def processes() -> list[tuple[int, int, str]]:
    """(pid, parent pid, command line) of every process, from /proc (ps truncates long lines)."""
    rows = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            args = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # exited meanwhile
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])  # after "pid (comm) state"
        rows.append((int(entry.name), ppid, args))
    return rows


def descendants(pid: int) -> list[int]:
    rows = processes()
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        for child, ppid, _ in rows:
            if ppid == parent:
                found.append(child)
                frontier.append(child)
    return found


def child_with(parent: int, fragment: str) -> int:
    pids = [pid for pid, ppid, args in processes() if ppid == parent and fragment in args]
    assert len(pids) == 1, f"expected one child of {parent} running {fragment!r}, found {pids}"
    return pids[0]
