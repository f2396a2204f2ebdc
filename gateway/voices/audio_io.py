"""Untrusted reference audio: format detection, header probing and bounded decoding (numpy, soundfile, PyAV).

The spec's upload formats are wav, mp3, flac, ogg, aac, webm and mp4. The container is recognised
from its magic bytes, never by letting a demuxer guess (ffmpeg's auto-probing includes playlist
formats that open further URLs). The duration in the header is checked before any decoding, and the
decoder itself stops as soon as it has produced more than the allowed number of samples, so a small,
highly compressed file (FLAC of silence, a lying header) cannot expand into gigabytes of PCM.

The output matches ttscore.runtime.audio.load_audio: float32 mono (channels averaged) at the source rate.
"""

from __future__ import annotations

import io
import logging
import math
from dataclasses import dataclass

import numpy as np

from ttscore.contract.errors import AudioDecodeError, InvalidRequest
from ttscore.contract.families import ref_audio_bounds

logger = logging.getLogger(__name__)

# Canonical MIME type per accepted format (the spec's list), and the aliases clients send.
ALLOWED_MIME_TYPES = ("audio/wav", "audio/mpeg", "audio/flac", "audio/ogg", "audio/aac", "audio/webm", "audio/mp4")
_MIME_ALIASES = {
    "audio/wav": "audio/wav", "audio/x-wav": "audio/wav", "audio/wave": "audio/wav", "audio/vnd.wave": "audio/wav",
    "audio/mpeg": "audio/mpeg", "audio/mp3": "audio/mpeg", "audio/x-mp3": "audio/mpeg", "audio/mpeg3": "audio/mpeg",
    "audio/x-mpeg": "audio/mpeg",
    "audio/flac": "audio/flac", "audio/x-flac": "audio/flac",
    "audio/ogg": "audio/ogg", "application/ogg": "audio/ogg", "audio/vorbis": "audio/ogg", "audio/opus": "audio/ogg",
    "audio/aac": "audio/aac", "audio/x-aac": "audio/aac", "audio/aacp": "audio/aac",
    "audio/webm": "audio/webm", "video/webm": "audio/webm",
    "audio/mp4": "audio/mp4", "video/mp4": "audio/mp4", "audio/x-m4a": "audio/mp4", "audio/m4a": "audio/mp4",
}
_EXT_MIME = {
    "wav": "audio/wav", "wave": "audio/wav", "mp3": "audio/mpeg", "mpeg": "audio/mpeg", "flac": "audio/flac",
    "ogg": "audio/ogg", "oga": "audio/ogg", "opus": "audio/ogg", "aac": "audio/aac", "webm": "audio/webm",
    "mp4": "audio/mp4", "m4a": "audio/mp4",
}
_KIND_MIME = {"wav": "audio/wav", "mp3": "audio/mpeg", "flac": "audio/flac", "ogg": "audio/ogg", "aac": "audio/aac",
              "matroska": "audio/webm", "mp4": "audio/mp4"}
_GENERIC_TYPES = {"", "application/octet-stream", "binary/octet-stream", "application/unknown"}

# Container kind (from magic bytes) -> ffmpeg demuxer, for the formats libsndfile cannot read.
_FFMPEG_FORMAT = {"wav": "wav", "mp3": "mp3", "flac": "flac", "ogg": "ogg", "aac": "aac", "matroska": "matroska",
                  "mp4": "mp4", "aiff": "aiff", "caf": "caf"}
_SOUNDFILE_KINDS = {"wav", "flac", "ogg", "mp3", "aiff", "caf"}

# The reference-audio limits live in each family's FamilyRules; without a family (uploads: a voice
# may serve any served family) the widest of them apply.
MIN_SAMPLE_RATE = ref_audio_bounds().min_rate
MAX_SAMPLE_RATE = ref_audio_bounds().max_rate
# Header durations of some containers are estimates (ADTS AAC: from the bit rate); the exact limit
# is enforced while decoding, the header check only has to catch the gross cases early.
_HEADER_SLACK = 1.02
_HEADER_SLACK_S = 0.25


