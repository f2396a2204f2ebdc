"""CosyVoice3's reference-clip features, in numpy (computed once per voice: at upload or per request):
the prompt mel, the speaker embedding and the speech tokens, as upstream CosyVoice's front-end computes them
(the prompt mel and speaker embedding also as vLLM-Omni 0.30.0's `cosyvoice3/utils.py` does).

- `resample`: torchaudio's `transforms.Resample` (windowed sinc, Hann window, lowpass_filter_width 6,
  rolloff 0.99; the kernel in float64, applied in float32), which upstream's `load_wav` uses for every path
  (16 kHz and 24 kHz) and vLLM-Omni for the prompt mel and campplus. vLLM-Omni's speech-token path differs:
  scipy's `resample_poly` to 16 kHz, then s3tokenizer's torch model (`cosyvoice3.py`,
  `_extract_speech_token_via_s3`); here upstream's (issue 36, rule 2), the checkpoint's
  speech_tokenizer_v3.onnx on the sinc-resampled clip. The two 16 kHz waveforms are 38-41 dB apart
  (tests/runtime_tests/test_cosyvoice3_frontend.py).
- `prompt_mel`: matcha's `mel_spectrogram` at 24 kHz (reflect pad (n_fft - hop) / 2, STFT n_fft 1920 hop
  480 Hann without centring, magnitude sqrt(re^2 + im^2 + 1e-9), Slaney mel 80 bins 0..12 kHz, natural log
  clamped at 1e-5) -> [frames, 80].
- `fbank`: Kaldi's fbank at 16 kHz (torchaudio.compliance.kaldi defaults: 25 ms frames every 10 ms,
  snip_edges, DC offset removed, pre-emphasis 0.97, Povey window, 512-point power spectrum, 80 triangular
  bins on Kaldi's mel scale 20 Hz..8 kHz, log floored at float32 epsilon), minus its mean over time
  -> campplus.onnx -> the 192-d speaker embedding.
- `whisper_mel`: Whisper's log-mel (128 bins at 16 kHz, STFT 400/160 centred, last frame dropped, log10
  clamped at 1e-10, floored 8 below the max, (x + 4) / 4) -> speech_tokenizer_v3.onnx -> speech tokens.
- `prompt`: tokens and mel trimmed to the 2:1 ratio (token_len = min(mel frames // 2, tokens)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


@lru_cache(maxsize=8)
def _sinc_kernel(orig: int, new: int, width_lp: int = 6, rolloff: float = 0.99) -> tuple[F32, int]:
    base = min(orig, new) * rolloff
    width = math.ceil(width_lp * orig / base)
    idx = np.arange(-width, width + orig, dtype=np.float64)[None, :] / orig
    first = (np.arange(0, -new, -1) / new).astype(np.float32).astype(np.float64)  # torch: int / int -> float32
    t = (first[:, None] + idx) * base
    t = np.clip(t, -width_lp, width_lp)
    window = np.cos(t * math.pi / width_lp / 2) ** 2
    t = t * math.pi
    with np.errstate(invalid="ignore", divide="ignore"):
        kernels = np.where(t == 0, 1.0, np.sin(t) / t)
    kernels = kernels * window * (base / orig)
    return kernels.astype(np.float32), width


def resample(wav: F32, orig: int, new: int) -> F32:
    if orig == new:
        return wav.astype(np.float32)
    g = math.gcd(orig, new)
    o, n = orig // g, new // g
    kernel, width = _sinc_kernel(o, n)
    x = np.pad(wav.astype(np.float32), (width, width + o))
    k = kernel.shape[1]
    steps = (len(x) - k) // o + 1
    frames = np.lib.stride_tricks.as_strided(x, (steps, k), (x.strides[0] * o, x.strides[0]))
    out = (frames @ kernel.T).reshape(-1)  # [steps, new] -> interleaved
    target = math.ceil(n * len(wav) / o)
    res: F32 = out[:target].astype(np.float32)
    return res


def _hz_to_mel(f: F64) -> F64:
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, math.log(6.4) / 27.0
    out: F64 = np.where(f >= min_log_hz, min_log_mel + np.log(np.maximum(f, 1e-10) / min_log_hz) / logstep, f / f_sp)
    return out


def _mel_to_hz(m: F64) -> F64:
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, math.log(6.4) / 27.0
    out: F64 = np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), f_sp * m)
    return out


@lru_cache(maxsize=4)
def _slaney_mel(sr: int, n_fft: int, n_mels: int, fmin: float = 0.0, fmax: float | None = None) -> F64:
    """The Slaney mel filterbank with area normalisation [n_mels, n_fft // 2 + 1] (librosa's default
    `filters.mel`, which vLLM-Omni's mel_filter_bank reproduces with torchaudio)."""
    top = sr / 2 if fmax is None else fmax
    freqs = np.linspace(0, sr / 2, 1 + n_fft // 2)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(np.array(fmin)), _hz_to_mel(np.array(top)), n_mels + 2))
    fdiff = np.diff(edges)
    ramps = edges[:, None] - freqs[None, :]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper)) * (2.0 / (edges[2:] - edges[:-2]))[:, None]
    out: F64 = weights.astype(np.float32).astype(np.float64)
    return out


