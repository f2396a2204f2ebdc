"""Audio out: float32 PCM from the model -> the response format's bytes (pure; PyPI wheels only).

- wav / pcm: 16-bit little-endian, quantised exactly like libsndfile's PCM_16 writer (round to
  32-bit, then keep the top 16 bits; clipped), so a WAV here carries the same samples as
  `triton-tts say`'s soundfile output.
  A streamed WAV header has 0xFFFFFFFF in both size fields (length unknown, as OpenAI streams it).
- flac: soundfile into a BytesIO (seekable: libsndfile seeks back to patch headers).
- mp3: lameenc (CBR). opus: Ogg Opus via PyAV's libopus. aac: ADTS via PyAV's native AAC encoder.
- Streamed mp3 / opus: the same encoders fed chunk by chunk. mp3: lameenc's bytes of a chunk are those frames
  of the one-shot file (the whole stream is the whole file, byte for byte). opus: Ogg Opus of 20 ms packets, one
  Ogg page per packet written through at once, so the bytes sent after every chunk are a decodable Ogg stream
  holding all of that chunk's audio but the encoder's last partial frame (< 20 ms, sent with the next chunk);
  a page's 28 header bytes per 20 ms cost ~11 kbit/s over the whole file's.
- ulaw / alaw (G.711 mu-law / A-law, telephony): 8 kHz by definition, one byte a sample, encoded
  from the same 16-bit samples as pcm with ITU-T G.711's segment tables (bit-identical to the
  reference encoder, e.g. Python's audioop). A whole file is a WAV whose format tag says G.711
  (7 mu-law, 6 A-law; 18-byte fmt chunk and a fact chunk, as non-PCM WAV requires); a stream (raw,
  SSE, WebSocket chunks) is the headerless bytes (media type audio/basic, audio/x-alaw-basic).
- Resampling: soxr.ResampleStream, for whole clips too, so chunked output equals one shot.
- Speed: PyAV's atempo filter (pitch kept), chained so each stage stays within [0.5, 2].
"""

from __future__ import annotations

import io
import struct
from fractions import Fraction
from typing import Any

import numpy as np

MEDIA_TYPES = {
    "wav": "audio/wav",
    "pcm": "audio/pcm",
    "flac": "audio/flac",
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "aac": "audio/aac",
    "ulaw": "audio/wav",  # whole file: WAV with the G.711 format tag
    "alaw": "audio/wav",
}
# Streamed (headerless) G.711: the media types of raw 8 kHz mu-law (RFC 2046) and A-law.
STREAM_MEDIA_TYPES = {"ulaw": "audio/basic", "alaw": "audio/x-alaw-basic"}
G711_FORMATS = ("ulaw", "alaw")
G711_RATE = 8000
MIN_RATE, MAX_RATE = 8000, 48000
# Rates each codec can carry without resampling inside the encoder.
_CODEC_RATES = {
    "mp3": (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000),
    "opus": (8000, 12000, 16000, 24000, 48000),
    "aac": (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000),
    "ulaw": (G711_RATE,),
    "alaw": (G711_RATE,),
}
UNKNOWN_LENGTH = 0xFFFFFFFF


class _AnyRate:
    """Every integer rate in [MIN_RATE, MAX_RATE] (wav, pcm, flac)."""

    def __contains__(self, rate: object) -> bool:
        return isinstance(rate, int) and not isinstance(rate, bool) and MIN_RATE <= rate <= MAX_RATE


def sample_rates(fmt: str) -> _AnyRate | tuple[int, ...]:
    return _CODEC_RATES.get(fmt) or _AnyRate()


def default_rate(fmt: str, source_rate: int) -> int:
    """The output rate when the request names none: the model's, except for the formats defined
    at one rate (G.711: 8 kHz)."""
    return G711_RATE if fmt in G711_FORMATS else int(source_rate)


def media_type(fmt: str, streamed: bool = False) -> str:
    """Content type of a whole file of `fmt`, or of its raw byte stream."""
    return STREAM_MEDIA_TYPES.get(fmt, MEDIA_TYPES[fmt]) if streamed else MEDIA_TYPES[fmt]


def describe_rates(fmt: str) -> str:
    rates = _CODEC_RATES.get(fmt)
    return ", ".join(str(r) for r in rates) if rates else f"any integer from {MIN_RATE} to {MAX_RATE}"


# --- 16-bit PCM and WAV ----------------------------------------------------------------------------


def to_int16(pcm: np.ndarray) -> np.ndarray:
    """float [-1, 1] -> int16 exactly as libsndfile writes PCM_16: lrint(x * 2^31) clipped to
    int32, then an arithmetic shift by 16 (so tiny negatives round to 0, the rest floors)."""
    x = np.rint(np.asarray(pcm, dtype=np.float64).reshape(-1) * 2147483648.0)
    q = np.clip(x, -2147483648.0, 2147483647.0).astype(np.int64)
    return (q >> 16).astype("<i2")