def resolve_mime_type(
    content_type: str | None, filename: str | None, param: str = "audio_sample", data: bytes | None = None
) -> str:
    """Canonical MIME type of an upload: its Content-Type, else its file extension, else its bytes."""
    ctype = (content_type or "").split(";", 1)[0].strip().lower()
    if ctype not in _GENERIC_TYPES:
        mime = _MIME_ALIASES.get(ctype)
        if mime is None:
            raise InvalidRequest(
                f"Unsupported audio format {ctype!r}. Supported formats: wav, mp3, flac, ogg, aac, webm, mp4", param
            )
        return mime
    ext = (filename or "").rsplit(".", 1)[-1].lower() if "." in (filename or "") else ""
    mime = _EXT_MIME.get(ext) or (_KIND_MIME.get(sniff_container(data) or "") if data else None)
    if mime is None:
        raise InvalidRequest(
            f"Cannot tell the audio format of {filename or 'the upload'!r}: send a Content-Type or a file "
            "extension of wav, mp3, flac, ogg, aac, webm or mp4",
            param,
        )
    return mime


def sniff_container(data: bytes) -> str | None:
    """Container kind from magic bytes: wav, flac, ogg, mp3, aac, matroska, mp4, aiff, caf; else None."""
    head = data[:64]
    if len(head) < 4:
        return None
    if head[:4] in (b"RIFF", b"RIFX", b"RF64") and head[8:12] == b"WAVE":
        return "wav"
    if head[:4] == b"fLaC":
        return "flac"
    if head[:4] == b"OggS":
        return "ogg"
    if head[:4] == b"\x1a\x45\xdf\xa3":
        return "matroska"
    if head[4:8] == b"ftyp":
        return "mp4"
    if head[:4] == b"FORM" and head[8:12] in (b"AIFF", b"AIFC"):
        return "aiff"
    if head[:4] == b"caff":
        return "caf"
    if head[:4] == b"ADIF":
        return "aac"
    if head[:3] == b"ID3":
        return "mp3"  # an ID3v2 tag precedes MPEG audio (rarely AAC; the mp3 demuxer then fails cleanly)
    if head[0] == 0xFF and (head[1] & 0xE0) == 0xE0:
        layer = (head[1] >> 1) & 0x3
        return "aac" if layer == 0 else "mp3"  # ADTS has layer bits 00, MPEG audio layers I-III do not
    return None


@dataclass(frozen=True)
class AudioInfo:
    container: str
    sample_rate: int
    channels: int
    duration_s: float | None  # None: the header does not say


def probe_audio(data: bytes, param: str = "audio_sample") -> AudioInfo:
    """Read only the header: container, rate, channels, duration. InvalidRequest when not audio."""
    kind = sniff_container(data)
    if kind is None:
        raise AudioDecodeError("Uploaded file is not a supported audio file (wav, mp3, flac, ogg, aac, webm, mp4)", param)
    if kind in _SOUNDFILE_KINDS:
        info = _probe_soundfile(data)
        if info is not None:
            return AudioInfo(kind, *info)
    return _probe_av(data, kind, param)


def _probe_soundfile(data: bytes) -> tuple[int, int, float | None] | None:
    import soundfile as sf

    try:
        info = sf.info(io.BytesIO(data))
    except Exception:  # libsndfile cannot read it; PyAV may
        return None
    frames = int(info.frames)
    duration = frames / info.samplerate if 0 < frames < 2**62 and info.samplerate > 0 else None
    return int(info.samplerate), int(info.channels), duration


def _open_av(data: bytes, kind: str, param: str):  # type: ignore[no-untyped-def]
    import av

    try:
        container = av.open(io.BytesIO(data), mode="r", format=_FFMPEG_FORMAT[kind])
    except Exception as exc:  # PyAV raises many error types for bad input
        raise AudioDecodeError(f"Could not decode audio file: {exc}", param) from None
    if not container.streams.audio:
        container.close()
        raise AudioDecodeError("Uploaded file has no audio stream", param)
    return container


def _probe_av(data: bytes, kind: str, param: str) -> AudioInfo:
    container = _open_av(data, kind, param)
    try:
        stream = container.streams.audio[0]
        ctx = stream.codec_context
        duration: float | None = None
        if stream.duration is not None and stream.time_base is not None:
            duration = float(stream.duration * stream.time_base)
        elif container.duration is not None:
            duration = container.duration / 1_000_000  # AV_TIME_BASE
        channels = int(getattr(ctx, "channels", 0) or (ctx.layout.nb_channels if ctx.layout else 0) or 1)
        return AudioInfo(kind, int(ctx.sample_rate or 0), channels, duration)
    finally:
        container.close()


