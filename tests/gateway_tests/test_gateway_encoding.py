"""gateway.encoding, gateway.sse, gateway.usage: pure audio and framing logic."""

from __future__ import annotations

import base64
import io
import struct

import av
import numpy as np
import pytest
import soundfile as sf

from gateway import encoding, sse
from gateway.protocol import SpeechAudioDelta, SpeechAudioDone, SpeechAudioError
from gateway.usage import USAGE_HEADERS, Usage

pytestmark = pytest.mark.unit

SR = 24000


def tone(seconds: float = 1.0, freq: float = 440.0, rate: int = SR) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def dominant_hz(x: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(x.size)))
    return float(np.argmax(spectrum) * rate / x.size)


def decode_any(data: bytes) -> tuple[int, int]:
    """(samples, sample rate) as a player would decode it."""
    try:
        y, rate = sf.read(io.BytesIO(data))
        return len(y), int(rate)
    except Exception:  # libsndfile cannot read ADTS AAC
        with av.open(io.BytesIO(data)) as c:
            stream = c.streams.audio[0]
            n = sum(f.samples for f in c.decode(stream))
            return n, int(stream.sample_rate)


# --- 16-bit PCM and WAV ----------------------------------------------------------------------------


@pytest.mark.parametrize("signal", ["tone", "noise", "tiny", "loud"])
def test_wav_is_byte_identical_to_soundfile_pcm16(signal):
    rng = np.random.default_rng(0)
    x = {
        "tone": tone(),
        "noise": (rng.standard_normal(50000) * 0.4).astype(np.float32),
        "tiny": (rng.standard_normal(5000) * 1e-6).astype(np.float32),  # rounding near zero
        "loud": (rng.standard_normal(5000) * 3).astype(np.float32),  # clipping
    }[signal]
    ref = io.BytesIO()
    sf.write(ref, x, SR, subtype="PCM_16", format="WAV")
    assert encoding.encode(x, SR, "wav") == ref.getvalue()
    assert encoding.encode(x, SR, "pcm") == ref.getvalue()[44:]


def test_streaming_wav_header_has_unknown_length_marker():
    header = encoding.wav_header(16000, None)
    assert len(header) == 44 and header[:4] == b"RIFF" and header[8:16] == b"WAVEfmt "
    riff_size, = struct.unpack_from("<I", header, 4)
    data_size, = struct.unpack_from("<I", header, 40)
    assert riff_size == data_size == 0xFFFFFFFF
    rate, = struct.unpack_from("<I", header, 24)
    assert rate == 16000
    full = encoding.wav_header(16000, 100)
    assert struct.unpack_from("<I", full, 4)[0] == 136 and struct.unpack_from("<I", full, 40)[0] == 100


def test_parse_wav_reads_streamed_and_whole_files():
    x = tone(0.1)
    rate, samples = encoding.parse_wav(encoding.encode(x, SR, "wav"))
    assert rate == SR and np.array_equal(samples, encoding.to_int16(x))
    enc = encoding.StreamEncoder("wav", SR, SR)
    streamed = enc.start() + enc.chunk(x[:1000]) + enc.chunk(x[1000:]) + enc.finish()
    rate, samples = encoding.parse_wav(streamed)
    assert rate == SR and np.array_equal(samples, encoding.to_int16(x))


def test_heard_is_what_a_client_reads_back_from_the_pcm_clipped_at_full_scale():
    x = np.concatenate([tone(0.05), np.array([1.7, -2.5, 0.999999, -1.0], np.float32)])
    got = encoding.heard(x)
    _, samples = encoding.parse_wav(encoding.encode(x, SR, "wav"))
    assert got.dtype == np.float32 and np.array_equal(got, samples.astype(np.float32) / 32768)
    assert got.max() < 1.0 and got.min() == -1.0  # the model's overshoot is not what the client hears


# --- compressed formats: right rate, right duration ------------------------------------------------


