"""Audio fixtures for the voices tests: tones (as samples, a WAV file, encoded in every upload format), a fake
feature extractor."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np


def tone(seconds: float, sr: int = 24000, freq: float = 220.0, amp: float = 0.3) -> np.ndarray:
    t = np.arange(round(seconds * sr)) / sr
    return (amp * np.sin(2 * np.pi * freq * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))).astype(np.float32)


def tone_file(path: Path, seconds: float, sr: int) -> Path:
    """`path`, written: tone(seconds, sr) as a float WAV (so it decodes to those samples exactly)."""
    import soundfile as sf

    sf.write(path, tone(seconds, sr), sr, subtype="FLOAT")
    return path


def encode_sf(audio: np.ndarray, sr: int, fmt: str = "WAV", subtype: str | None = None) -> bytes:
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, audio, sr, format=fmt, subtype=subtype)
    return buf.getvalue()


def wav(seconds: float = 1.5, sr: int = 24000, freq: float = 220.0) -> bytes:
    return encode_sf(tone(seconds, sr, freq), sr)


def encode_av(audio: np.ndarray, sr: int, fmt: str, codec: str) -> bytes:
    """Encode mono float audio with PyAV (fmt: adts, mp4, webm, ogg; codec: aac, libopus, opus)."""
    import av

    buf = io.BytesIO()
    with av.open(buf, mode="w", format=fmt) as container:
        stream = container.add_stream(codec, rate=sr)
        stream.layout = "mono"
        sample_fmt = stream.codec_context.codec.audio_formats[0].name
        pos = 0
        while pos < audio.shape[0]:
            chunk = audio[pos : pos + 960]
            if sample_fmt.startswith("s16"):
                arr = (np.clip(chunk, -1, 1) * 32767).astype(np.int16)[None]
            else:
                arr = chunk.astype(np.float32)[None]
            frame = av.AudioFrame.from_ndarray(arr, format=sample_fmt, layout="mono")
            frame.sample_rate = sr
            frame.pts = pos
            for packet in stream.encode(frame):
                container.mux(packet)
            pos += chunk.shape[0]
        for packet in stream.encode(None):
            container.mux(packet)
    return buf.getvalue()


def flac_without_length(audio: np.ndarray, sr: int) -> bytes:
    """A FLAC whose STREAMINFO says 'total samples unknown' (the header cannot bound its length)."""
    data = bytearray(encode_sf(audio, sr, "FLAC", "PCM_16"))
    assert data[:4] == b"fLaC" and data[4] & 0x7F == 0  # STREAMINFO first
    off = 8 + 10  # sample rate (20 bits), channels (3), bits (5), total samples (36) start here
    packed = int.from_bytes(data[off : off + 8], "big")
    packed &= ~((1 << 36) - 1)
    data[off : off + 8] = packed.to_bytes(8, "big")
    return bytes(data)


class FakeCompute:
    """Deterministic stand-in for the voice-features ensemble; counts its calls."""

    def __init__(self, dim: int = 8, groups: int = 16) -> None:
        self.dim = dim
        self.groups = groups
        self.calls: list[tuple[int, int, bool]] = []

    def __call__(self, audio: np.ndarray, sr: int, with_codes: bool):
        self.calls.append((int(audio.shape[0]), int(sr), bool(with_codes)))
        return self.expected(audio, sr, with_codes)

    def expected(self, audio: np.ndarray, sr: int, with_codes: bool):
        a = np.asarray(audio, dtype=np.float64)
        base = np.array([a.mean(), a.std(), a.shape[0] / sr, sr / 1000.0], dtype=np.float64)
        xvec = np.resize(base, self.dim).astype(np.float32)
        codes = None
        if with_codes:
            frames = max(1, int(np.ceil(a.shape[0] / sr * 12.5)))
            codes = (np.arange(frames * self.groups).reshape(frames, self.groups) % 2048).astype(np.int64)
        return xvec, codes