def heard(pcm: np.ndarray) -> np.ndarray:
    """float32 samples of the 16-bit PCM a client receives for `pcm` (to_int16, read back as x / 2^15): what
    a client's decoder gives it, clipped to full scale (a model may overshoot it)."""
    return to_int16(pcm).astype(np.float32) / np.float32(32768.0)


def pcm_bytes(pcm: np.ndarray) -> bytes:
    return to_int16(pcm).tobytes()


def wav_header(sample_rate: int, data_bytes: int | None, channels: int = 1, bits: int = 16) -> bytes:
    """44-byte PCM WAV header; data_bytes=None writes the streaming unknown-length marker."""
    block = channels * bits // 8
    if data_bytes is None:
        riff_size = data_size = UNKNOWN_LENGTH
    else:
        data_size = data_bytes
        riff_size = 36 + data_bytes
    return struct.pack(
        "<4sI4s4sIHHIIHH4sI",
        b"RIFF", riff_size, b"WAVE", b"fmt ", 16, 1, channels, sample_rate, sample_rate * block, block, bits,
        b"data", data_size,
    )


def parse_wav(data: bytes) -> tuple[int, np.ndarray]:
    """(sample rate, int16 samples) of a mono PCM_16 WAV as written here, streamed or not."""
    if len(data) < 44 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise ValueError("not a RIFF/WAVE stream")
    rate = struct.unpack_from("<I", data, 24)[0]
    return int(rate), np.frombuffer(data[44:], dtype="<i2")


# --- G.711 (telephony) -------------------------------------------------------------------------------

_ULAW_SEG_END = np.array([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF], dtype=np.int32)
_ALAW_SEG_END = np.array([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF], dtype=np.int32)
_WAVE_FORMAT_TAG = {"alaw": 6, "ulaw": 7}


def lin2ulaw(samples: np.ndarray) -> np.ndarray:
    """int16 -> G.711 mu-law bytes: 14-bit magnitude plus bias, segment, 4 mantissa bits, inverted."""
    v = np.asarray(samples, dtype=np.int32).reshape(-1) >> 2
    mask = np.where(v < 0, 0x7F, 0xFF)
    v = np.minimum(np.abs(v), 8159) + (0x84 >> 2)
    seg = np.searchsorted(_ULAW_SEG_END, v)  # the first segment whose end >= v; 8: beyond them all
    code = np.where(seg >= 8, 0x7F, (np.minimum(seg, 7) << 4) | ((v >> (np.minimum(seg, 7) + 1)) & 0xF))
    return ((code ^ mask) & 0xFF).astype(np.uint8)


def lin2alaw(samples: np.ndarray) -> np.ndarray:
    """int16 -> G.711 A-law bytes: 13-bit magnitude, segment, 4 mantissa bits, even bits inverted."""
    v = np.asarray(samples, dtype=np.int32).reshape(-1) >> 3
    mask = np.where(v >= 0, 0xD5, 0x55)
    v = np.where(v >= 0, v, -v - 1)
    seg = np.searchsorted(_ALAW_SEG_END, v)
    mantissa = np.where(seg < 2, v >> 1, v >> np.clip(seg, 1, 7)) & 0xF
    code = np.where(seg >= 8, 0x7F, (np.minimum(seg, 7) << 4) | mantissa)
    return ((code ^ mask) & 0xFF).astype(np.uint8)


def g711_bytes(pcm: np.ndarray, fmt: str) -> bytes:
    """float PCM (already at 8 kHz) -> headerless G.711 bytes of `fmt` (ulaw / alaw)."""
    samples = to_int16(pcm)
    return (lin2ulaw(samples) if fmt == "ulaw" else lin2alaw(samples)).tobytes()


def g711_wav_header(fmt: str, sample_rate: int, data_bytes: int) -> bytes:
    """A mono 8-bit G.711 WAV header: fmt chunk of 18 bytes (cbSize 0) and a fact chunk (frames)."""
    return struct.pack(
        "<4sI4s4sIHHIIHHH4sII4sI",
        b"RIFF", 4 + 26 + 12 + 8 + data_bytes, b"WAVE",
        b"fmt ", 18, _WAVE_FORMAT_TAG[fmt], 1, sample_rate, sample_rate, 1, 8, 0,
        b"fact", 4, data_bytes,
        b"data", data_bytes,
    )


# --- resampling and speed ------------------------------------------------------------------------


