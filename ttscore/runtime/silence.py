"""Silence detection as pydub 0.25.1 does it (`pydub.silence`), on 16-bit mono samples in numpy, times in
milliseconds: a reference implementation's clip preprocessing that calls pydub is reproduced sample for
sample (pydub's millisecond slicing, its integer RMS, its search steps and chunk joins)."""

from __future__ import annotations

import itertools
import math

import numpy as np
from numpy.typing import NDArray


class Pcm:
    """16-bit mono samples with pydub's millisecond slicing and integer RMS."""

    def __init__(self, samples: NDArray[np.int16], rate: int) -> None:
        self.x = samples
        self.rate = rate
        squares = np.square(samples.astype(np.int64))
        self.cum = np.concatenate(([0], np.cumsum(squares)))

    def ms(self) -> int:
        """len(AudioSegment): round(1000 * frames / rate) (Python's round, half to even)."""
        return round(1000 * (float(len(self.x)) / self.rate))

    def bounds(self, start: int, end: int) -> tuple[int, int]:
        """AudioSegment[start:end]'s sample range (clamped to the length in ms, int(ms * rate / 1000))."""
        n = self.ms()
        start, end = min(start, n), min(end, n)
        return int(start * (self.rate / 1000.0)), int(end * (self.rate / 1000.0))

    def rms(self, start: int, end: int) -> int:
        """audioop.rms of the slice: int(sqrt(sum of squares / frames)), frames counting the zero
        frames pydub appends when the slice runs past the data."""
        a, b = self.bounds(start, end)
        if b <= a:
            return 0
        hi = min(b, len(self.x))
        total = int(self.cum[hi] - self.cum[min(a, hi)])
        return int(math.sqrt(total / float(b - a)))

    def slice(self, start: int, end: int) -> NDArray[np.int16]:
        a, b = self.bounds(start, end)
        data = self.x[a:b]
        if b - a > len(data):
            data = np.concatenate((data, np.zeros(b - a - len(data), np.int16)))
        return data


def dbfs(rms: int) -> float:
    if not rms:
        return -math.inf
    return 20 * math.log(rms / 32768.0, 10)


def silent_ranges(pcm: Pcm, min_len: int, thresh_db: float, step: int) -> list[list[int]]:
    """pydub.silence.detect_silence."""
    n = pcm.ms()
    if n < min_len:
        return []
    thresh = 10 ** (float(thresh_db) / 20) * 32768.0
    last = n - min_len
    starts = list(range(0, last + 1, step))
    if last % step:
        starts.append(last)
    silent = [i for i in starts if pcm.rms(i, i + min_len) <= thresh]
    if not silent:
        return []
    ranges: list[list[int]] = []
    prev = silent.pop(0)
    begin = prev
    for i in silent:
        if i != prev + step and i > prev + min_len:
            ranges.append([begin, prev + min_len])
            begin = i
        prev = i
    ranges.append([begin, prev + min_len])
    return ranges


def nonsilent_ranges(pcm: Pcm, min_len: int, thresh_db: float, step: int) -> list[list[int]]:
    """pydub.silence.detect_nonsilent."""
    silent = silent_ranges(pcm, min_len, thresh_db, step)
    n = pcm.ms()
    if not silent:
        return [[0, n]]
    if silent[0][0] == 0 and silent[0][1] == n:
        return []
    prev_end, out = 0, []
    for start, end in silent:
        out.append([prev_end, start])
        prev_end = end
    if silent[-1][1] != n:
        out.append([prev_end, n])
    if out[0] == [0, 0]:
        out.pop(0)
    return out


def split_on_silence(pcm: Pcm, min_len: int, thresh_db: float, keep: int, step: int) -> NDArray[np.int16]:
    """pydub.silence.split_on_silence's chunks, joined (`AudioSegment.silent(0)` + each chunk)."""
    ranges = [[s - keep, e + keep] for s, e in nonsilent_ranges(pcm, min_len, thresh_db, step)]
    for left, right in itertools.pairwise(ranges):
        if right[0] < left[1]:
            left[1] = (left[1] + right[0]) // 2
            right[0] = left[1]
    n = pcm.ms()
    pieces = [pcm.slice(max(s, 0), min(e, n)) for s, e in ranges]
    return np.concatenate(pieces) if pieces else np.zeros(0, np.int16)


def leading_silence(pcm: Pcm, thresh_db: float, chunk: int) -> int:
    """pydub.silence.detect_leading_silence."""
    n = pcm.ms()
    t = 0
    while dbfs(pcm.rms(t, t + chunk)) < thresh_db and t < n:
        t += chunk
    return min(t, n)
