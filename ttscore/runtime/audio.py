"""Reference audio, family-agnostic and numpy only (serving imports neither torch nor librosa).

- ``load_audio``: bytes -> (float32 mono, sample rate) via soundfile, channels averaged like the reference
  (``to_mono``, also the families' rule for a clip handed to them as [samples, channels]).
- ``resample``: librosa.resample's default ('soxr_hq' through soxr, then fixed to ceil(n * ratio) samples).
- ``check_reference``: a family's bounds on a clip (rate, duration, finite samples).
A family's own front end (e.g. a mel spectrogram) lives in its folder under ttscore/runtime/families/.
"""

from __future__ import annotations

import io
import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ttscore.contract.errors import AudioDecodeError, InvalidRequest
from ttscore.contract.rules import RefAudioBounds

_PARAM = "ref_audio"


def load_audio(data: bytes) -> tuple[NDArray[Any], int]:
    """Decode an audio file held in memory (wav, flac, ogg, ... whatever libsndfile reads)."""
    import soundfile as sf

    if not data:
        raise AudioDecodeError("reference audio is empty", param=_PARAM)
    try:
        with io.BytesIO(data) as f:
            audio, sr = sf.read(f, dtype="float32", always_2d=False)
    except Exception as exc:  # libsndfile raises several types for bad input
        raise AudioDecodeError(f"could not decode reference audio: {exc}", param=_PARAM) from exc
    audio = to_mono(audio)
    if audio.size == 0:
        raise AudioDecodeError("reference audio has no samples", param=_PARAM)
    if not np.all(np.isfinite(audio)):
        raise AudioDecodeError("reference audio contains non-finite samples", param=_PARAM)
    return audio.astype(np.float32, copy=False), int(sr)


def to_mono(audio: NDArray[Any]) -> NDArray[np.float32]:
    """float32 samples; a [samples, channels] clip (soundfile's layout) averaged over its channels."""
    wav = np.asarray(audio, np.float32)
    return wav.mean(axis=-1) if wav.ndim == 2 else wav


def resample(audio: NDArray[Any], sr_in: int, sr_out: int) -> NDArray[Any]:
    """librosa.resample(y, orig_sr=sr_in, target_sr=sr_out) with its defaults (res_type 'soxr_hq')."""
    import soxr

    audio = np.asarray(audio)
    if sr_in == sr_out:
        return audio
    if sr_in <= 0 or sr_out <= 0:
        raise InvalidRequest(f"invalid sample rate {sr_in} -> {sr_out}", param=_PARAM)
    n_out = math.ceil(audio.shape[-1] * float(sr_out) / sr_in)
    if audio.ndim == 1:
        y = soxr.resample(audio, sr_in, sr_out, quality="soxr_hq")
    else:  # soxr reads 2-D input as [time, channels]; librosa resamples along the last axis
        y = np.apply_along_axis(soxr.resample, -1, audio, in_rate=sr_in, out_rate=sr_out, quality="soxr_hq")
    # librosa.util.fix_length: trim or zero-pad to exactly n_out samples.
    if y.shape[-1] > n_out:
        y = y[..., :n_out]
    elif y.shape[-1] < n_out:
        y = np.pad(y, [(0, 0)] * (y.ndim - 1) + [(0, n_out - y.shape[-1])])
    return np.asarray(y, dtype=audio.dtype)


def check_reference(
    audio: NDArray[Any], sample_rate: int, param: str = "ref_audio", rate_param: str | None = None,
    bounds: RefAudioBounds | None = None,
) -> NDArray[np.float32]:
    """A family's bounds on a reference clip (its FamilyRules.ref_audio; default: the contract's
    RefAudioBounds()): rate, duration, finite samples. Returns it as flat float32; raises
    InvalidRequest(param=...)."""
    b = bounds or RefAudioBounds()
    wav = np.asarray(audio, dtype=np.float32).reshape(-1)
    if not b.min_rate <= int(sample_rate) <= b.max_rate:
        raise InvalidRequest(f"sample rate must be in [{b.min_rate}, {b.max_rate}], got {sample_rate}", rate_param or param)
    seconds = wav.size / sample_rate
    if not b.min_seconds <= seconds <= b.max_seconds:
        raise InvalidRequest(
            f"reference audio must last {b.min_seconds}-{b.max_seconds:.0f} s, got {seconds:.2f} s",
            param,
        )
    if not np.all(np.isfinite(wav)):
        raise InvalidRequest("reference audio must be finite", param)
    return wav
