"""Band-limited sinc resampling as torchaudio.functional.resample does it with its defaults (a
Hann-windowed sinc, 6 zero crossings, rolloff 0.99), in numpy, for a family whose reference implementation
resamples with torchaudio (OmniVoice's clip preprocessing; an exported graph can hold the same resampling as a
constant convolution built from `sinc_kernel`).

Between rates r_in and r_out with g = gcd(r_in, r_out), o = r_in / g and n = r_out / g, output j
is sum_i x[i] h(i / o - j / n) with h a windowed sinc cut at the lower of the two Nyquist rates
(times the rolloff); the n distinct filters are the rows of the kernel and each block of n outputs
is one stride-o step over the input padded by `width` (left) and `width + o` (right); the result
keeps ceil(n * len / o) samples.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

ZERO_CROSSINGS = 6  # torchaudio's lowpass_filter_width
ROLLOFF = 0.99
# The reduced ratio's kernel is n x (2 width + o) taps: rates whose gcd is tiny (44101 Hz) would make it
# huge (torchaudio builds it anyway); past this many taps the caller resamples another way.
MAX_TAPS = 4_000_000


def reduced(rate_in: int, rate_out: int) -> tuple[int, int]:
    g = math.gcd(int(rate_in), int(rate_out))
    return int(rate_in) // g, int(rate_out) // g


def kernel_taps(rate_in: int, rate_out: int) -> int:
    o, n = reduced(rate_in, rate_out)
    width = math.ceil(ZERO_CROSSINGS * o / (min(o, n) * ROLLOFF))
    return n * (2 * width + o)


def sinc_kernel(rate_in: int, rate_out: int) -> tuple[NDArray[np.float32], int]:
    """(kernel [n, 2 * width + o] float32, width): the filters, computed in float64 as torchaudio does."""
    o, n = reduced(rate_in, rate_out)
    cutoff = min(o, n) * ROLLOFF
    width = math.ceil(ZERO_CROSSINGS * o / cutoff)
    idx = np.arange(-width, width + o, dtype=np.float64)[None, :] / o
    # torchaudio forms the phase offsets -j / n in float32 before adding them to the float64 positions.
    phase = (np.arange(0, -n, -1, dtype=np.int64).astype(np.float32) / np.float32(n)).astype(np.float64)[:, None]
    t = np.clip((phase + idx) * cutoff, -ZERO_CROSSINGS, ZERO_CROSSINGS)
    window = np.cos(t * math.pi / ZERO_CROSSINGS / 2) ** 2
    t = t * math.pi
    with np.errstate(invalid="ignore", divide="ignore"):
        sinc = np.where(t == 0, 1.0, np.sin(t) / t)
    return (sinc * (window * (cutoff / o))).astype(np.float32), width


def output_length(length: int, rate_in: int, rate_out: int) -> int:
    o, n = reduced(rate_in, rate_out)
    return math.ceil(n * length / o)


def resample(audio: NDArray[np.float32], rate_in: int, rate_out: int) -> NDArray[np.float32]:
    """audio [..., T] at rate_in -> [..., ceil(T * rate_out / rate_in)] at rate_out (float32)."""
    x = np.asarray(audio, np.float32)
    if int(rate_in) == int(rate_out):
        return x
    o, n = reduced(rate_in, rate_out)
    kernel, width = sinc_kernel(rate_in, rate_out)
    lead = x.shape[:-1]
    flat = x.reshape(-1, x.shape[-1])
    length = flat.shape[-1]
    padded = np.pad(flat, ((0, 0), (width, width + o)))
    taps = kernel.shape[1]
    steps = (padded.shape[1] - taps) // o + 1
    # windows [rows, steps, taps] over the padded input with stride o (a view), then one matmul per row
    windows = np.lib.stride_tricks.sliding_window_view(padded, taps, axis=1)[:, ::o][:, :steps]
    out = np.einsum("rsk,nk->rsn", windows, kernel, optimize=True).reshape(flat.shape[0], steps * n)
    keep = output_length(length, rate_in, rate_out)
    return np.ascontiguousarray(out[:, :keep].reshape(*lead, keep), dtype=np.float32)