class Resampler:
    """Streaming resampler (soxr HQ); identity when the rates match. `feed(..., last=True)` flushes."""

    def __init__(self, in_rate: int, out_rate: int) -> None:
        self.in_rate, self.out_rate = int(in_rate), int(out_rate)
        self._stream = None
        if self.in_rate != self.out_rate:
            import soxr

            self._stream = soxr.ResampleStream(self.in_rate, self.out_rate, 1, dtype="float32", quality="HQ")

    def feed(self, pcm: np.ndarray, last: bool = False) -> np.ndarray:
        x = np.ascontiguousarray(np.asarray(pcm, dtype=np.float32).reshape(-1))
        if self._stream is None:
            return x
        return np.asarray(self._stream.resample_chunk(x, last=last), dtype=np.float32).reshape(-1)


def resample(pcm: np.ndarray, in_rate: int, out_rate: int) -> np.ndarray:
    return Resampler(in_rate, out_rate).feed(pcm, last=True)


def _atempo_factors(speed: float) -> list[float]:
    factors = []
    s = float(speed)
    while s > 2.0:
        factors.append(2.0)
        s /= 2.0
    while s < 0.5:
        factors.append(0.5)
        s /= 0.5
    factors.append(s)
    return factors


def change_speed(pcm: np.ndarray, sample_rate: int, speed: float) -> np.ndarray:
    """Time-stretch by `speed` (2.0 = twice as fast) keeping the pitch; length round(n / speed)."""
    x = np.ascontiguousarray(np.asarray(pcm, dtype=np.float32).reshape(-1))
    if speed == 1.0 or x.size == 0:
        return x
    import av

    graph = av.filter.Graph()
    node = graph.add_abuffer(format="flt", sample_rate=sample_rate, layout="mono", time_base=Fraction(1, sample_rate))
    for factor in _atempo_factors(speed):
        nxt = graph.add("atempo", f"{factor:.10g}")
        node.link_to(nxt)
        node = nxt
    sink = graph.add("abuffersink")
    node.link_to(sink)
    graph.configure()
    frame = av.AudioFrame.from_ndarray(x[None, :], format="flt", layout="mono")
    frame.sample_rate = sample_rate
    frame.pts = 0
    frame.time_base = Fraction(1, sample_rate)
    graph.push(frame)
    graph.push(None)
    parts = []
    while True:
        try:
            out = graph.pull()
        except (av.error.BlockingIOError, av.error.EOFError):
            break
        parts.append(np.asarray(out.to_ndarray(), dtype=np.float32).reshape(-1))
    y = np.concatenate(parts) if parts else np.zeros(0, np.float32)
    n = round(x.size / speed)
    # atempo's output length drifts by a few ms from n / speed; fix it so durations are exact.
    return y[:n] if y.size >= n else np.concatenate([y, np.zeros(n - y.size, np.float32)])


# --- whole-clip encoders ----------------------------------------------------------------------------


def encode(pcm: np.ndarray, sample_rate: int, fmt: str) -> bytes:
    """A complete file of `fmt` from float32 mono PCM at `sample_rate`."""
    x = np.asarray(pcm, dtype=np.float32).reshape(-1)
    if fmt == "pcm":
        return pcm_bytes(x)
    if fmt == "wav":
        data = pcm_bytes(x)
        return wav_header(sample_rate, len(data)) + data
    if fmt == "flac":
        return _encode_flac(x, sample_rate)
    if fmt == "mp3":
        return _encode_mp3(x, sample_rate)
    if fmt == "opus":
        return _encode_av(x, sample_rate, "ogg", "libopus", bit_rate=_opus_bit_rate(sample_rate))
    if fmt == "aac":
        return _encode_av(x, sample_rate, "adts", "aac", bit_rate=96000 if sample_rate >= 32000 else 64000)
    if fmt in G711_FORMATS:
        data = g711_bytes(x, fmt)
        return g711_wav_header(fmt, sample_rate, len(data)) + data
    raise ValueError(f"unknown audio format {fmt!r}")


def _encode_flac(x: np.ndarray, sample_rate: int) -> bytes:
    import soundfile as sf

    buf = io.BytesIO()  # seekable: libsndfile rewrites the header at close
    sf.write(buf, x, sample_rate, format="FLAC", subtype="PCM_16")
    return buf.getvalue()


def _mp3_encoder(sample_rate: int) -> Any:
    """lameenc's CBR encoder of mono 16-bit samples at `sample_rate` (whole files and streams alike)."""
    import lameenc

    enc = lameenc.Encoder()
    enc.set_bit_rate(128 if sample_rate >= 32000 else 64 if sample_rate >= 16000 else 32)
    enc.set_in_sample_rate(sample_rate)
    enc.set_channels(1)
    enc.set_quality(2)
    return enc


def _opus_bit_rate(sample_rate: int) -> int:
    return 64000 if sample_rate >= 16000 else 24000


