"""Stages and progress of the long CLI jobs (export, serve's export step, prepare, precompute-voice, bench).

On a terminal: a live line per job (rich) with a spinner, the current stage, a bar of stages done and
the elapsed time, refreshed while a stage runs (an export stage can take minutes). Otherwise (a log
file, CI, a pipe): one plain line per stage and one when the job is done. `quiet`: nothing. All of it
goes to stderr, so a command's own output (stdout) stays clean.

The exporter reports through a plain callback (`Stages.hook`: index, total, label), so export/ knows
nothing of this module.
"""

from __future__ import annotations

import argparse
import sys
import time
from types import TracebackType
from typing import Any, TextIO


def add_quiet(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no stage/progress display (a terminal gets a live line, anything else plain lines)")


class Stages:
    """One job made of stages: `with Stages("export X", total=7) as s: s.stage("talker"); ...`."""

    def __init__(self, title: str, total: int | None = None, *, quiet: bool = False, stream: TextIO | None = None,
                 terminal: bool | None = None) -> None:
        """`terminal`: force the live display on or off (default: whether `stream` is a TTY)."""
        self.title = title
        self.total = total
        self.quiet = quiet
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.terminal = terminal if terminal is not None else bool(isatty and isatty())
        self.index = 0
        self.label = ""
        self.started = time.monotonic()
        self._stage_started = self.started
        self._live: Any = None
        self._task: Any = None
        self._finished = False

    # --- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> Stages:
        self.started = time.monotonic()
        if self.quiet or not self.terminal:
            return self
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        console = Console(file=self.stream, force_terminal=True)
        self._live = Progress(SpinnerColumn(), TextColumn("[bold]{task.fields[title]}[/] {task.description}"),
                              BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                              refresh_per_second=4, transient=False)
        self._live.start()
        self._task = self._live.add_task("starting", total=self.total, title=self.title)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.finish(failed=exc is not None)

    def finish(self, summary: str = "", *, failed: bool = False) -> None:
        """The job is over (once: a second call, e.g. from __exit__ after an explicit one, does nothing)."""
        if self._finished:
            return
        self._finished = True
        elapsed = time.monotonic() - self.started
        outcome = "failed" if failed else "done"
        text = f"{outcome} in {elapsed:.1f} s" + (f": {summary}" if summary and not failed else "")
        if self._live is not None:
            completed = self.index if failed else (self.total or self.index)
            self._live.update(self._task, description=text, completed=completed)
            self._live.stop()
            self._live = None
        elif not self.quiet:
            self._line(text)

    # --- progress --------------------------------------------------------------------------------

    def stage(self, label: str, index: int | None = None, total: int | None = None) -> None:
        """Stage `label` starts (the previous one is over). `index` is 1-based (default: the next)."""
        self.index = index if index is not None else self.index + 1
        if total is not None:
            self.total = total
        self.label = label
        now = time.monotonic()
        self._stage_started = now
        if self.quiet:
            return
        if self._live is not None:
            self._live.update(self._task, description=label, completed=self.index - 1, total=self.total)
        else:
            of = f"/{self.total}" if self.total else ""
            self._line(f"[{self.index}{of}] {label}")

    def hook(self, index: int, total: int, label: str) -> None:
        """The exporter's progress callback (export.exporter.ExportProgress)."""
        self.stage(label, index, total)

    def _line(self, text: str) -> None:
        elapsed = time.monotonic() - self.started
        self.stream.write(f"{self.title}: {text} (+{elapsed:.1f} s)\n" if not text.startswith(("done", "failed"))
                          else f"{self.title}: {text}\n")
        self.stream.flush()


__all__ = ["Stages", "add_quiet"]
