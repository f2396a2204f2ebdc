"""Qwen3-TTS's reference-audio front end (numpy only).

- ``log_mel``: the reference ``mel_spectrogram`` (qwen_tts modeling_qwen3_tts) that feeds the speaker
  encoder: reflect pad (n_fft - hop) // 2 on both sides, periodic Hann window, STFT without centering,
  magnitude sqrt(re^2 + im^2 + 1e-9), slaney mel basis (mel_filters.npy from export), log(clamp(., 1e-5)).
- ``pad_to_frames``: right-pad with zeros to a whole number of codec frames.
- ``prepare_reference``: a clip -> (24 kHz audio for the speech encoder, log-mel for the speaker encoder).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from ttscore.contract.errors import InvalidRequest
from ttscore.contract.qwen3_tts import (
    MEL_BINS,
    MEL_HOP,
    MEL_N_FFT,
    MEL_WIN,
    RULES,
    SAMPLE_RATE,
    SAMPLES_PER_FRAME,
)
from ttscore.runtime.audio import check_reference, resample

_PARAM = "ref_audio"


def _hann_periodic(n: int) -> NDArray[Any]:
    """torch.hann_window(n) (periodic=True)."""
    window: NDArray[Any] = 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(n) / n)
    return window


def min_mel_samples() -> int:
    """Shortest input log_mel accepts: the reflect pad needs more samples than it pads."""
    return (MEL_N_FFT - MEL_HOP) // 2 + 1


def log_mel(audio_24k: NDArray[Any], mel_filters: NDArray[Any]) -> NDArray[Any]:
    """[frames, MEL_BINS] float32 log-mel of a 24 kHz mono waveform, frames = 1 + (n + 2p - n_fft) // hop."""
    y = np.asarray(audio_24k, dtype=np.float64).reshape(-1)
    pad = (MEL_N_FFT - MEL_HOP) // 2
    if y.shape[0] <= pad:
        raise InvalidRequest(
            f"reference audio too short: {y.shape[0]} samples, need more than {pad} at 24 kHz", param=_PARAM
        )
    if mel_filters.shape != (MEL_BINS, MEL_N_FFT // 2 + 1):
        raise ValueError(f"mel_filters shape {mel_filters.shape}, expected {(MEL_BINS, MEL_N_FFT // 2 + 1)}")
    y = np.pad(y, (pad, pad), mode="reflect")
    n_frames = 1 + (y.shape[0] - MEL_N_FFT) // MEL_HOP
    frames = np.lib.stride_tricks.sliding_window_view(y, MEL_N_FFT)[::MEL_HOP][:n_frames]
    window = np.zeros(MEL_N_FFT)
    left = (MEL_N_FFT - MEL_WIN) // 2  # torch.stft centers a shorter window inside n_fft
    window[left : left + MEL_WIN] = _hann_periodic(MEL_WIN)
    spec = np.fft.rfft(frames * window, n=MEL_N_FFT, axis=-1)  # [frames, n_fft // 2 + 1]
    mag = np.sqrt(spec.real**2 + spec.imag**2 + 1e-9)
    mel = mag @ mel_filters.astype(np.float64).T  # [frames, MEL_BINS]
    out: NDArray[Any] = np.log(np.maximum(mel, 1e-5)).astype(np.float32)
    return out


def pad_to_frames(audio: NDArray[Any], samples_per_frame: int = SAMPLES_PER_FRAME) -> NDArray[Any]:
    """Right-pad with zeros to a multiple of samples_per_frame (no copy when already aligned)."""
    audio = np.asarray(audio)
    extra = (-audio.shape[-1]) % samples_per_frame
    if extra == 0:
        return audio
    return np.pad(audio, [(0, 0)] * (audio.ndim - 1) + [(0, extra)])


def prepare_reference(
    audio: NDArray[Any],
    sample_rate: int,
    mel_filters: NDArray[Any],
    param: str = "ref_audio",
    rate_param: str | None = None,
) -> tuple[NDArray[Any], NDArray[Any]]:
    """A reference clip -> (24 kHz audio for the speech encoder, log-mel [frames, 128] for the
    speaker encoder). The audio is NOT padded: the speech-encoder graph takes any length and
    returns ceil(samples / 1920) frames, exactly like the reference `encode` (zero-padding first
    changes the last frame's codes). Raises InvalidRequest(param=...)."""
    wav = check_reference(audio, sample_rate, param, rate_param, RULES.ref_audio)
    wav24 = resample(wav, int(sample_rate), SAMPLE_RATE) if int(sample_rate) != SAMPLE_RATE else wav
    return wav24.astype(np.float32), np.asarray(log_mel(wav24, mel_filters), dtype=np.float32)