def _encode_mp3(x: np.ndarray, sample_rate: int) -> bytes:
    enc = _mp3_encoder(sample_rate)
    return bytes(enc.encode(to_int16(x).tobytes())) + bytes(enc.flush())


def _encode_av(x: np.ndarray, sample_rate: int, container: str, codec: str, bit_rate: int) -> bytes:
    import av

    buf = io.BytesIO()
    with av.open(buf, mode="w", format=container) as out:
        stream = out.add_stream(codec, rate=sample_rate, layout="mono")
        stream.bit_rate = bit_rate
        formats = {f.name for f in stream.codec_context.codec.audio_formats or ()}
        sample_fmt = "flt" if "flt" in formats else "fltp"  # libopus takes flt, the aac encoder fltp
        if x.size:
            frame = av.AudioFrame.from_ndarray(x[None, :], format=sample_fmt, layout="mono")
            frame.sample_rate = sample_rate
            frame.pts = 0
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buf.getvalue()


def render(pcm: np.ndarray, source_rate: int, fmt: str, sample_rate: int, speed: float = 1.0) -> bytes:
    """Whole clip: speed (at the model rate), then resample, then encode."""
    x = change_speed(pcm, source_rate, speed) if speed != 1.0 else np.asarray(pcm, dtype=np.float32)
    if sample_rate != source_rate:
        x = resample(x, source_rate, sample_rate)
    return encode(x, sample_rate, fmt)


# --- streaming ------------------------------------------------------------------------------------

STREAMABLE_FORMATS = ("pcm", "wav", *G711_FORMATS, "mp3", "opus")


class _Drain(io.RawIOBase):
    """A write-only file that keeps what it is given until drained (the Ogg muxer's output, page by page)."""

    def __init__(self) -> None:
        super().__init__()
        self._parts: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def drain(self) -> bytes:
        out, self._parts = b"".join(self._parts), []
        return out


class _OggOpusStream:
    """Ogg Opus written as it is encoded: 20 ms libopus packets, an Ogg page per packet, each page flushed."""

    def __init__(self, sample_rate: int) -> None:
        import av

        self._sink = _Drain()
        # page_duration 20 ms: a page per packet; flush_packets + a small buffer: each page reaches the sink at once
        self._out = av.open(self._sink, mode="w", format="ogg", options={"page_duration": "20000"},
                            container_options={"flush_packets": "1"}, buffer_size=512)
        self._stream = self._out.add_stream("libopus", rate=sample_rate, layout="mono")
        self._stream.bit_rate = _opus_bit_rate(sample_rate)
        self._rate = sample_rate
        self._pts = 0

    def encode(self, x: np.ndarray) -> bytes:
        if x.size:
            import av

            frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(x[None, :]), format="flt", layout="mono")
            frame.sample_rate = self._rate
            frame.pts = self._pts
            self._pts += x.size
            self._out.mux(self._stream.encode(frame))
        return self._sink.drain()

    def close(self) -> bytes:
        self._out.mux(self._stream.encode(None))
        self._out.close()
        return self._sink.drain()


class _Mp3Stream:
    def __init__(self, sample_rate: int) -> None:
        self._enc = _mp3_encoder(sample_rate)

    def encode(self, x: np.ndarray) -> bytes:
        return bytes(self._enc.encode(to_int16(x).tobytes())) if x.size else b""

    def close(self) -> bytes:
        return bytes(self._enc.flush())


class StreamEncoder:
    """Raw-byte stream of pcm, wav (16-bit, after a streaming WAV header), headerless G.711, mp3 or Ogg Opus:
    `start()`, then `chunk()` per model chunk, `finish()`. The bytes out so far always decode."""

    def __init__(self, fmt: str, source_rate: int, sample_rate: int) -> None:
        if fmt not in STREAMABLE_FORMATS:
            raise ValueError(f"{fmt!r} cannot be streamed")
        self.fmt = fmt
        self.sample_rate = sample_rate
        self._resampler = Resampler(source_rate, sample_rate)
        self._codec: _OggOpusStream | _Mp3Stream | None = (
            _OggOpusStream(sample_rate) if fmt == "opus" else _Mp3Stream(sample_rate) if fmt == "mp3" else None)

    def start(self) -> bytes:
        return wav_header(self.sample_rate, None) if self.fmt == "wav" else b""

    def _bytes(self, pcm: np.ndarray) -> bytes:
        if self._codec is not None:
            return self._codec.encode(pcm)
        return g711_bytes(pcm, self.fmt) if self.fmt in G711_FORMATS else pcm_bytes(pcm)

    def chunk(self, pcm: np.ndarray) -> bytes:
        return self._bytes(self._resampler.feed(pcm))

    def finish(self) -> bytes:
        tail = self._bytes(self._resampler.feed(np.zeros(0, np.float32), last=True))
        return tail + self._codec.close() if self._codec is not None else tail
