"""Peak resident memory per export stage, and giving freed memory back between stages.

Export runs its stages one after another in one process (talker, code predictor, tables, code2wav,
encoders, int8); what bounds the machine it needs is the largest stage, so that is what is measured
and reported (manifest `export.stages`, terminal).

How a stage's peak is measured: a daemon thread samples this process's resident set size
(/proc/self/statm) every few milliseconds, and the kernel's own high-water mark (VmHWM) is read at
both ends of the stage: when VmHWM rose during the stage, the stage set the process peak and VmHWM
is its exact peak; otherwise the sampled maximum is used (a short spike below an earlier stage's peak
can then be missed by at most one sampling interval). The high-water mark is never reset
(`/proc/self/clear_refs`), because that would also lower what `getrusage` and `/usr/bin/time`
report for the whole process.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import os
import resource
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

logger = logging.getLogger(__name__)

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
GIB = 1 << 30


def rss_bytes() -> int:
    """Resident set size of this process now (0 where /proc is unavailable)."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


def peak_rss_bytes() -> int:
    """This process's resident high-water mark so far (VmHWM; ru_maxrss where /proc is unavailable)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # kB on Linux


def _libc_trim() -> Any:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        fn = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None  # not glibc
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


_MALLOC_TRIM = _libc_trim()


def release_memory() -> None:
    """Collect garbage and hand free heap pages back to the OS.

    Weight tensors below glibc's mmap threshold (32 MiB at most) live in malloc arenas; freeing them
    leaves holes that stay resident until `malloc_trim` returns them, so without it a stage would
    start on top of the previous stage's freed-but-resident memory.
    """
    gc.collect()
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


class MemoryMonitor:
    """Per-stage peak RSS of this process. Use as a context manager; `stage(name)` around each stage."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.stages: dict[str, dict[str, float]] = {}
        self._lock = threading.Lock()
        self._current_max = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> MemoryMonitor:
        self._thread = threading.Thread(target=self._sample, name="export-rss", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            rss = rss_bytes()
            with self._lock:
                self._current_max = max(self._current_max, rss)

    @contextmanager
    def stage(self, name: str) -> Iterator[dict[str, float]]:
        """Measure one stage; memory it freed is handed back before the next stage starts.

        Yields the stage's record (filled in when the stage ends), so a caller may add fields."""
        release_memory()
        hwm_before = peak_rss_bytes()
        start = rss_bytes()
        with self._lock:
            self._current_max = start
        record: dict[str, float] = {}
        t0 = time.perf_counter()
        try:
            yield record
        finally:
            hwm_after = peak_rss_bytes()
            end = rss_bytes()
            with self._lock:
                sampled = max(self._current_max, end)
            peak = hwm_after if hwm_after > hwm_before else sampled
            record.update(
                peak_rss_gib=round(peak / GIB, 2),
                start_rss_gib=round(start / GIB, 2),
                end_rss_gib=round(end / GIB, 2),
                seconds=round(time.perf_counter() - t0, 1),
            )
            self.stages[name] = record
            logger.info(
                "export stage %s: peak RSS %.2f GiB (start %.2f, end %.2f) in %.1f s",
                name, peak / GIB, start / GIB, end / GIB, record["seconds"],
            )

    def summary(self) -> dict[str, Any]:
        """The manifest's `export` section: per-stage records, the largest stage and the process peak."""
        worst = max(self.stages, key=lambda s: self.stages[s]["peak_rss_gib"]) if self.stages else None
        return {
            "stages": self.stages,
            "peak_stage": worst,
            "process_peak_rss_gib": round(peak_rss_bytes() / GIB, 2),
        }