def check_header_duration(info: AudioInfo, max_seconds: float, param: str = "audio_sample") -> None:
    if info.duration_s is not None and info.duration_s > max_seconds * _HEADER_SLACK + _HEADER_SLACK_S:
        raise InvalidRequest(
            f"Reference audio too long ({info.duration_s:.1f}s). Maximum {max_seconds:g}s supported — use a shorter clip.",
            param,
        )


def decode_audio(
    data: bytes,
    *,
    max_seconds: float,
    min_seconds: float = 0.0,
    param: str = "audio_sample",
    min_rate: int = MIN_SAMPLE_RATE,
    max_rate: int = MAX_SAMPLE_RATE,
) -> tuple[np.ndarray, int]:
    """Validate the header, then decode at most `max_seconds` of audio -> (float32 mono, sample rate)."""
    if not data:
        raise AudioDecodeError("Uploaded audio is empty", param)
    info = probe_audio(data, param)
    if not min_rate <= info.sample_rate <= max_rate:
        raise AudioDecodeError(f"Unsupported audio sample rate {info.sample_rate} Hz", param)
    check_header_duration(info, max_seconds, param)
    max_frames = math.floor(max_seconds * info.sample_rate)
    audio: np.ndarray | None = None
    sr = info.sample_rate
    if info.container in _SOUNDFILE_KINDS:
        audio = _decode_soundfile(data, max_frames)
    if audio is None:
        audio, sr = _decode_av(data, info.container, max_frames, param)
    if audio.shape[0] > max_frames:
        raise InvalidRequest(
            f"Reference audio too long (over {max_seconds:g}s). Maximum {max_seconds:g}s supported — use a shorter clip.",
            param,
        )
    mono = audio.mean(axis=1, dtype=np.float32) if audio.shape[1] > 1 else audio[:, 0]
    mono = np.ascontiguousarray(mono, dtype=np.float32)
    if mono.size == 0:
        raise AudioDecodeError("Uploaded audio has no samples", param)
    if not np.all(np.isfinite(mono)):
        raise AudioDecodeError("Uploaded audio contains non-finite samples", param)
    duration = mono.size / sr
    if duration < min_seconds:
        raise InvalidRequest(
            f"Reference audio too short ({duration:.1f}s). At least {min_seconds:g}s of clear speech is required.",
            param,
        )
    return mono, int(sr)


def _decode_soundfile(data: bytes, max_frames: int) -> np.ndarray | None:
    """[frames, channels] float32, at most max_frames + 1 frames (one more tells 'too long'); None if unreadable."""
    import soundfile as sf

    try:
        with sf.SoundFile(io.BytesIO(data)) as f:
            out = f.read(frames=max_frames + 1, dtype="float32", always_2d=True)
    except Exception:  # fall back to PyAV
        return None
    return np.asarray(out, dtype=np.float32)


def _decode_av(data: bytes, kind: str, max_frames: int, param: str) -> tuple[np.ndarray, int]:
    import av

    container = _open_av(data, kind, param)
    chunks: list[np.ndarray] = []
    total = 0
    sr = 0
    try:
        stream = container.streams.audio[0]
        resampler = av.AudioResampler(format="fltp")  # planar float, layout and rate unchanged
        for frame in container.decode(stream):
            if sr == 0:
                sr = int(frame.sample_rate)
            elif int(frame.sample_rate) != sr:
                raise AudioDecodeError("Audio changes sample rate mid-stream", param)
            for out in resampler.resample(frame):
                arr = out.to_ndarray()  # [channels, samples]
                chunks.append(np.ascontiguousarray(arr.T, dtype=np.float32))
                total += arr.shape[1]
            if total > max_frames:
                break  # enough to know it is too long; stop decoding
    except InvalidRequest:
        raise
    except Exception as exc:
        raise AudioDecodeError(f"Could not decode audio file: {exc}", param) from None
    finally:
        container.close()
    if not chunks or sr == 0:
        raise AudioDecodeError("Uploaded audio has no samples", param)
    channels = max(c.shape[1] for c in chunks)
    if any(c.shape[1] != channels for c in chunks):
        raise AudioDecodeError("Audio changes channel layout mid-stream", param)
    return np.concatenate(chunks, axis=0), sr