@pytest.mark.parametrize("fmt", ["wav", "flac", "mp3", "opus", "aac", "pcm"])
@pytest.mark.parametrize("rate", [8000, 16000, 22050, 24000, 44100, 48000])
def test_every_format_decodes_to_the_requested_rate_and_duration(fmt, rate):
    if rate not in encoding.sample_rates(fmt):
        pytest.skip(f"{fmt} cannot carry {rate} Hz (400 at the API)")
    data = encoding.render(tone(1.0), SR, fmt, rate)
    if fmt == "pcm":
        assert len(data) == 2 * rate
        return
    n, got_rate = decode_any(data)
    # (Ogg Opus: libsndfile decodes at the input rate in the header; ffmpeg always gives 48 kHz)
    assert got_rate == rate
    if fmt in ("wav", "flac", "opus"):
        assert n == rate  # exact (Opus pre-skip is signalled in the header)
    else:
        # MP3 / ADTS cannot signal encoder delay and padding: at most a few codec frames more.
        assert rate <= n <= rate + 3 * 1152


def test_empty_audio_encodes_without_error():
    for fmt in encoding.MEDIA_TYPES:
        data = encoding.encode(np.zeros(0, np.float32), SR, fmt)
        assert isinstance(data, bytes)


def test_media_types_follow_openai():
    assert encoding.MEDIA_TYPES == {
        "wav": "audio/wav", "pcm": "audio/pcm", "flac": "audio/flac", "mp3": "audio/mpeg",
        "opus": "audio/ogg", "aac": "audio/aac", "ulaw": "audio/wav", "alaw": "audio/wav",
    }
    assert encoding.media_type("ulaw", streamed=True) == "audio/basic"
    assert encoding.media_type("alaw", streamed=True) == "audio/x-alaw-basic"
    assert encoding.media_type("pcm", streamed=True) == "audio/pcm"


def test_g711_is_bit_identical_to_the_reference_encoder():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import audioop
    x = np.arange(-32768, 32768, dtype=np.int16)
    assert encoding.lin2ulaw(x).tobytes() == audioop.lin2ulaw(x.tobytes(), 2)
    assert encoding.lin2alaw(x).tobytes() == audioop.lin2alaw(x.tobytes(), 2)


@pytest.mark.parametrize("fmt", ["ulaw", "alaw"])
def test_g711_streamed_equals_the_whole_file_data(fmt):
    pcm = tone(0.7)
    whole = encoding.render(pcm, SR, fmt, 8000)
    enc = encoding.StreamEncoder(fmt, SR, 8000)
    streamed = enc.start() + b"".join(enc.chunk(c) for c in np.array_split(pcm, 7)) + enc.finish()
    assert whole[58:] == streamed and len(streamed) == round(pcm.size / 3)
    assert encoding.default_rate(fmt, SR) == 8000 and encoding.default_rate("wav", SR) == SR
    assert list(encoding.sample_rates(fmt)) == [8000]


def test_rate_sets():
    assert 22050 not in encoding.sample_rates("opus") and 48000 in encoding.sample_rates("opus")
    assert 11025 in encoding.sample_rates("wav") and 7999 not in encoding.sample_rates("wav")
    assert 96000 not in encoding.sample_rates("flac")


# --- resampling and speed -------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [8000, 16000, 22050, 44100, 48000])
def test_chunked_resampling_equals_one_shot(rate):
    x = np.random.default_rng(1).standard_normal(SR * 2).astype(np.float32) * 0.2
    whole = encoding.resample(x, SR, rate)
    r = encoding.Resampler(SR, rate)
    sizes = [1920, 17, 5000, 1, 48000]
    parts, i, k = [], 0, 0
    while i < x.size:
        n = sizes[k % len(sizes)]
        parts.append(r.feed(x[i:i + n]))
        i, k = i + n, k + 1
    parts.append(r.feed(np.zeros(0, np.float32), last=True))
    assert np.array_equal(np.concatenate(parts), whole)
    assert whole.size == round(x.size * rate / SR)