def _stft_power(x: F64, n_fft: int, hop: int, window: F64) -> F64:
    steps = 1 + (len(x) - n_fft) // hop
    frames = np.lib.stride_tricks.as_strided(x, (steps, n_fft), (x.strides[0] * hop, x.strides[0]))
    spec = np.fft.rfft(frames * window, axis=1)
    out: F64 = (spec.real ** 2 + spec.imag ** 2)
    return out


def _hann(n: int, periodic: bool = True) -> F64:
    m = n if periodic else n - 1
    out: F64 = 0.5 - 0.5 * np.cos(2 * math.pi * np.arange(n) / m)
    return out


def prompt_mel(wav24: F32, n_fft: int = 1920, hop: int = 480, mels: int = 80, sr: int = 24000) -> F32:
    pad = (n_fft - hop) // 2
    x = np.pad(wav24.astype(np.float64), (pad, pad), mode="reflect")
    mag = np.sqrt(_stft_power(x, n_fft, hop, _hann(n_fft)) + 1e-9)
    mel = mag @ _slaney_mel(sr, n_fft, mels).T
    out: F32 = np.log(np.maximum(mel, 1e-5)).astype(np.float32)
    return out


def _kaldi_mel(f: F64 | float) -> Any:
    return 1127.0 * np.log(1.0 + np.asarray(f) / 700.0)


@lru_cache(maxsize=2)
def _kaldi_banks(bins: int = 80, padded: int = 512, sr: int = 16000, low: float = 20.0) -> F64:
    half = padded // 2
    mel_low, mel_high = _kaldi_mel(low), _kaldi_mel(sr / 2)
    delta = (mel_high - mel_low) / (bins + 1)
    b = np.arange(bins)[:, None]
    left, center, right = mel_low + b * delta, mel_low + (b + 1) * delta, mel_low + (b + 2) * delta
    mel = _kaldi_mel(sr / padded * np.arange(half))[None, :]
    up = (mel - left) / (center - left)
    down = (right - mel) / (right - center)
    banks = np.maximum(0.0, np.minimum(up, down))
    out: F64 = np.pad(banks, ((0, 0), (0, 1)))
    return out


def fbank(wav16: F32, bins: int = 80) -> F32:
    """Kaldi fbank [frames, bins] minus its mean over time (vLLM-Omni's extract_spk_embedding)."""
    length, shift, padded = 400, 160, 512
    x = wav16.astype(np.float64)
    steps = 1 + (len(x) - length) // shift
    frames = np.lib.stride_tricks.as_strided(x, (steps, length), (x.strides[0] * shift, x.strides[0])).copy()
    frames -= frames.mean(axis=1, keepdims=True)
    prev = np.concatenate([frames[:, :1], frames[:, :-1]], axis=1)
    frames = frames - 0.97 * prev
    frames *= _hann(length, periodic=False) ** 0.85
    spec = np.fft.rfft(np.pad(frames, ((0, 0), (0, padded - length))), axis=1)
    power = spec.real ** 2 + spec.imag ** 2
    feats = np.log(np.maximum(power @ _kaldi_banks(bins).T, float(np.finfo(np.float32).eps)))
    out: F32 = (feats - feats.mean(axis=0, keepdims=True)).astype(np.float32)
    return out


