"""The aligner's audio front end in numpy: Whisper's log-mel (what `WhisperFeatureExtractor` computes for one
unpadded 16 kHz clip) and the audio encoder's chunk layout (qwen-asr's `Qwen3ASRAudioEncoder.forward`): the mel
frames cut into chunks of 2 * n_window, each chunk's frames after three stride-2 convolutions, and the attention
windows of `n_window_infer / (2 * n_window)` chunks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ttscore.contract import qwen3_forced_aligner as spec

LOG_FLOOR = 1e-10  # log10's floor
DYNAMIC_RANGE = 8.0  # log10 units below the clip's loudest kept (Whisper's)


def log_mel(audio: NDArray[Any], filters: NDArray[Any]) -> NDArray[np.float32]:
    """[num_mel_bins, len // 160] log-mel of a mono 16 kHz clip: a periodic Hann window of 400 samples every 160
    (centred, reflect-padded), power spectrum, the Slaney filter bank `filters` [201, mel], log10 floored at 1e-10,
    at most 8 below the clip's maximum, then (x + 4) / 4. The last STFT frame is dropped, as Whisper drops it."""
    x = np.asarray(audio, dtype=np.float32)
    if x.ndim != 1 or x.shape[0] < spec.HOP_LENGTH:
        raise ValueError(f"want a mono clip of at least {spec.HOP_LENGTH} samples, got shape {x.shape}")
    pad = spec.N_FFT // 2
    padded = np.pad(x, pad, mode="reflect")
    frames = 1 + (padded.shape[0] - spec.N_FFT) // spec.HOP_LENGTH
    idx = np.arange(spec.N_FFT)[None, :] + spec.HOP_LENGTH * np.arange(frames)[:, None]
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(spec.N_FFT) / spec.N_FFT)).astype(np.float32)
    spectrum = np.fft.rfft(padded[idx] * window, axis=-1)
    power = (np.abs(spectrum) ** 2).astype(np.float32)[:-1]  # [frames - 1, 201]
    mel = power @ np.asarray(filters, dtype=np.float32)  # [frames - 1, mel]
    logs = np.log10(np.maximum(mel, LOG_FLOOR))
    logs = np.maximum(logs, logs.max() - DYNAMIC_RANGE)
    out: NDArray[np.float32] = ((logs + 4.0) / 4.0).T.astype(np.float32)
    return out


def conv_frames(frames: int) -> int:
    """A chunk's frames after the encoder's three stride-2 convolutions (kernel 3, padding 1)."""
    for _ in range(3):
        frames = (frames - 1) // 2 + 1
    return frames


@dataclass(frozen=True)
class ChunkLayout:
    """The audio encoder's inputs for one clip (ttscore.contract.qwen3_forced_aligner.audio_encoder_spec) and how many audio
    embeddings it gives (the prompt's `<|audio_pad|>` count)."""

    chunks: NDArray[np.float32]  # [N, mel, C]
    valid_index: NDArray[np.int64]  # [M]
    window_id: NDArray[np.int64]  # [M]

    @property
    def embeddings(self) -> int:
        return int(self.valid_index.shape[0])


def chunk_layout(mel: NDArray[Any], chunk_frames: int, chunks_per_window: int) -> ChunkLayout:
    """Cut `mel` [bins, T] into chunks of `chunk_frames` (the last one shorter, zero-padded to the longest), and
    say which convolution outputs are frames and which attention window each frame is in (windows of
    `chunks_per_window` full chunks' frames, counted over the clip's frames)."""
    bins, total = mel.shape
    if total <= 0:
        raise ValueError("the clip has no mel frames")
    n = -(-total // chunk_frames)
    lengths = [chunk_frames] * n
    lengths[-1] = total - chunk_frames * (n - 1)
    width = max(lengths)
    chunks = np.zeros((n, bins, width), np.float32)
    for i, length in enumerate(lengths):
        chunks[i, :, :length] = mel[:, i * chunk_frames:i * chunk_frames + length]
    per_chunk = conv_frames(width)
    valid = np.concatenate([i * per_chunk + np.arange(conv_frames(length)) for i, length in enumerate(lengths)])
    window = per_chunk * chunks_per_window
    return ChunkLayout(chunks, valid.astype(np.int64), (np.arange(valid.shape[0]) // window).astype(np.int64))