def test_stream_encoder_equals_whole_clip():
    x = tone(0.5) + np.random.default_rng(2).standard_normal(SR // 2).astype(np.float32) * 0.01
    for fmt in ("pcm", "wav"):
        for rate in (SR, 16000):
            enc = encoding.StreamEncoder(fmt, SR, rate)
            chunks = [enc.start()] + [enc.chunk(c) for c in np.array_split(x, 7)] + [enc.finish()]
            assert b"".join(chunks)[44 if fmt == "wav" else 0:] == encoding.render(x, SR, "pcm", rate)


def decoded_samples(data: bytes, fmt: str) -> np.ndarray:
    """A stream's bytes as ffmpeg (PyAV) decodes them, however they end; mono float samples."""
    with av.open(io.BytesIO(data), format={"opus": "ogg", "mp3": "mp3"}[fmt]) as c:
        frames = [f.to_ndarray().reshape(-1) for f in c.decode(audio=0)]
    return np.concatenate(frames) if frames else np.zeros(0, np.float32)


@pytest.mark.parametrize("rate", [16000, 24000, 48000])
@pytest.mark.parametrize("fmt", ["mp3", "opus"])
def test_streamed_mp3_and_opus_decode_at_every_chunk_and_whole_as_the_file(fmt, rate):
    """Streamed compressed audio (issue 42): after every chunk, the bytes so far decode (a client that stops there
    keeps a playable prefix) and hold that chunk's audio but the codec's last partial frame; the whole stream
    decodes to the whole file's length (mp3: the file itself, byte for byte)."""
    x = tone(1.2) * np.float32(0.5)
    whole = encoding.render(x, SR, fmt, rate)
    enc = encoding.StreamEncoder(fmt, SR, rate)
    sent, fed, resampler = enc.start(), 0, encoding.Resampler(SR, rate)  # fed: samples the codec was given
    frame = {"mp3": 1152, "opus": 0.02 * 48000}[fmt]  # codec frame, in samples at the decoder's rate
    out_rate = 48000 if fmt == "opus" else rate  # ffmpeg decodes Opus at 48 kHz
    for part in np.array_split(x, 6):
        sent += enc.chunk(part)
        fed += resampler.feed(part).size
        got = decoded_samples(sent, fmt).size
        # everything the codec was given is out, but for up to ~two codec frames (its delay and partial frame)
        assert got >= fed * out_rate / rate - 3 * frame
    sent += enc.finish()
    if fmt == "mp3":
        assert sent == whole
    n_stream, n_whole = decoded_samples(sent, fmt).size, decoded_samples(whole, fmt).size
    assert abs(n_stream - n_whole) <= frame and abs(n_whole - x.size * out_rate / SR) <= 3 * frame
    assert encoding.media_type(fmt, streamed=True) == {"mp3": "audio/mpeg", "opus": "audio/ogg"}[fmt]


@pytest.mark.parametrize("speed", [0.25, 0.5, 1.5, 2.0, 4.0])
def test_speed_changes_duration_and_keeps_pitch(speed):
    x = tone(1.0, 440.0)
    y = encoding.change_speed(x, SR, speed)
    assert y.size == round(x.size / speed)
    assert abs(dominant_hz(y, SR) - 440.0) < 5.0


def test_render_applies_speed_then_rate():
    data = encoding.render(tone(1.0), SR, "wav", 16000, speed=2.0)
    n, rate = decode_any(data)
    assert rate == 16000 and n == 8000


# --- SSE and usage --------------------------------------------------------------------------------


def test_sse_events_round_trip_and_match_the_protocol():
    usage = Usage(text_tokens=18, audio_tokens=101, output_tokens=77)
    body = sse.delta(b"\x01\x02", "pcm") + sse.done(usage)
    assert body.startswith(b"event: speech.audio.delta\ndata: {")
    events = sse.parse(body)
    assert [name for name, _ in events] == ["speech.audio.delta", "speech.audio.done"]
    delta = SpeechAudioDelta.model_validate(events[0][1])
    assert base64.b64decode(delta.audio) == b"\x01\x02" and delta.response_format == "pcm"
    done = SpeechAudioDone.model_validate(events[1][1])
    assert done.usage.model_dump() == {
        "input_tokens": 119, "output_tokens": 77, "total_tokens": 196,
        "input_token_details": {"text_tokens": 18, "audio_tokens": 101},
    }
    err = sse.parse(sse.error({"message": "...", "type": "server_error", "param": None, "code": 500}))
    assert SpeechAudioError.model_validate(err[0][1]).error.code == 500


def test_usage_headers_and_object_agree():
    u = Usage.from_tensor(np.array([18, 101, 77], np.int32))
    assert u.headers() == {
        "x-vllm-omni-input-tokens": "119", "x-vllm-omni-output-tokens": "77", "x-vllm-omni-total-tokens": "196",
        "x-vllm-omni-input-text-tokens": "18", "x-vllm-omni-input-audio-tokens": "101",
    }
    assert tuple(u.headers()) == USAGE_HEADERS
    assert u.as_dict()["total_tokens"] == 196