def whisper_mel(wav16: F32, mels: int = 128) -> F32:
    """Whisper's log-mel [mels, frames] at 16 kHz."""
    x = np.pad(wav16.astype(np.float64), (200, 200), mode="reflect")
    power = _stft_power(x, 400, 160, _hann(400))[:-1]
    mel = power @ _slaney_mel(16000, 400, mels).T
    log = np.log10(np.maximum(mel, 1e-10))
    log = np.maximum(log, log.max() - 8.0)
    out: F32 = ((log + 4.0) / 4.0).T.astype(np.float32)
    return out


@dataclass
class ClipFeatures:
    speech_tokens: I64  # [T]
    feat: F32  # [2T, 80] the prompt mel
    embedding: F32  # [192]


def clip_features(wav: F32, sr: int, campplus: Any, speech_tokenizer: Any) -> ClipFeatures:
    """A reference clip (mono float, any rate >= 16 kHz) -> its speech tokens, prompt mel and speaker
    embedding; `campplus`/`speech_tokenizer` are ONNX Runtime sessions of the checkpoint's models
    (fed by input position, as upstream feeds them)."""
    wav16, wav24 = resample(wav, sr, 16000), resample(wav, sr, 24000)
    mel = prompt_mel(wav24)
    fb = fbank(wav16)
    emb = campplus.run(None, {campplus.get_inputs()[0].name: fb[None]})[0].reshape(-1).astype(np.float32)
    wm = whisper_mel(wav16)
    ins = speech_tokenizer.get_inputs()
    tokens = speech_tokenizer.run(None, {ins[0].name: wm[None], ins[1].name: np.array([wm.shape[1]], np.int32)})[0]
    tokens = np.asarray(tokens).reshape(-1).astype(np.int64)
    n = min(mel.shape[0] // 2, len(tokens))
    return ClipFeatures(tokens[:n], mel[: 2 * n], emb)


class FrontEnd:
    """An export's front-end models (its `frontend/` folder: campplus.onnx, speech_tokenizer_v3.onnx, as
    shipped) as ONNX Runtime sessions: `features(wav, sr)` -> ClipFeatures (InvalidRequest naming
    `ref_audio` for a clip it cannot take)."""

    def __init__(self, folder: Path, threads: int | None = None) -> None:
        import onnxruntime as ort

        from ttscore.contract.errors import ArtifactError
        from ttscore.runtime.families.cosyvoice3.checkpoint import CAMPPLUS, SPEECH_TOKENIZER
        from ttscore.runtime.onnx import session_options

        opts = session_options(threads)
        missing = [n for n in (CAMPPLUS, SPEECH_TOKENIZER) if not (folder / n).is_file()]
        if missing:
            raise ArtifactError(f"{folder}: missing the front-end model(s) {', '.join(missing)} (re-export)")
        self.campplus = ort.InferenceSession(str(folder / CAMPPLUS), opts, providers=["CPUExecutionProvider"])
        self.tokenizer = ort.InferenceSession(str(folder / SPEECH_TOKENIZER), opts,
                                              providers=["CPUExecutionProvider"])

    def features(self, wav: F32, sr: int) -> ClipFeatures:
        from ttscore.contract.cosyvoice3 import REF_AUDIO
        from ttscore.contract.errors import InvalidRequest

        x = np.asarray(wav, np.float32).reshape(-1)
        if not REF_AUDIO.min_rate <= int(sr) <= REF_AUDIO.max_rate:
            raise InvalidRequest(f"'ref_audio' sample rate must be between {REF_AUDIO.min_rate} and "
                                 f"{REF_AUDIO.max_rate} Hz, got {sr}", "ref_audio")
        seconds = len(x) / int(sr)
        if not REF_AUDIO.min_seconds <= seconds <= REF_AUDIO.max_seconds:
            raise InvalidRequest(f"'ref_audio' must be {REF_AUDIO.min_seconds} to {REF_AUDIO.max_seconds} s long, "
                                 f"got {seconds:.2f} s", "ref_audio")
        if not np.isfinite(x).all():
            raise InvalidRequest("'ref_audio' has non-finite samples", "ref_audio")
        clip = clip_features(x, int(sr), self.campplus, self.tokenizer)
        if len(clip.speech_tokens) == 0:
            raise InvalidRequest("'ref_audio' is too short: it gives no speech tokens", "ref_audio")
        return clip
